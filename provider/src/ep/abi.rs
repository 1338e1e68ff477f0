//! Hand-declared bindings for ORT's plugin execution-provider ABI (`onnxruntime_ep_c_api.h`, API 24 = ORT 1.24),
//! which ort-sys does not have (its `OrtEpApi` is opaque), plus the few `OrtApi` entries past API 17 we call.
//!
//! Why by hand: no registry package ships ORT ≥ 1.24 headers (Debian's libonnxruntime-dev stops at 1.23, API 23;
//! PyPI/npm wheels carry only the shared library), and bindgen would need libclang and those headers at build time
//! on every machine, aarch64 cross-builds included. The structs are append-only in ORT (a newer runtime reads
//! `ort_version_supported` and never looks past the fields of that version), so one declaration of the 1.24
//! layout serves 1.24 through 1.31. The source of truth is vendored: `third_party/onnxruntime-1.24/include`
//! (MIT, microsoft/onnxruntime at 1.24.0), and `tests::layout_matches_the_vendored_header` compiles a C program
//! against it and compares every offset and size below with `offset_of!`.
//!
//! The `OrtApi` entries past API 17 are read by index from the table ORT hands us, because enabling ort-sys's
//! `api-22`+ features would raise the API version the `ort` crate (tests, Llama driver) requests, and those must
//! keep running on ORT 1.20. Every index is checked against the vendored header by the same test.
#![allow(non_snake_case, non_camel_case_types)]

use ort_sys::{
    ONNXTensorElementDataType, OrtAllocator, OrtApi, OrtCustomOpDomain, OrtEpDevice, OrtGraph, OrtHardwareDevice,
    OrtHardwareDeviceType, OrtKernelContext, OrtKernelInfo, OrtKeyValuePairs, OrtLogger, OrtNode, OrtOpAttr,
    OrtSessionOptions, OrtStatus, OrtValue, OrtValueInfo,
};
use std::ffi::{c_char, c_int, c_void};

/// The ORT API version whose struct layouts we fill and whose functions we call: 24 = ORT 1.24, the first with
/// kernel registries and `PrePackWeight`.
pub const EP_API_VERSION: u32 = 24;

type St = *mut OrtStatus;

/// Opaque ORT types of the EP API (only ever behind pointers).
macro_rules! opaque {
    ($($name:ident),* $(,)?) => {$(
        #[repr(C)]
        pub struct $name {
            _p: [u8; 0],
        }
    )*};
}
opaque!(
    OrtEpGraphSupportInfo,
    OrtKernelRegistry,
    OrtKernelDef,
    OrtKernelDefBuilder,
    OrtDataType,
    OrtSharedPrePackedWeightCache,
);

/// `OrtKernelCreateFunc`.
pub type KernelCreateFn =
    unsafe extern "system" fn(state: *mut c_void, info: *const OrtKernelInfo, out: *mut *mut OrtKernelImpl) -> St;

/// An unused slot of a function table we fill: always null.
pub type Unused = *const c_void;

/// `struct OrtKernelImpl` (since 1.24).
#[repr(C)]
pub struct OrtKernelImpl {
    pub ort_version_supported: u32,
    /// Must be 0 (no flags defined in 1.24).
    pub flags: u32,
    pub Compute: unsafe extern "system" fn(this: *mut OrtKernelImpl, ctx: *mut OrtKernelContext) -> St,
    pub Release: unsafe extern "system" fn(this: *mut OrtKernelImpl),
    pub PrePackWeight: Option<
        unsafe extern "system" fn(
            this: *mut OrtKernelImpl,
            tensor: *const OrtValue,
            input_index: c_int,
            allocator: *mut OrtAllocator,
            cache: *mut OrtSharedPrePackedWeightCache,
            is_packed: *mut bool,
        ) -> St,
    >,
    pub SetSharedPrePackedWeight: Option<
        unsafe extern "system" fn(
            this: *mut OrtKernelImpl,
            buffers: *const *const c_void,
            sizes: *const usize,
            num_buffers: usize,
            input_index: c_int,
        ) -> St,
    >,
}

