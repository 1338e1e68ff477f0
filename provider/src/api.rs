//! Safe wrappers over the parts of the ORT C API the op uses. Every status-returning call goes through
//! `ort![unsafe Function(args)]`, which turns a returned `OrtStatus` into an [`Error`] (and releases it); each
//! such call site carries its own `// SAFETY:` comment.
//!
//! Bindings: `ort-sys` with `disable-linking` (hand-maintained, layout-checked Rust declarations of
//! `onnxruntime_c_api.h`). Chosen over bindgen because it needs no libclang and no C header at build time
//! (no registry ships the header; Debian's is 1.23), cross-compiles unchanged, and links nothing: the only
//! `OrtApi` we ever touch is the one ORT hands to `RegisterCustomOps`. The API version we request and the
//! `OrtCustomOp` layout we fill are pinned by our own [`API_VERSION`], never by `ort_sys::ORT_API_VERSION`,
//! which cargo feature unification may raise.

use crate::status::{Error, Result};
use ort_sys::{
    ONNXTensorElementDataType as Ty, OrtApi, OrtKernelContext, OrtKernelInfo, OrtLogger, OrtLoggingLevel, OrtOpAttr,
    OrtShapeInferContext, OrtStatus, OrtStatusPtr, OrtTensorTypeAndShapeInfo, OrtValue,
};
use std::borrow::Cow;
use std::ffi::{CStr, CString, c_char, c_void};
use std::ptr::{null, null_mut};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The ORT API version we request and the `OrtCustomOp` layout we fill (fields up to `GetEndVersion`).
/// 17 = ORT 1.17: the first with `KernelContext_ParallelFor`, `InferOutputShapeFn` and opset ranges.
pub const API_VERSION: u32 = 17;

struct ApiPtr(&'static OrtApi);

static API: OnceLock<ApiPtr> = OnceLock::new();

/// The loaded runtime's minor version (1.MINOR), set with the table.
static RUNTIME_MINOR: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Installs the API table ORT handed to `RegisterCustomOps` (first call wins: one ORT per process), and the
/// runtime's minor version, which says which entries past the requested API the table has.
pub fn init(api: &'static OrtApi, runtime_minor: u32) {
    let _ = API.set(ApiPtr(api));
    RUNTIME_MINOR.store(runtime_minor, std::sync::atomic::Ordering::Relaxed);
}

/// The loaded runtime's minor version (0 before [`init`]).
pub fn runtime_minor() -> u32 {
    RUNTIME_MINOR.load(std::sync::atomic::Ordering::Relaxed)
}

/// The API table. Only reachable after `RegisterCustomOps` succeeded, which is before ORT can call anything
/// else of ours.
pub fn api() -> &'static OrtApi {
    API.get().expect("nibble: ORT API used before RegisterCustomOps").0
}

/// Calls the status-returning `OrtApi` function `F` and converts its status with [`check`]:
/// `ort![unsafe F(args)]` is a `Result<()>`. Modelled on pykeio/ort's `ortsys![unsafe F(args)]`: the caller
/// writes `unsafe`, and writes a `// SAFETY:` comment on the line(s) directly above the line holding
/// `ort![unsafe`, saying why that call is sound: which pointers are valid and why, who owns what, for how long.
/// The arguments are evaluated inside the unsafe block, so keep them to plain pointers and locals.
///
/// Clippy's `undocumented_unsafe_blocks` cannot check those call-site comments, whatever the macro's shape
/// (checked on clippy 1.95):
/// - An `unsafe { .. }` written in the macro body (this shape) has a span in the macro definition, and for such
///   blocks the lint looks for `SAFETY:` only in the definition's text (between `macro_rules!` and the
///   `unsafe` line), never at the invocation. Hence the one SAFETY comment below, which refers to the call site.
/// - Passing the caller's token through (`($u:tt F(..)) => { $u { .. } }`) is worse: rustc gives the block the
///   span of `$u` in the macro text, which does not start with `unsafe`, so the lint takes the block for
///   proc-macro output and skips it: it would accept undocumented call sites as well as documented ones.
/// - Only a block whose `unsafe` and braces all come from the call site gets checked at the call site, and a
///   `macro_rules!` arm cannot both take such a block apart (to find `F`) and emit it; forwarding it to a second
///   arm that does loses the call-site spans again (the lint goes silent, as above).
///
/// So the call-site comments are enforced by `tests::every_ort_call_has_a_safety_comment` instead.
macro_rules! ort {
    (unsafe $f:ident ( $($arg:expr),* $(,)? )) => {{
        let api = $crate::api::api();
        // SAFETY: discharged at the call site: every `ort![unsafe ..]` has a SAFETY comment directly above it
        // (see the macro's documentation) for these exact arguments.
        let status: ::ort_sys::OrtStatusPtr = unsafe { (api.$f)($($arg),*) };
        $crate::api::check(status, stringify!($f))
    }};
}
pub(crate) use ort;

/// Converts a status into `Result`, releasing it.
pub fn check(status: OrtStatusPtr, what: &str) -> Result<()> {
    if status.0.is_null() {
        return Ok(());
    }
    let api = api();
    // SAFETY: a non-null status that an ORT call just returned to us; its message is a NUL-terminated string
    // that lives until ReleaseStatus, and we copy it first.
    let msg = unsafe { CStr::from_ptr((api.GetErrorMessage)(status.0)) }.to_string_lossy().into_owned();
    // SAFETY: the caller of an ORT function owns the status it returns; we release it exactly once, here, and
    // do not use it afterwards.
    unsafe { (api.ReleaseStatus)(status.0) };
    Err(Error::fail(format!("ORT {what} failed: {msg}")))
}

