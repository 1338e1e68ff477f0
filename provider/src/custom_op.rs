//! The `OrtCustomOp` tables ORT calls into, and their `extern "system"` trampolines. Every trampoline that
//! runs our code (kernel creation, compute, destruction, shape inference, input types) runs it inside
//! `catch_unwind`; failures become `OrtStatus` values, never unwinding into ORT. The rest return constants or
//! read a field, and cannot panic.

use crate::api::{self, Dtype, KernelContext, KernelInfo, ShapeInfer};
use crate::domain::{self, Registration};
use crate::matmul_nbits::{self, MatMulNBits, OpConfig, PackAt};
use crate::status::{Error, Result};
use ort_sys::{
    ONNXTensorElementDataType, OrtApi, OrtCustomOp, OrtCustomOpInputOutputCharacteristic as Ch, OrtKernelContext,
    OrtKernelInfo, OrtMemType, OrtShapeInferContext, OrtStatusPtr,
};
use std::ffi::{c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// One registered op variant. `raw` must stay the first field: ORT hands `*const OrtCustomOp` back to every
/// callback and we cast it to `*const OpDef`.
#[repr(C)]
pub struct OpDef {
    raw: OrtCustomOp,
    /// Element type of A, scales, bias and Y for this variant.
    pub dtype: Dtype,
    pub config: OpConfig,
    /// The settings read when `RegisterCustomOps` registered this op (None for the EP factory's schema-only op).
    pub registration: Option<Registration>,
}

// SAFETY: OpDef is immutable after registration (ORT only reads it) and its function pointers are plain code.
unsafe impl Sync for OpDef {}
// SAFETY: as above.
unsafe impl Send for OpDef {}

impl OpDef {
    /// Remembers the settings `RegisterCustomOps` read, so kernel creation can refuse ones set later.
    pub fn registered(self, registration: Registration) -> OpDef {
        OpDef { registration: Some(registration), ..self }
    }

    /// The table for one A type. `version` is min(runtime API, `api::API_VERSION`): the fields we fill.
    /// `shape_inference` installs `InferOutputShapeFn`; ORT before 1.24 crashes building its context when a node
    /// has an empty (skipped) optional input (seen on 1.20–1.23), so the caller leaves it out there
    /// (`SHAPE_INFERENCE_SINCE_MINOR` in lib.rs).
    pub fn new(dtype: Dtype, config: OpConfig, version: u32, shape_inference: bool) -> OpDef {
        // Every field not set below is None (null), which ORT reads as "not provided". The struct update
        // covers the api-18 fields that cargo feature unification may add to ort-sys's struct.
        #[allow(clippy::needless_update)]
        let raw = OrtCustomOp {
            version,
            CreateKernel: None,
            GetName: Some(get_name),
            GetExecutionProviderType: Some(get_ep),
            GetInputType: Some(input_type),
            GetInputTypeCount: Some(input_count),
            GetOutputType: Some(output_type),
            GetOutputTypeCount: Some(output_count),
            KernelCompute: None,
            KernelDestroy: Some(kernel_destroy),
            GetInputCharacteristic: Some(input_characteristic),
            GetOutputCharacteristic: Some(output_characteristic),
            GetInputMemoryType: Some(input_memory_type),
            GetVariadicInputMinArity: Some(zero),
            GetVariadicInputHomogeneity: Some(zero),
            GetVariadicOutputMinArity: Some(zero),
            GetVariadicOutputHomogeneity: Some(zero),
            CreateKernelV2: Some(create_kernel),
            KernelComputeV2: Some(kernel_compute),
            InferOutputShapeFn: if shape_inference { Some(infer_output_shape) } else { None },
            GetStartVersion: Some(start_version),
            GetEndVersion: Some(end_version),
            ..zeroed_tail()
        };
        OpDef { raw, dtype, config, registration: None }
    }

    pub fn raw(&self) -> *const OrtCustomOp {
        &self.raw
    }
}

/// An `OrtCustomOp` with every field null, for the fields this version of ort-sys may add after the ones
/// we fill (the `api-18` in-place/alias callbacks when feature unification enables them).
fn zeroed_tail() -> OrtCustomOp {
    // SAFETY: OrtCustomOp is a C struct of an integer and Option<fn> fields; all-zero is `version = 0` and
    // every callback None, a valid value.
    unsafe { std::mem::zeroed() }
}

/// # Safety
/// `op` was registered by us, so it points to the `raw` field of an `OpDef`.
unsafe fn op_def<'a>(op: *const OrtCustomOp) -> &'a OpDef {
    // SAFETY: `raw` is the first field of the #[repr(C)] OpDef, which lives for the process (leaked).
    unsafe { &*op.cast::<OpDef>() }
}

/// Runs `f` fenced against panics and turns its result into a status for ORT.
fn fenced(what: &str, f: impl FnOnce() -> Result<()>) -> OrtStatusPtr {
    let r = catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| Err(Error::panic(what, p)));
    OrtStatusPtr(api::to_status(r))
}