/// `struct OrtEp`, the 1.24 layout (fields of 1.22, 1.23 and 1.24).
#[repr(C)]
pub struct OrtEp {
    pub ort_version_supported: u32,
    pub GetName: unsafe extern "system" fn(this: *const OrtEp) -> *const c_char,
    pub GetCapability:
        unsafe extern "system" fn(this: *mut OrtEp, graph: *const OrtGraph, info: *mut OrtEpGraphSupportInfo) -> St,
    /// Optional for kernel-registry EPs since 1.24.
    pub Compile: Unused,
    pub ReleaseNodeComputeInfos: Unused,
    pub GetPreferredDataLayout: Unused,
    pub ShouldConvertDataLayoutForOp: Unused,
    pub SetDynamicOptions: Unused,
    pub OnRunStart: Unused,
    pub OnRunEnd: Unused,
    pub CreateAllocator: Unused,
    pub CreateSyncStreamForDevice: Unused,
    pub GetCompiledModelCompatibilityInfo: Unused,
    pub GetKernelRegistry: unsafe extern "system" fn(this: *mut OrtEp, out: *mut *const OrtKernelRegistry) -> St,
    pub IsConcurrentRunSupported: unsafe extern "system" fn(this: *mut OrtEp, out: *mut bool) -> St,
}

/// `struct OrtEpFactory`, the 1.24 layout.
#[repr(C)]
pub struct OrtEpFactory {
    pub ort_version_supported: u32,
    pub GetName: unsafe extern "system" fn(this: *const OrtEpFactory) -> *const c_char,
    pub GetVendor: unsafe extern "system" fn(this: *const OrtEpFactory) -> *const c_char,
    pub GetSupportedDevices: unsafe extern "system" fn(
        this: *mut OrtEpFactory,
        devices: *const *const OrtHardwareDevice,
        num_devices: usize,
        ep_devices: *mut *mut OrtEpDevice,
        max_ep_devices: usize,
        num_ep_devices: *mut usize,
    ) -> St,
    pub CreateEp: unsafe extern "system" fn(
        this: *mut OrtEpFactory,
        devices: *const *const OrtHardwareDevice,
        metadata: *const *const OrtKeyValuePairs,
        num_devices: usize,
        session_options: *const OrtSessionOptions,
        logger: *const OrtLogger,
        ep: *mut *mut OrtEp,
    ) -> St,
    pub ReleaseEp: unsafe extern "system" fn(this: *mut OrtEpFactory, ep: *mut OrtEp),
    pub GetVendorId: unsafe extern "system" fn(this: *const OrtEpFactory) -> u32,
    pub GetVersion: unsafe extern "system" fn(this: *const OrtEpFactory) -> *const c_char,
    pub ValidateCompiledModelCompatibilityInfo: Unused,
    pub CreateAllocator: unsafe extern "system" fn(
        this: *mut OrtEpFactory,
        memory_info: *const c_void,
        options: *const OrtKeyValuePairs,
        out: *mut *mut OrtAllocator,
    ) -> St,
    pub ReleaseAllocator: unsafe extern "system" fn(this: *mut OrtEpFactory, allocator: *mut OrtAllocator),
    /// Called unconditionally by ORT when the library is registered (a null result means "no data transfer").
    pub CreateDataTransfer: unsafe extern "system" fn(this: *mut OrtEpFactory, out: *mut *mut c_void) -> St,
    pub IsStreamAware: unsafe extern "system" fn(this: *const OrtEpFactory) -> bool,
    pub CreateSyncStreamForDevice: unsafe extern "system" fn(
        this: *mut OrtEpFactory,
        memory_device: *const c_void,
        options: *const OrtKeyValuePairs,
        out: *mut *mut c_void,
    ) -> St,
    pub GetHardwareDeviceIncompatibilityDetails: Unused,
    pub CreateExternalResourceImporterForDevice: Unused,
    pub GetNumCustomOpDomains: unsafe extern "system" fn(this: *mut OrtEpFactory, n: *mut usize) -> St,
    pub GetCustomOpDomains:
        unsafe extern "system" fn(this: *mut OrtEpFactory, domains: *mut *mut OrtCustomOpDomain, n: usize) -> St,
}