/// Creates an `OrtStatus` for ORT from an error (null for Ok).
pub fn to_status(r: Result<()>) -> *mut OrtStatus {
    match r {
        Ok(()) => null_mut(),
        Err(e) => make_status(api(), &e),
    }
}

/// Creates an `OrtStatus` with `api` (also usable before `init`).
pub fn make_status(api: &OrtApi, e: &Error) -> *mut OrtStatus {
    let code = match e.code {
        crate::status::ErrorCode::InvalidArgument => ort_sys::OrtErrorCode::ORT_INVALID_ARGUMENT,
        crate::status::ErrorCode::Fail => ort_sys::OrtErrorCode::ORT_FAIL,
    };
    let msg = CString::new(e.message.replace('\0', " ")).expect("NULs replaced");
    // SAFETY: `api` is a valid ORT table (a `&OrtApi` from ORT); `msg` is NUL-terminated and outlives the call,
    // which copies it. ORT takes ownership of the status we return.
    unsafe { (api.CreateStatus)(code, msg.as_ptr()) }.0
}

/// Element types the op deals with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    F32,
    F16,
    U8,
    I32,
    /// Declared type "any" (UNDEFINED): we check the actual type ourselves, with a better message than ORT's.
    Any,
    Other(i32),
}

impl Dtype {
    pub fn from_ort(t: Ty) -> Dtype {
        match t {
            Ty::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT => Dtype::F32,
            Ty::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16 => Dtype::F16,
            Ty::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8 => Dtype::U8,
            Ty::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32 => Dtype::I32,
            other => Dtype::Other(other as i32),
        }
    }

    pub fn to_ort(self) -> Ty {
        match self {
            Dtype::F32 => Ty::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT,
            Dtype::F16 => Ty::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16,
            Dtype::U8 => Ty::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8,
            Dtype::I32 => Ty::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32,
            Dtype::Any | Dtype::Other(_) => Ty::ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED,
        }
    }

    pub fn name(self) -> String {
        match self {
            Dtype::F32 => "float".into(),
            Dtype::F16 => "float16".into(),
            Dtype::U8 => "uint8".into(),
            Dtype::I32 => "int32".into(),
            Dtype::Any => "any".into(),
            Dtype::Other(t) => onnx_type_name(t),
        }
    }

    fn size(self) -> usize {
        match self {
            Dtype::F32 | Dtype::I32 => 4,
            Dtype::F16 => 2,
            Dtype::U8 => 1,
            Dtype::Any | Dtype::Other(_) => 0,
        }
    }
}

/// ONNX's name for a TensorProto element type, as ORT prints it (`tensor(int8)` → "int8").
fn onnx_type_name(t: i32) -> String {
    const NAMES: [&str; 24] = [
        "undefined",
        "float",
        "uint8",
        "int8",
        "uint16",
        "int16",
        "int32",
        "int64",
        "string",
        "bool",
        "float16",
        "double",
        "uint32",
        "uint64",
        "complex64",
        "complex128",
        "bfloat16",
        "float8e4m3fn",
        "float8e4m3fnuz",
        "float8e5m2",
        "float8e5m2fnuz",
        "uint4",
        "int4",
        "float4e2m1",
    ];
    usize::try_from(t)
        .ok()
        .and_then(|i| NAMES.get(i))
        .map_or_else(|| format!("ONNX element type {t}"), |n| n.to_string())
}

/// Type and shape of a tensor info; releases it if `owned` (GetTensorTypeAndShape hands out an info the
/// caller owns; ShapeInferContext_GetInputTypeShape one the context owns).
///
/// # Safety
/// `info` is a live tensor type-and-shape info. If `owned`, the caller owns it and hands it over (it is released
/// here, on every path); otherwise its owner keeps it alive until this returns.
unsafe fn type_and_shape(info: *mut OrtTensorTypeAndShapeInfo, owned: bool) -> Result<(Dtype, Vec<i64>)> {
    struct Guard(*mut OrtTensorTypeAndShapeInfo, bool);
    impl Drop for Guard {
        fn drop(&mut self) {
            if self.1 {
                // SAFETY: the caller handed us ownership of the info (this function's contract), and this guard
                // is its only owner, dropped once, so it is released exactly once and never used after.
                unsafe { (api().ReleaseTensorTypeAndShapeInfo)(self.0) }
            }
        }
    }
    let g = Guard(info, owned);
    let mut ty = Ty::ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    // SAFETY: `g.0` is live until `g` drops at the end of this function (contract); `ty` is a writable local.
    ort![unsafe GetTensorElementType(g.0, &mut ty)]?;
    let mut n = 0usize;
    // SAFETY: `g.0` is live (as above); `n` is a writable local.
    ort![unsafe GetDimensionsCount(g.0, &mut n)]?;
    let mut dims = vec![0i64; n];
    // SAFETY: `g.0` is live (as above); `dims` has room for exactly the `n` dims ORT writes.
    ort![unsafe GetDimensions(g.0, dims.as_mut_ptr(), n)]?;
    Ok((Dtype::from_ort(ty), dims))
}

/// A read-only view of an ORT tensor, valid for `'a` (the callback that handed it out).
#[derive(Debug, Clone)]
pub struct Tensor<'a> {
    pub dtype: Dtype,
    pub shape: Vec<i64>,
    data: &'a [u8],
}