/// Runs an infallible getter fenced against panics (a panic here would be a bug; fall back to `default`).
fn fenced_value<T>(default: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(default)
}

unsafe extern "system" fn get_name(_op: *const OrtCustomOp) -> *const c_char {
    c"MatMulNBits".as_ptr()
}

unsafe extern "system" fn get_ep(_op: *const OrtCustomOp) -> *const c_char {
    std::ptr::null() // CPU execution provider
}

unsafe extern "system" fn input_type(op: *const OrtCustomOp, i: usize) -> ONNXTensorElementDataType {
    // SAFETY: ORT passes back our op.
    let def = unsafe { op_def(op) };
    fenced_value(ONNXTensorElementDataType::ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED, || {
        matmul_nbits::input_type(def.dtype, i).to_ort()
    })
}

unsafe extern "system" fn input_count(_op: *const OrtCustomOp) -> usize {
    matmul_nbits::INPUT_COUNT
}

unsafe extern "system" fn output_type(op: *const OrtCustomOp, _i: usize) -> ONNXTensorElementDataType {
    // SAFETY: ORT passes back our op.
    unsafe { op_def(op) }.dtype.to_ort()
}

unsafe extern "system" fn output_count(_op: *const OrtCustomOp) -> usize {
    1
}

unsafe extern "system" fn input_characteristic(_op: *const OrtCustomOp, i: usize) -> Ch {
    if matmul_nbits::input_is_optional(i) { Ch::INPUT_OUTPUT_OPTIONAL } else { Ch::INPUT_OUTPUT_REQUIRED }
}

unsafe extern "system" fn output_characteristic(_op: *const OrtCustomOp, _i: usize) -> Ch {
    Ch::INPUT_OUTPUT_REQUIRED
}

unsafe extern "system" fn input_memory_type(_op: *const OrtCustomOp, _i: usize) -> OrtMemType {
    OrtMemType::OrtMemTypeDefault
}

unsafe extern "system" fn zero(_op: *const OrtCustomOp) -> c_int {
    0
}

unsafe extern "system" fn start_version(_op: *const OrtCustomOp) -> c_int {
    1
}

unsafe extern "system" fn end_version(_op: *const OrtCustomOp) -> c_int {
    c_int::MAX
}

unsafe extern "system" fn create_kernel(
    op: *const OrtCustomOp,
    _api: *const OrtApi,
    info: *const OrtKernelInfo,
    kernel: *mut *mut c_void,
) -> OrtStatusPtr {
    fenced("MatMulNBits create", || {
        // SAFETY: ORT passes back our op and the info of the kernel being created.
        let (def, info, raw_info) = unsafe { (op_def(op), KernelInfo::new(info), info) };
        // Settings added to the session options after registration would be ignored: refuse them by name.
        if let Some(registered) = &def.registration {
            // SAFETY: `raw_info` is the kernel info ORT passed to this call, live until it returns.
            let entries = unsafe { api::kernel_config_entries(raw_info)? };
            if let Some(entries) = entries {
                let value = |key: &String| entries.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
                let now = domain::plan_from(|key| Ok(domain::custom_op_spellings(key).iter().find_map(value)))?;
                domain::check_unchanged(registered, &now)?;
            }
        }
        let k = MatMulNBits::create(&info, def.dtype, &def.config, PackAt::Create)?;
        // SAFETY: `kernel` is ORT's out-pointer; it takes ownership until KernelDestroy.
        unsafe { *kernel = Box::into_raw(Box::new(k)).cast() };
        Ok(())
    })
}

unsafe extern "system" fn kernel_compute(kernel: *mut c_void, ctx: *mut OrtKernelContext) -> OrtStatusPtr {
    fenced("MatMulNBits compute", || {
        // SAFETY: `kernel` came from create_kernel (Box<MatMulNBits>) and is alive until KernelDestroy; Compute
        // may run concurrently, so only a shared reference is formed. `ctx` is this call's context.
        let (k, ctx) = unsafe { (&*kernel.cast::<MatMulNBits>(), KernelContext::new(ctx)) };
        k.compute(&ctx)
    })
}

unsafe extern "system" fn kernel_destroy(kernel: *mut c_void) {
    if kernel.is_null() {
        return;
    }
    // SAFETY: `kernel` came from create_kernel and ORT destroys it exactly once.
    let k = unsafe { Box::from_raw(kernel.cast::<MatMulNBits>()) };
    let _ = catch_unwind(AssertUnwindSafe(move || drop(k)));
}

unsafe extern "system" fn infer_output_shape(op: *const OrtCustomOp, ctx: *mut OrtShapeInferContext) -> OrtStatusPtr {
    fenced("MatMulNBits shape inference", || {
        // SAFETY: ORT passes back our op and this call's context.
        let (def, ctx) = unsafe { (op_def(op), ShapeInfer::new(ctx)) };
        matmul_nbits::infer_shape(&ctx, def.dtype)
    })
}