/// `struct OrtEpApi` up to `KernelInfo_GetEp` (index 43, API 24): the entries we call are typed, the rest are
/// placeholders that keep the indices right.
#[repr(C)]
pub struct OrtEpApi {
    pub CreateEpDevice: unsafe extern "system" fn(
        factory: *mut OrtEpFactory,
        hw: *const OrtHardwareDevice,
        metadata: *const OrtKeyValuePairs,
        options: *const OrtKeyValuePairs,
        out: *mut *mut OrtEpDevice,
    ) -> St,
    pub ReleaseEpDevice: unsafe extern "system" fn(dev: *mut OrtEpDevice),
    _2: Unused,
    pub EpGraphSupportInfo_AddSingleNode:
        unsafe extern "system" fn(info: *mut OrtEpGraphSupportInfo, node: *const OrtNode) -> St,
    _4_17: [Unused; 14],
    pub CreateKernelRegistry: unsafe extern "system" fn(out: *mut *mut OrtKernelRegistry) -> St,
    pub ReleaseKernelRegistry: unsafe extern "system" fn(reg: *mut OrtKernelRegistry),
    pub KernelRegistry_AddKernel: unsafe extern "system" fn(
        reg: *mut OrtKernelRegistry,
        def: *const OrtKernelDef,
        create: KernelCreateFn,
        state: *mut c_void,
    ) -> St,
    pub CreateKernelDefBuilder: unsafe extern "system" fn(out: *mut *mut OrtKernelDefBuilder) -> St,
    pub ReleaseKernelDefBuilder: unsafe extern "system" fn(b: *mut OrtKernelDefBuilder),
    pub KernelDefBuilder_SetOperatorType:
        unsafe extern "system" fn(b: *mut OrtKernelDefBuilder, op_type: *const c_char) -> St,
    pub KernelDefBuilder_SetDomain: unsafe extern "system" fn(b: *mut OrtKernelDefBuilder, domain: *const c_char) -> St,
    pub KernelDefBuilder_SetSinceVersion:
        unsafe extern "system" fn(b: *mut OrtKernelDefBuilder, start: c_int, end: c_int) -> St,
    pub KernelDefBuilder_SetExecutionProvider:
        unsafe extern "system" fn(b: *mut OrtKernelDefBuilder, ep_name: *const c_char) -> St,
    _27_28: [Unused; 2],
    pub KernelDefBuilder_AddTypeConstraint: unsafe extern "system" fn(
        b: *mut OrtKernelDefBuilder,
        arg_name: *const c_char,
        types: *const *const OrtDataType,
        num_types: usize,
    ) -> St,
    _30_31: [Unused; 2],
    pub KernelDefBuilder_Build:
        unsafe extern "system" fn(b: *mut OrtKernelDefBuilder, out: *mut *mut OrtKernelDef) -> St,
    pub ReleaseKernelDef: unsafe extern "system" fn(def: *mut OrtKernelDef),
    _34_39: [Unused; 6],
    pub GetTensorDataType:
        unsafe extern "system" fn(elem: ONNXTensorElementDataType, out: *mut *const OrtDataType) -> St,
    pub EpGraphSupportInfo_LookUpKernel: unsafe extern "system" fn(
        info: *mut OrtEpGraphSupportInfo,
        node: *const OrtNode,
        out: *mut *const OrtKernelDef,
    ) -> St,
    pub SharedPrePackedWeightCache_StoreWeightData: Unused,
    pub KernelInfo_GetEp: unsafe extern "system" fn(info: *const OrtKernelInfo, ep: *mut *const OrtEp) -> St,
}