impl<'a> Tensor<'a> {
    /// # Safety
    /// `value` is a tensor OrtValue alive, and not written to, for `'a`.
    pub(crate) unsafe fn from_value(value: *const OrtValue) -> Result<Tensor<'a>> {
        let mut info = null_mut();
        // SAFETY: `value` is a live tensor (contract); `info` is a writable local that receives a new info we
        // own, handed to `type_and_shape` next, which releases it.
        ort![unsafe GetTensorTypeAndShape(value, &mut info)]?;
        // SAFETY: `info` is the live info GetTensorTypeAndShape just returned, and we own it: `owned = true`.
        let (dtype, shape) = unsafe { type_and_shape(info, true) }?;
        let bytes = byte_size(dtype, &shape)?;
        let data: &'a [u8] = if bytes == 0 {
            &[]
        } else {
            let mut p: *mut c_void = null_mut();
            // SAFETY: `value` is a live tensor (contract). The API takes `*mut` but only reports the data
            // pointer, it does not modify the value, and we only ever read through `p`; `p` is a writable local.
            ort![unsafe GetTensorMutableData(value.cast_mut(), &mut p)]?;
            // SAFETY: ORT tensors hold `count` contiguous elements of `dtype` at `p`, alive and unchanged for 'a
            // (contract); `bytes` is their size.
            unsafe { std::slice::from_raw_parts(p.cast::<u8>(), bytes) }
        };
        Tensor::from_bytes(dtype, shape, data)
    }

    /// A tensor of `dtype` and `shape` over `data` (little-endian elements), which must hold exactly the
    /// shape's elements: what ORT hands over, or a tensor described without ORT (`crate::fuzzing`).
    pub fn from_bytes(dtype: Dtype, shape: Vec<i64>, data: &'a [u8]) -> Result<Tensor<'a>> {
        let bytes = byte_size(dtype, &shape)?;
        if data.len() != bytes {
            return Err(Error::fail(format!(
                "tensor of {} {shape:?} needs {bytes} bytes, got {}",
                dtype.name(),
                data.len()
            )));
        }
        Ok(Tensor { dtype, shape, data })
    }

    pub fn f32s(&self) -> Cow<'a, [f32]> {
        assert_eq!(self.dtype, Dtype::F32);
        cast_slice(self.data, f32::from_le_bytes)
    }

    pub fn f16s(&self) -> Cow<'a, [half::f16]> {
        assert_eq!(self.dtype, Dtype::F16);
        cast_slice(self.data, half::f16::from_le_bytes)
    }

    pub fn u8s(&self) -> &'a [u8] {
        assert_eq!(self.dtype, Dtype::U8);
        self.data
    }

    pub fn i32s(&self) -> Cow<'a, [i32]> {
        assert_eq!(self.dtype, Dtype::I32);
        cast_slice(self.data, i32::from_le_bytes)
    }

    /// The values as f32, for float and float16 tensors.
    pub fn to_f32_vec(&self) -> Vec<f32> {
        match self.dtype {
            Dtype::F32 => self.f32s().into_owned(),
            Dtype::F16 => self.f16s().iter().map(|x| x.to_f32()).collect(),
            other => panic!("to_f32_vec on {}", other.name()),
        }
    }
}

/// The size in bytes of a tensor of `dtype` and `shape`, or an error for a negative dimension or an overflowing
/// size.
fn byte_size(dtype: Dtype, shape: &[i64]) -> Result<usize> {
    let count = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(usize::try_from(d).ok()?));
    count
        .and_then(|c| c.checked_mul(dtype.size()))
        .ok_or_else(|| Error::fail(format!("tensor with invalid shape {shape:?}")))
}

/// Views the bytes of an ORT tensor as its element type: borrowed when aligned (ORT's allocations always
/// are), copied otherwise (an initializer could in principle sit unaligned in a mapped file).
fn cast_slice<T: Copy, const N: usize>(bytes: &[u8], from_le: fn([u8; N]) -> T) -> Cow<'_, [T]> {
    debug_assert_eq!(N, std::mem::size_of::<T>());
    if bytes.is_empty() {
        return Cow::Borrowed(&[]);
    }
    if bytes.len().is_multiple_of(N) && bytes.as_ptr().align_offset(std::mem::align_of::<T>()) == 0 {
        // SAFETY: length and alignment checked; T is a plain number type (f32, f16, i32) valid for any bits,
        // and ORT only runs on little-endian hosts here, so the in-memory order is the tensor's.
        return Cow::Borrowed(unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<T>(), bytes.len() / N) });
    }
    Cow::Owned(bytes.chunks_exact(N).map(|c| from_le(c.try_into().expect("chunk of N"))).collect())
}

/// Reads a string through ORT's two-call convention: `f(null, &mut size)` asks for the size (NUL included),
/// then `f(buf, &mut size)` fills `buf`, which has room for `size` bytes. `f` passes both pointers on to ORT.
fn read_string(mut f: impl FnMut(*mut c_char, *mut usize) -> Result<()>) -> Result<String> {
    let mut size = 0usize;
    f(null_mut(), &mut size)?;
    let mut buf = vec![0u8; size.max(1)];
    f(buf.as_mut_ptr().cast(), &mut size)?;
    let s = CStr::from_bytes_until_nul(&buf).map_err(|_| Error::fail("ORT string not NUL-terminated"))?;
    Ok(s.to_string_lossy().into_owned())
}

/// The error for an attribute that must be an int but has type `t` (`float 1.5`, `string`, ...).
pub fn not_an_int(name: &str, t: &str) -> Error {
    Error::invalid(format!("attribute {name} is {t}, but must be an int"))
}

/// What ORT knows about a node while its kernel is being created.
#[derive(Clone, Copy)]
pub struct KernelInfo<'a> {
    raw: *const OrtKernelInfo,
    _life: std::marker::PhantomData<&'a OrtKernelInfo>,
}