/// Indices (in pointers) of the `OrtApi` entries past API 17 that we call.
pub mod api_index {
    pub const GET_EP_API: usize = 317;
    pub const HARDWARE_DEVICE_TYPE: usize = 307;
    pub const GRAPH_GET_NUM_NODES: usize = 344;
    pub const GRAPH_GET_NODES: usize = 345;
    pub const NODE_GET_NAME: usize = 349;
    pub const NODE_GET_DOMAIN: usize = 351;
    pub const NODE_GET_NUM_INPUTS: usize = 353;
    pub const NODE_GET_INPUTS: usize = 354;
    pub const NODE_GET_ATTRIBUTE_BY_NAME: usize = 361;
}

/// The `OrtApi` entries past API 17 that we call (ORT ≥ 1.24 has them all).
#[derive(Clone, Copy)]
pub struct ApiExt {
    pub GetEpApi: unsafe extern "system" fn() -> *const OrtEpApi,
    pub HardwareDevice_Type: unsafe extern "system" fn(dev: *const OrtHardwareDevice) -> OrtHardwareDeviceType,
    pub Graph_GetNumNodes: unsafe extern "system" fn(graph: *const OrtGraph, n: *mut usize) -> St,
    pub Graph_GetNodes: unsafe extern "system" fn(graph: *const OrtGraph, nodes: *mut *const OrtNode, n: usize) -> St,
    pub Node_GetName: unsafe extern "system" fn(node: *const OrtNode, out: *mut *const c_char) -> St,
    pub Node_GetDomain: unsafe extern "system" fn(node: *const OrtNode, out: *mut *const c_char) -> St,
    pub Node_GetNumInputs: unsafe extern "system" fn(node: *const OrtNode, n: *mut usize) -> St,
    /// Fills `n` value infos; an omitted optional input is null.
    pub Node_GetInputs:
        unsafe extern "system" fn(node: *const OrtNode, inputs: *mut *const OrtValueInfo, n: usize) -> St,
    /// An absent attribute: null and an ORT_NOT_FOUND status.
    pub Node_GetAttributeByName:
        unsafe extern "system" fn(node: *const OrtNode, name: *const c_char, out: *mut *const OrtOpAttr) -> St,
}

impl ApiExt {
    /// Reads the entries from `api`.
    ///
    /// # Safety
    /// `api` is the table of an ORT runtime of API ≥ [`EP_API_VERSION`] (its table has these entries, each a
    /// non-null function pointer of the declared signature).
    pub unsafe fn read(api: &OrtApi) -> ApiExt {
        // SAFETY: the caller guarantees a table of API ≥ 24, which holds a function pointer at each index (checked
        // against the vendored 1.24 header by the layout test) with the header's signature.
        unsafe {
            ApiExt {
                GetEpApi: api_entry(api, api_index::GET_EP_API),
                HardwareDevice_Type: api_entry(api, api_index::HARDWARE_DEVICE_TYPE),
                Graph_GetNumNodes: api_entry(api, api_index::GRAPH_GET_NUM_NODES),
                Graph_GetNodes: api_entry(api, api_index::GRAPH_GET_NODES),
                Node_GetName: api_entry(api, api_index::NODE_GET_NAME),
                Node_GetDomain: api_entry(api, api_index::NODE_GET_DOMAIN),
                Node_GetNumInputs: api_entry(api, api_index::NODE_GET_NUM_INPUTS),
                Node_GetInputs: api_entry(api, api_index::NODE_GET_INPUTS),
                Node_GetAttributeByName: api_entry(api, api_index::NODE_GET_ATTRIBUTE_BY_NAME),
            }
        }
    }
}

/// Entry `index` (in pointers) of `api`'s function table, as the function-pointer type `F`.
///
/// # Safety
/// The runtime's table has an entry at `index` (its API version is new enough) whose signature is `F`.
pub(crate) unsafe fn api_entry<F: Copy>(api: &OrtApi, index: usize) -> F {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*const c_void>(), "F must be a function pointer");
    let table = (api as *const OrtApi).cast::<*const c_void>();
    // SAFETY: `index` is inside the table and the entry has type F (the caller's contract); F is pointer-sized.
    unsafe { std::mem::transmute_copy::<*const c_void, F>(&*table.add(index)) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::mem::{offset_of, size_of};
    use std::path::Path;
    use std::process::Command;

    const P: usize = size_of::<*const c_void>();

    /// `(C expression, value in Rust)`: offsets in pointers, sizes in bytes.
    fn rust_side() -> Vec<(&'static str, usize)> {
        macro_rules! off {
            ($s:ident . $f:ident) => {
                (concat!("offsetof(", stringify!($s), ",", stringify!($f), ")/sizeof(void*)"), offset_of!($s, $f) / P)
            };
        }
        vec![
            ("sizeof(OrtKernelImpl)", size_of::<OrtKernelImpl>()),
            off!(OrtKernelImpl.Compute),
            off!(OrtKernelImpl.Release),
            off!(OrtKernelImpl.PrePackWeight),
            off!(OrtKernelImpl.SetSharedPrePackedWeight),
            ("offsetof(OrtKernelImpl,flags)", offset_of!(OrtKernelImpl, flags)),
            ("sizeof(OrtEp)", size_of::<OrtEp>()),
            off!(OrtEp.GetName),
            off!(OrtEp.GetCapability),
            off!(OrtEp.Compile),
            off!(OrtEp.GetCompiledModelCompatibilityInfo),
            off!(OrtEp.GetKernelRegistry),
            off!(OrtEp.IsConcurrentRunSupported),
            ("sizeof(OrtEpFactory)", size_of::<OrtEpFactory>()),
            off!(OrtEpFactory.GetName),
            off!(OrtEpFactory.GetVendor),
            off!(OrtEpFactory.GetSupportedDevices),
            off!(OrtEpFactory.CreateEp),
            off!(OrtEpFactory.ReleaseEp),
            off!(OrtEpFactory.GetVendorId),
            off!(OrtEpFactory.GetVersion),
            off!(OrtEpFactory.ValidateCompiledModelCompatibilityInfo),
            off!(OrtEpFactory.IsStreamAware),
            off!(OrtEpFactory.GetHardwareDeviceIncompatibilityDetails),
            off!(OrtEpFactory.GetNumCustomOpDomains),
            off!(OrtEpFactory.GetCustomOpDomains),
            off!(OrtEpApi.CreateEpDevice),
            off!(OrtEpApi.ReleaseEpDevice),
            off!(OrtEpApi.EpGraphSupportInfo_AddSingleNode),
            off!(OrtEpApi.CreateKernelRegistry),
            off!(OrtEpApi.ReleaseKernelRegistry),
            off!(OrtEpApi.KernelRegistry_AddKernel),
            off!(OrtEpApi.CreateKernelDefBuilder),
            off!(OrtEpApi.ReleaseKernelDefBuilder),
            off!(OrtEpApi.KernelDefBuilder_SetOperatorType),
            off!(OrtEpApi.KernelDefBuilder_SetDomain),
            off!(OrtEpApi.KernelDefBuilder_SetSinceVersion),
            off!(OrtEpApi.KernelDefBuilder_SetExecutionProvider),
            off!(OrtEpApi.KernelDefBuilder_AddTypeConstraint),
            off!(OrtEpApi.KernelDefBuilder_Build),
            off!(OrtEpApi.ReleaseKernelDef),
            off!(OrtEpApi.GetTensorDataType),
            off!(OrtEpApi.EpGraphSupportInfo_LookUpKernel),
            off!(OrtEpApi.SharedPrePackedWeightCache_StoreWeightData),
            off!(OrtEpApi.KernelInfo_GetEp),
            ("offsetof(OrtApi,GetEpApi)/sizeof(void*)", api_index::GET_EP_API),
            ("offsetof(OrtApi,HardwareDevice_Type)/sizeof(void*)", api_index::HARDWARE_DEVICE_TYPE),
            ("offsetof(OrtApi,Graph_GetNumNodes)/sizeof(void*)", api_index::GRAPH_GET_NUM_NODES),
            ("offsetof(OrtApi,Graph_GetNodes)/sizeof(void*)", api_index::GRAPH_GET_NODES),
            ("offsetof(OrtApi,Node_GetName)/sizeof(void*)", api_index::NODE_GET_NAME),
            ("offsetof(OrtApi,Node_GetDomain)/sizeof(void*)", api_index::NODE_GET_DOMAIN),
            ("offsetof(OrtApi,Node_GetNumInputs)/sizeof(void*)", api_index::NODE_GET_NUM_INPUTS),
            ("offsetof(OrtApi,Node_GetInputs)/sizeof(void*)", api_index::NODE_GET_INPUTS),
            ("offsetof(OrtApi,Node_GetAttributeByName)/sizeof(void*)", api_index::NODE_GET_ATTRIBUTE_BY_NAME),
            (
                "offsetof(OrtApi,RegisterExecutionProviderLibrary)/sizeof(void*)",
                crate::host::index::REGISTER_EP_LIBRARY,
            ),
            ("offsetof(OrtApi,GetEpDevices)/sizeof(void*)", crate::host::index::GET_EP_DEVICES),
            (
                "offsetof(OrtApi,SessionOptionsAppendExecutionProvider_V2)/sizeof(void*)",
                crate::host::index::APPEND_EP_V2,
            ),
            ("offsetof(OrtApi,EpDevice_EpName)/sizeof(void*)", crate::host::index::EP_DEVICE_EP_NAME),
            ("offsetof(OrtApi,GetKeyValuePairs)/sizeof(void*)", crate::api::index::GET_KEY_VALUE_PAIRS),
            ("offsetof(OrtApi,ReleaseKeyValuePairs)/sizeof(void*)", crate::api::index::RELEASE_KEY_VALUE_PAIRS),
            (
                "offsetof(OrtApi,GetSessionOptionsConfigEntries)/sizeof(void*)",
                crate::api::index::GET_SESSION_OPTIONS_CONFIG_ENTRIES,
            ),
            (
                "offsetof(OrtApi,KernelInfo_GetConfigEntries)/sizeof(void*)",
                crate::api::index::KERNEL_INFO_GET_CONFIG_ENTRIES,
            ),
            ("ORT_API_VERSION", EP_API_VERSION as usize),
        ]
    }

    /// Compiles a C program against the vendored 1.24 headers that prints each expression, and compares.
    /// Needs a C compiler (`cc`; scripts/setup.sh installs build-essential).
    #[test]
    fn layout_matches_the_vendored_header() {
        let inc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../third_party/onnxruntime-1.24/include");
        assert!(inc.join("onnxruntime_ep_c_api.h").is_file(), "vendored header missing in {}", inc.display());
        let items = rust_side();
        let mut c = String::from(
            "#include <stdio.h>\n#include <stddef.h>\n#include \"onnxruntime_c_api.h\"\nint main(void){\n",
        );
        for (expr, _) in &items {
            c.push_str(&format!("printf(\"%s %zu\\n\", \"{expr}\", (size_t)({expr}));\n"));
        }
        c.push_str("return 0;}\n");
        let dir = std::env::temp_dir().join(format!("nibble-ep-layout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (src, exe) = (dir.join("layout.c"), dir.join("layout"));
        std::fs::write(&src, c).unwrap();
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let out = Command::new(&cc)
            .arg("-I")
            .arg(&inc)
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .output()
            .unwrap_or_else(|e| panic!("cannot run the C compiler `{cc}` ({e}): install build-essential"));
        assert!(out.status.success(), "compiling the layout probe failed:\n{}", String::from_utf8_lossy(&out.stderr));
        let out = Command::new(&exe).output().expect("run the layout probe");
        let _ = std::fs::remove_dir_all(&dir);
        let text = String::from_utf8(out.stdout).unwrap();
        let c_side: HashMap<&str, usize> =
            text.lines().filter_map(|l| l.rsplit_once(' ')).map(|(k, v)| (k, v.parse().expect("a number"))).collect();
        let wrong: Vec<String> = items
            .iter()
            .filter(|(e, v)| c_side.get(e) != Some(v))
            .map(|(e, v)| format!("{e}: Rust {v}, header {:?}", c_side.get(e)))
            .collect();
        assert!(wrong.is_empty(), "EP ABI declarations differ from the 1.24 header:\n{}", wrong.join("\n"));
    }
}