impl<'a> KernelInfo<'a> {
    /// # Safety
    /// `raw` is the kernel info of the current CreateKernel call, and `'a` ends before that call returns.
    pub unsafe fn new(raw: *const OrtKernelInfo) -> Self {
        KernelInfo { raw, _life: std::marker::PhantomData }
    }

    pub fn node_name(&self) -> Result<String> {
        // SAFETY: `self.raw` is live for 'a (`new`'s contract); `buf` and `size` follow `read_string`'s convention
        // (null for the size query, then a buffer of `size` bytes).
        read_string(|buf, size| ort![unsafe KernelInfo_GetNodeName(self.raw, buf, size)])
    }

    /// An int attribute, None if the node does not have it, or an error naming the type it has instead.
    pub fn attr_i64(&self, name: &str) -> Result<Option<i64>> {
        let cname = CString::new(name).expect("attribute names have no NUL");
        let mut v = 0i64;
        // SAFETY: `self.raw` is live for 'a (`new`'s contract); `cname` is NUL-terminated and outlives the call;
        // `v` is a writable local.
        if ort![unsafe KernelInfoGetAttribute_int64(self.raw, cname.as_ptr(), &mut v)].is_ok() {
            return Ok(Some(v));
        }
        // Absent, or present with another type: ORT answers both with an error status, so probe the types.
        let is_string = || {
            // SAFETY: `self.raw` and `cname` as above; `buf` and `size` follow `read_string`'s convention.
            read_string(|buf, size| ort![unsafe KernelInfoGetAttribute_string(self.raw, cname.as_ptr(), buf, size)])
                .is_ok()
        };
        let is_int_list = || {
            let mut n = 0usize;
            // SAFETY: `self.raw` and `cname` as above; a null output buffer asks only for the length, written
            // to the local `n`.
            ort![unsafe KernelInfoGetAttributeArray_int64(self.raw, cname.as_ptr(), null_mut(), &mut n)].is_ok()
        };
        let mut f = 0f32;
        // SAFETY: `self.raw` and `cname` as above; `f` is a writable local.
        let wrong = if ort![unsafe KernelInfoGetAttribute_float(self.raw, cname.as_ptr(), &mut f)].is_ok() {
            Some(format!("float {f}"))
        } else if is_string() {
            Some("string".to_string())
        } else {
            is_int_list().then(|| "a list of ints".to_string())
        };
        match wrong {
            Some(t) => Err(not_an_int(name, &t)),
            None => Ok(None),
        }
    }

    pub fn input_count(&self) -> Result<usize> {
        let mut n = 0usize;
        // SAFETY: `self.raw` is live for 'a (`new`'s contract); `n` is a writable local.
        ort![unsafe KernelInfo_GetInputCount(self.raw, &mut n)]?;
        Ok(n)
    }

    /// Whether input `i` exists (optional inputs may be absent or given as an empty name).
    pub fn has_input(&self, i: usize) -> Result<bool> {
        if i >= self.input_count()? {
            return Ok(false);
        }
        // SAFETY: `self.raw` is live for 'a (`new`'s contract); `i` is in range (checked above, and ORT checks it
        // too); `buf` and `size` follow `read_string`'s convention.
        Ok(!read_string(|buf, size| ort![unsafe KernelInfo_GetInputName(self.raw, i, buf, size)])?.is_empty())
    }

    /// The element type of input `i` as the graph declares it (UNDEFINED if not a tensor).
    pub fn input_dtype(&self, i: usize) -> Result<Dtype> {
        let mut type_info: *mut ort_sys::OrtTypeInfo = null_mut();
        // SAFETY: `self.raw` is live for 'a (`new`'s contract); `type_info` is a writable local that receives a
        // new type info we own (released below on every path). ORT checks `i`.
        ort![unsafe KernelInfo_GetInputTypeInfo(self.raw, i, &mut type_info)]?;
        struct Owned(*mut ort_sys::OrtTypeInfo);
        impl Drop for Owned {
            fn drop(&mut self) {
                // SAFETY: the info KernelInfo_GetInputTypeInfo handed us, owned only by this guard, released once.
                unsafe { (api().ReleaseTypeInfo)(self.0) }
            }
        }
        let owned = Owned(type_info);
        let mut tensor_info: *const OrtTensorTypeAndShapeInfo = null();
        // SAFETY: `owned.0` is the live type info above; `tensor_info` is a writable local that receives a view
        // owned by the type info (null if not a tensor).
        ort![unsafe CastTypeInfoToTensorInfo(owned.0, &mut tensor_info)]?;
        if tensor_info.is_null() {
            return Ok(Dtype::from_ort(Ty::ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED));
        }
        // SAFETY: a view owned by `owned`, which outlives this call: `owned = false`.
        let (dtype, _) = unsafe { type_and_shape(tensor_info.cast_mut(), false) }?;
        Ok(dtype)
    }

    /// Input `i` if it is a constant initializer (one a graph input cannot override), else None.
    pub fn constant_input(&self, i: usize) -> Result<Option<Tensor<'a>>> {
        let mut is_constant = 0;
        let mut value: *const OrtValue = null();
        // SAFETY: `self.raw` is live for 'a (`new`'s contract); `is_constant` and `value` are writable locals
        // (ORT checks `i`). The value returned stays owned by ORT.
        ort![unsafe KernelInfoGetConstantInput_tensor(self.raw, i, &mut is_constant, &mut value)]?;
        if is_constant == 0 || value.is_null() {
            return Ok(None);
        }
        // SAFETY: a tensor; ORT keeps constant initializers alive and unchanged for the whole kernel creation
        // ('a, which ends before CreateKernel returns).
        unsafe { Tensor::from_value(value) }.map(Some)
    }

    /// Logs at INFO severity through the session's logger (ORT filters by the session's level).
    pub fn log_info(&self, message: &str) -> Result<()> {
        let mut logger: *const OrtLogger = null();
        // SAFETY: `self.raw` is live for 'a (`new`'s contract); `logger` is a writable local. The logger
        // returned is owned by the kernel info and lives at least as long.
        ort![unsafe KernelInfo_GetLogger(self.raw, &mut logger)]?;
        // SAFETY: `logger` came from KernelInfo_GetLogger above and lives as long as `self.raw`.
        unsafe { log_info(logger, message, c"provider/src/matmul_nbits.rs", c"MatMulNBits::create") }
    }
}

/// Logs `message` at INFO severity through `logger` (ORT filters by the session's level), as written at `file`
/// in `function`.
///
/// # Safety
/// `logger` is a live ORT logger for the duration of the call.
pub unsafe fn log_info(logger: *const OrtLogger, message: &str, file: &CStr, function: &CStr) -> Result<()> {
    let msg = CString::new(message.replace('\0', " ")).expect("NULs replaced");
    // SAFETY: `logger` is live (this function's contract); `msg`, `file` and `function` are NUL-terminated and
    // outlive the call, which copies what it keeps.
    ort![unsafe Logger_LogMessage(
        logger,
        OrtLoggingLevel::ORT_LOGGING_LEVEL_INFO,
        msg.as_ptr(),
        file.as_ptr(),
        0,
        function.as_ptr()
    )]
}

/// The value of an int attribute.
///
/// # Safety
/// `attr` is a live attribute (owned by its node or context) for the duration of the call.
pub unsafe fn read_int_attr(attr: *const OrtOpAttr) -> Result<i64> {
    let (mut v, mut out) = (0i64, 0usize);
    let p = (&mut v as *mut i64).cast::<c_void>();
    // SAFETY: `attr` is live (this function's contract); `p` points to `v`, writable for the size of an i64 (the
    // length we pass); `out` is a writable local.
    ort![unsafe ReadOpAttr(attr, ort_sys::OrtOpAttrType::ORT_OP_ATTR_INT, p, size_of::<i64>(), &mut out)]?;
    Ok(v)
}

/// The context of one Compute call.
pub struct KernelContext<'a> {
    raw: *mut OrtKernelContext,
    /// The output's elements are handed out at most once (a second `&mut` to them would alias).
    output_taken: std::cell::Cell<bool>,
    _life: std::marker::PhantomData<&'a mut OrtKernelContext>,
}

impl<'a> KernelContext<'a> {
    /// # Safety
    /// `raw` is the context of the current Compute call, and `'a` ends before that call returns.
    pub unsafe fn new(raw: *mut OrtKernelContext) -> Self {
        KernelContext { raw, output_taken: std::cell::Cell::new(false), _life: std::marker::PhantomData }
    }

    /// Input `i`, or None if the optional input is absent.
    pub fn input(&self, i: usize) -> Result<Option<Tensor<'a>>> {
        let mut n = 0usize;
        // SAFETY: `self.raw` is live for 'a (`new`'s contract); `n` is a writable local.
        ort![unsafe KernelContext_GetInputCount(self.raw, &mut n)]?;
        if i >= n {
            return Ok(None);
        }
        let mut value: *const OrtValue = null();
        // SAFETY: `self.raw` is live for 'a; `i < n` (checked above); `value` is a writable local. The input
        // returned stays owned by ORT.
        ort![unsafe KernelContext_GetInput(self.raw, i, &mut value)]?;
        if value.is_null() {
            return Ok(None);
        }
        // SAFETY: a tensor (the op declares only tensor inputs); inputs live, unchanged, for the whole Compute
        // call ('a, which ends before Compute returns).
        unsafe { Tensor::from_value(value) }.map(Some)
    }

    /// Allocates output `i` with `shape` and element type `dtype` (the op variant's: f32 or f16). Once per call.
    pub fn output(&self, i: usize, shape: &[i64], dtype: Dtype) -> Result<Output<'a>> {
        if self.output_taken.replace(true) {
            return Err(Error::fail("output requested twice in one call"));
        }
        let mut value: *mut OrtValue = null_mut();
        // SAFETY: `self.raw` is live for 'a (`new`'s contract); `shape` is `shape.len()` readable dims, which ORT
        // copies; `value` is a writable local. The output returned is owned by the context.
        ort![unsafe KernelContext_GetOutput(self.raw, i, shape.as_ptr(), shape.len(), &mut value)]?;
        let count: usize = shape.iter().map(|&d| d.max(0) as usize).product();
        let mut p: *mut c_void = null_mut();
        if count > 0 {
            // SAFETY: `value` is the output tensor GetOutput just returned, alive for the rest of the Compute
            // call; `p` is a writable local.
            ort![unsafe GetTensorMutableData(value, &mut p)]?;
            assert!(p.align_offset(4) == 0, "ORT output buffer misaligned");
        }
        // SAFETY: ORT allocated `count` elements of the output's declared type (`dtype`, fixed by the op
        // variant) at `p`, aligned (checked); nothing else accesses them during this Compute.
        unsafe {
            Ok(match dtype {
                _ if count == 0 => Output::F32(&mut []),
                Dtype::F32 => Output::F32(std::slice::from_raw_parts_mut(p.cast(), count)),
                Dtype::F16 => Output::F16(std::slice::from_raw_parts_mut(p.cast(), count)),
                other => return Err(Error::fail(format!("output of type {} not supported", other.name()))),
            })
        }
    }

    /// Runs `f(0..total)` on the session's intra-op thread pool (serially if it has none) and waits. A panic
    /// in `f` is caught on the worker and returned as an error after all tasks finish.
    pub fn parallel_for(&self, total: usize, f: &(dyn Fn(usize) + Sync)) -> Result<()> {
        if total <= 1 {
            return std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (0..total).for_each(f)))
                .map_err(|p| Error::panic("MatMulNBits tile", p));
        }
        struct Job<'f> {
            f: &'f (dyn Fn(usize) + Sync),
            panic: std::sync::Mutex<Option<Error>>,
        }
        unsafe extern "C" fn trampoline(data: *mut c_void, i: usize) {
            // SAFETY: `data` is the `Job` below, alive until ParallelFor returns.
            let job = unsafe { &*data.cast::<Job<'_>>() };
            if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (job.f)(i))) {
                let mut slot = job.panic.lock().unwrap_or_else(|e| e.into_inner());
                slot.get_or_insert_with(|| Error::panic("MatMulNBits tile", p));
            }
        }
        let job = Job { f, panic: std::sync::Mutex::new(None) };
        let data = (&job as *const Job<'_>).cast_mut().cast::<c_void>();
        // SAFETY: `self.raw` is live for 'a (`new`'s contract). ParallelFor calls `trampoline(data, i)` for each
        // `i < total` (num_batch 0: ORT chooses the batching), possibly on several threads, and returns only
        // after all calls finished, so `data` (our `job`, on this stack frame, only read through `&Job`, which
        // is Sync) outlives every call. `trampoline` never unwinds into ORT: it catches panics.
        ort![unsafe KernelContext_ParallelFor(self.raw, trampoline, total, 0, data)]?;
        match job.panic.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// An output tensor's elements.
pub enum Output<'a> {
    F32(&'a mut [f32]),
    F16(&'a mut [half::f16]),
}

/// A session config entry, or None if not set.
///
/// # Safety
/// `options` is a live session options of the ORT whose API `init` installed (the one ORT passed to
/// `RegisterCustomOps`, or to an EP's `CreateEp`).
pub unsafe fn session_config(options: *const ort_sys::OrtSessionOptions, key: &str) -> Result<Option<String>> {
    let ckey = CString::new(key).expect("config keys have no NUL");
    let mut has = 0;
    // SAFETY: `options` is live (this function's contract); `ckey` is NUL-terminated and outlives the call;
    // `has` is a writable local.
    ort![unsafe HasSessionConfigEntry(options, ckey.as_ptr(), &mut has)]?;
    if has == 0 {
        return Ok(None);
    }
    // SAFETY: `options` and `ckey` as above; `buf` and `size` follow `read_string`'s convention.
    read_string(|buf, size| ort![unsafe GetSessionConfigEntry(options, ckey.as_ptr(), buf, size)]).map(Some)
}

/// Sets session config entry `key` = `value` on `options`.
///
/// # Safety
/// As for [`session_config`].
pub unsafe fn set_session_config(options: *mut ort_sys::OrtSessionOptions, key: &str, value: &str) -> Result<()> {
    let (k, v) = (CString::new(key).expect("no NUL"), CString::new(value).expect("no NUL"));
    // SAFETY: `options` is live (this function's contract); both strings are NUL-terminated and outlive the call,
    // which copies them.
    ort![unsafe AddSessionConfigEntry(options, k.as_ptr(), v.as_ptr())]
}

/// `OrtApi` entries past API 17 read by index (ort-sys declares them only with features that would make the
/// `ort` crate refuse older runtimes); the layout test in `ep::abi` checks each against the vendored header.
pub(crate) mod index {
    /// `GetKeyValuePairs`, 1.22.
    pub const GET_KEY_VALUE_PAIRS: usize = 298;
    /// `ReleaseKeyValuePairs`, 1.22.
    pub const RELEASE_KEY_VALUE_PAIRS: usize = 300;
    /// `GetSessionOptionsConfigEntries`, 1.23.
    pub const GET_SESSION_OPTIONS_CONFIG_ENTRIES: usize = 379;
    /// `KernelInfo_GetConfigEntries`, 1.24.
    pub const KERNEL_INFO_GET_CONFIG_ENTRIES: usize = 391;
}

type Kvp = c_void;
type GetKvpFn = unsafe extern "system" fn(*const Kvp, *mut *const *const c_char, *mut *const *const c_char, *mut usize);
type ReleaseKvpFn = unsafe extern "system" fn(*mut Kvp);

/// Copies the entries of `kvps` (made by an ORT call that gave us ownership) and releases it.
///
/// # Safety
/// `kvps` is null or a live `OrtKeyValuePairs` we own; the runtime is ≥ 1.22 (the table has both entries).
unsafe fn take_key_value_pairs(kvps: *mut Kvp) -> Vec<(String, String)> {
    if kvps.is_null() {
        return Vec::new();
    }
    // SAFETY: runtime ≥ 1.22 (contract): the entries exist with these signatures (layout test).
    let (get, release): (GetKvpFn, ReleaseKvpFn) = unsafe {
        (
            crate::ep::abi::api_entry(api(), index::GET_KEY_VALUE_PAIRS),
            crate::ep::abi::api_entry(api(), index::RELEASE_KEY_VALUE_PAIRS),
        )
    };
    let (mut keys, mut values, mut n): (*const *const c_char, *const *const c_char, usize) =
        (std::ptr::null(), std::ptr::null(), 0);
    // SAFETY: `kvps` is live (contract); the out-parameters are writable locals receiving arrays `kvps` owns.
    unsafe { get(kvps, &mut keys, &mut values, &mut n) };
    let text = |p: *const c_char| {
        // SAFETY: ORT's entries are NUL-terminated strings owned by `kvps`, alive until it is released below.
        if p.is_null() { String::new() } else { unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned() }
    };
    let out = (0..n)
        .map(|i| {
            // SAFETY: `keys` and `values` hold `n` entries each (GetKeyValuePairs' contract).
            unsafe { (text(*keys.add(i)), text(*values.add(i))) }
        })
        .collect();
    // SAFETY: we own `kvps` (contract) and release it once, after the last read of its strings.
    unsafe { release(kvps) };
    out
}

/// Every session config entry of `options`, or None on runtimes without `GetSessionOptionsConfigEntries` (< 1.23).
///
/// # Safety
/// As for [`session_config`].
pub unsafe fn session_config_entries(
    options: *const ort_sys::OrtSessionOptions,
) -> Result<Option<Vec<(String, String)>>> {
    if runtime_minor() < 23 {
        return Ok(None);
    }
    type F = unsafe extern "system" fn(*const ort_sys::OrtSessionOptions, *mut *mut Kvp) -> OrtStatusPtr;
    // SAFETY: runtime ≥ 1.23 (checked): the entry exists with this signature (layout test).
    let f: F = unsafe { crate::ep::abi::api_entry(api(), index::GET_SESSION_OPTIONS_CONFIG_ENTRIES) };
    let mut kvps: *mut Kvp = std::ptr::null_mut();
    // SAFETY: `options` is live (contract); `kvps` is a writable local that receives an instance we then own.
    check(unsafe { f(options, &mut kvps) }, "GetSessionOptionsConfigEntries")?;
    // SAFETY: ORT made `kvps` for us (ownership passed); runtime ≥ 1.22.
    Ok(Some(unsafe { take_key_value_pairs(kvps) }))
}

/// Every session config entry of the session a kernel is being created for, or None before 1.24
/// (`KernelInfo_GetConfigEntries`).
///
/// # Safety
/// `info` is the live `OrtKernelInfo` of the kernel being created (valid for the CreateKernel call).
pub unsafe fn kernel_config_entries(info: *const OrtKernelInfo) -> Result<Option<Vec<(String, String)>>> {
    if runtime_minor() < 24 {
        return Ok(None);
    }
    type F = unsafe extern "system" fn(*const OrtKernelInfo, *mut *mut Kvp) -> OrtStatusPtr;
    // SAFETY: runtime ≥ 1.24 (checked): the entry exists with this signature (layout test).
    let f: F = unsafe { crate::ep::abi::api_entry(api(), index::KERNEL_INFO_GET_CONFIG_ENTRIES) };
    let mut kvps: *mut Kvp = std::ptr::null_mut();
    // SAFETY: `info` is live for this call (contract); `kvps` is a writable local receiving an instance we own.
    check(unsafe { f(info, &mut kvps) }, "KernelInfo_GetConfigEntries")?;
    // SAFETY: ORT made `kvps` for us (ownership passed); runtime ≥ 1.22.
    Ok(Some(unsafe { take_key_value_pairs(kvps) }))
}

/// The value of the first of `keys` that is set in the session config, or None.
///
/// # Safety
/// As for [`session_config`].
pub unsafe fn first_session_config(
    options: *const ort_sys::OrtSessionOptions,
    keys: &[String],
) -> Result<Option<String>> {
    for k in keys {
        // SAFETY: `options` is live (this function's contract).
        if let Some(v) = unsafe { session_config(options, k)? } {
            return Ok(Some(v));
        }
    }
    Ok(None)
}

/// A symbolic dimension name from `GetSymbolicDimensions` ("" for none).
fn symbolic_name(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: ORT returns NUL-terminated strings owned by the type info, alive for the calling function.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Shape inference context (InferOutputShapeFn).
pub struct ShapeInfer {
    raw: *mut OrtShapeInferContext,
}

impl ShapeInfer {
    /// # Safety
    /// `raw` is the context of the current InferOutputShapeFn call, and the `ShapeInfer` is dropped before that
    /// call returns.
    pub unsafe fn new(raw: *mut OrtShapeInferContext) -> Self {
        ShapeInfer { raw }
    }

    /// Element type, dims (−1 = unknown) and symbolic dim names of input `i`.
    pub fn input(&self, i: usize) -> Result<(Dtype, Vec<i64>, Vec<String>)> {
        let mut info = null_mut();
        // SAFETY: `self.raw` is live for this call (`new`'s contract); `info` is a writable local. ORT checks `i`.
        ort![unsafe ShapeInferContext_GetInputTypeShape(self.raw, i, &mut info)]?;
        // The info belongs to the context (alive for this InferOutputShapeFn call): read it, never release it.
        let mut n = 0usize;
        // SAFETY: `info` is live (above); `n` is a writable local.
        ort![unsafe GetDimensionsCount(info, &mut n)]?;
        let mut names: Vec<*const c_char> = vec![null(); n];
        // SAFETY: `info` is live (above); `names` has room for the `n` pointers ORT writes. They point into
        // `info`, and `symbolic_name` copies them right away.
        ort![unsafe GetSymbolicDimensions(info, names.as_mut_ptr(), n)]?;
        let names = names.into_iter().map(symbolic_name).collect();
        // SAFETY: `info` is live (above) and owned by the context: `owned = false`.
        let (dtype, dims) = unsafe { type_and_shape(info, false) }?;
        Ok((dtype, dims, names))
    }

    /// An int attribute, or None if absent.
    pub fn attr_i64(&self, name: &str) -> Option<i64> {
        let cname = CString::new(name).ok()?;
        let mut attr = null();
        // SAFETY: `self.raw` is live for this call (`new`'s contract); `cname` is NUL-terminated and outlives the
        // call; `attr` is a writable local. The attribute returned is owned by the context.
        ort![unsafe ShapeInferContext_GetAttribute(self.raw, cname.as_ptr(), &mut attr)].ok()?;
        if attr.is_null() {
            return None;
        }
        // SAFETY: `attr` came from the live context above.
        unsafe { read_int_attr(attr) }.ok()
    }

    /// Sets output `i` to `dtype` with `dims` (−1 = unknown, keeping `names` for symbolic dims).
    ///
    /// ORT turns every dim without a symbolic name into a fixed `dim_value`, so an unknown dim must carry a name or
    /// it becomes a concrete −1 (ORT then warns "Expected shape from model of {-1,…}" on every run of the outputs
    /// that inherit it). Unknown unnamed dims get a fresh name, never shared, so ORT cannot unify them wrongly.
    pub fn set_output(&self, i: usize, dtype: Dtype, dims: &[i64], names: &[String]) -> Result<()> {
        static FRESH: AtomicU64 = AtomicU64::new(0);
        let mut info = null_mut();
        // SAFETY: `info` is a writable local; on success we own the new info and release it below.
        ort![unsafe CreateTensorTypeAndShapeInfo(&mut info)]?;
        let cnames: Vec<CString> = (dims.iter().enumerate())
            .map(|(k, &d)| match (d < 0, names.get(k).map_or("", String::as_str)) {
                (true, "") => format!("nibble_unk_{}", FRESH.fetch_add(1, Ordering::Relaxed)),
                (_, name) => name.to_owned(),
            })
            .map(|s| CString::new(s).unwrap_or_default())
            .collect();
        let mut ptrs: Vec<*const c_char> = cnames.iter().map(|c| c.as_ptr()).collect();
        let r = (|| {
            // SAFETY: `info` is ours and live (created above, released only after this closure).
            ort![unsafe SetTensorElementType(info, dtype.to_ort())]?;
            // SAFETY: `info` as above; `dims` is `dims.len()` readable dims, which ORT copies.
            ort![unsafe SetDimensions(info, dims.as_ptr(), dims.len())]?;
            // SAFETY: `info` as above; `ptrs` holds one NUL-terminated name per dim (`dims.len()` of them),
            // pointing into `cnames`, which outlives the call; ORT copies the strings and does not write `ptrs`.
            ort![unsafe SetSymbolicDimensions(info, ptrs.as_mut_ptr(), ptrs.len())]?;
            // SAFETY: `self.raw` is live for this call (`new`'s contract); `info` as above; ORT copies it.
            ort![unsafe ShapeInferContext_SetOutputTypeShape(self.raw, i, info)]
        })();
        // SAFETY: we created `info` and release it once, here; nothing uses it afterwards (SetOutputTypeShape
        // copied it).
        unsafe { (api().ReleaseTensorTypeAndShapeInfo)(info) };
        r
    }
}

#[cfg(test)]
mod tests {
    /// `undocumented_unsafe_blocks` cannot see the SAFETY comments at `ort![unsafe ..]` call sites (see the
    /// macro), so check them here: every invocation in this crate's sources starts with `unsafe` on the same
    /// line and has a `// SAFETY:` comment in the run of `//` lines directly above that line.
    #[test]
    fn every_ort_call_has_a_safety_comment() {
        let needle = concat!("ort", "!"); // not spelled out, so this test's own source is no call site
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        // Every .rs file under src/, subdirectories (ep/) included.
        let (mut files, mut dirs) = (Vec::new(), vec![dir.clone()]);
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).expect("read a source directory") {
                let path = e.expect("dir entry").path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|x| x == "rs") {
                    files.push(path);
                }
            }
        }
        files.sort();
        let (mut calls, mut bad) = (0, Vec::new());
        for path in &files {
            let src = std::fs::read_to_string(path).expect("read source");
            let lines: Vec<&str> = src.lines().collect();
            for (k, line) in lines.iter().enumerate() {
                let code = line.trim_start();
                if code.starts_with("//") {
                    continue;
                }
                for (at, _) in line.match_indices(needle) {
                    let before = line[..at].chars().next_back();
                    if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                        continue; // another macro whose name ends in "ort"
                    }
                    let rest = line[at + needle.len()..].trim_start();
                    let Some(inner) = rest.strip_prefix(['[', '(', '{']) else {
                        continue; // a mention, e.g. `ort!` in a string
                    };
                    calls += 1;
                    let where_ = format!("{}:{}", path.file_name().unwrap().to_string_lossy(), k + 1);
                    if !inner.trim_start().starts_with("unsafe ") {
                        bad.push(format!("{where_}: put `unsafe` on the invocation's first line"));
                        continue;
                    }
                    let mut above = lines[..k].iter().rev().map(|l| l.trim_start()).take_while(|l| l.starts_with("//"));
                    if !above.any(|l| l.contains("SAFETY:")) {
                        bad.push(format!("{where_}: no `// SAFETY:` comment directly above"));
                    }
                }
            }
        }
        assert!(calls >= 30, "found only {calls} ort! calls in {}: is the scan broken?", dir.display());
        assert!(bad.is_empty(), "ort! call sites without a SAFETY comment:\n{}", bad.join("\n"));
    }
}
