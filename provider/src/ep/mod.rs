//! The plugin execution-provider frontend (ORT ≥ 1.24): `CreateEpFactories` → one factory → one `OrtEp` per
//! session → a kernel registry with `MatMulNBits` in the domains the settings claim → one `OrtKernelImpl` per node,
//! whose `PrePackWeight` hands the weights to the op core so ORT frees the initializers.
//!
//! Everything ORT-facing here is FFI glue: every callback runs inside `catch_unwind`, failures become `OrtStatus`
//! values. The op itself (attributes, validation, packing, compute) is `matmul_nbits`, the same code the custom-op
//! frontend runs, so both give the same results and the same error messages.

pub mod abi;

use crate::OP_PREFIX;
use crate::api::{self, Dtype, KernelContext, KernelInfo, Tensor};
use crate::custom_op::OpDef;
use crate::domain;
use crate::matmul_nbits::{MatMulNBits, OpConfig, PackAt};
use crate::status::{Error, Result};
use abi::{
    ApiExt, EP_API_VERSION, OrtDataType, OrtEp, OrtEpApi, OrtEpFactory, OrtEpGraphSupportInfo, OrtKernelDef,
    OrtKernelDefBuilder, OrtKernelImpl, OrtKernelRegistry, OrtSharedPrePackedWeightCache,
};
use ort_sys::{
    ONNXTensorElementDataType as Ty, OrtAllocator, OrtApiBase, OrtCustomOpDomain, OrtEpDevice, OrtGraph,
    OrtHardwareDevice, OrtHardwareDeviceType, OrtKernelContext, OrtKernelInfo, OrtKeyValuePairs, OrtLogger, OrtNode,
    OrtSessionOptions, OrtStatus, OrtStatusPtr, OrtValue,
};
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::{null, null_mut};
use std::sync::OnceLock;

/// The execution provider's name: what `get_ep_devices()` lists as `ep_name`, and (lowercased) the prefix of
/// its provider options in the session config (`ep.nibbleexecutionprovider.<key>`).
pub const EP_NAME: &CStr = c"NibbleExecutionProvider";
const VENDOR: &CStr = c"nibble";
const VERSION: &CStr = {
    match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(s) => s,
        Err(_) => panic!("version has a NUL"),
    }
};

/// The tables ORT handed us, installed once by `CreateEpFactories`.
struct Tables {
    ep: &'static OrtEpApi,
    ext: ApiExt,
}

// SAFETY: function-pointer tables that ORT keeps alive and unchanged for the process.
unsafe impl Sync for Tables {}
// SAFETY: as above.
unsafe impl Send for Tables {}

static TABLES: OnceLock<Tables> = OnceLock::new();

fn tables() -> &'static Tables {
    TABLES.get().expect("nibble: EP API used before CreateEpFactories")
}

/// Converts a status returned by an EP API or `ApiExt` call.
fn check(status: *mut OrtStatus, what: &str) -> Result<()> {
    api::check(OrtStatusPtr(status), what)
}

/// Runs `f` fenced against panics and turns its result into a status for ORT.
fn fenced(what: &str, f: impl FnOnce() -> Result<()>) -> *mut OrtStatus {
    let r = catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| Err(Error::panic(what, p)));
    api::to_status(r)
}

/// `CreateEpFactories`, behind the exported symbol in lib.rs.
///
/// # Safety
/// ORT's contract for `CreateEpApiFactoriesFn`: valid `api_base`, `factories` with room for `max` pointers,
/// writable `num`.
pub unsafe fn create_factories(
    api_base: *const OrtApiBase,
    factories: *mut *mut OrtEpFactory,
    max: usize,
    num: *mut usize,
) -> *mut OrtStatus {
    if factories.is_null() || num.is_null() {
        return null_mut(); // nothing to report through
    }
    // SAFETY: ORT passes null or a valid OrtApiBase whose function pointers live for the process.
    let Some(base) = (unsafe { api_base.as_ref() }) else { return null_mut() };
    // SAFETY: `num` is writable (contract); zero until a factory exists.
    unsafe { *num = 0 };
    let too_old = |version: &str| {
        format!(
            "{OP_PREFIX} nibble's execution provider needs ONNX Runtime >= 1.{EP_API_VERSION} (kernel registries \
             and PrePackWeight); this is {version}. On this version load libnibble_ort.so as a custom-op \
             library instead (register_custom_ops_library / RegisterCustomOpsLibrary)"
        )
    };
    crate::entry_point(base, "CreateEpFactories", EP_API_VERSION, too_old, |_| {
        // SAFETY: `entry_point` installed an API ≥ 24 table, which has every entry ApiExt reads.
        let ext = unsafe { ApiExt::read(api::api()) };
        // SAFETY: GetEpApi is a plain getter of a static table (null only in builds without plugin EPs).
        let ep = unsafe { (ext.GetEpApi)().as_ref() }
            .ok_or_else(|| Error::fail(format!("{OP_PREFIX} this ONNX Runtime has no plugin EP API")))?;
        let _ = TABLES.set(Tables { ep, ext });
        if max < 1 {
            return Err(Error::fail(format!("{OP_PREFIX} ORT offered room for {max} EP factories; nibble has one")));
        }
        let factory = Box::into_raw(Box::new(Factory::new()));
        // SAFETY: `factories` has room for `max` ≥ 1 pointers and `num` is writable (contract). ORT owns the factory
        // until it passes it to ReleaseEpFactory.
        unsafe {
            *factories = factory.cast();
            *num = 1;
        }
        Ok(())
    })
}

/// `ReleaseEpFactory`, behind the exported symbol in lib.rs.
///
/// # Safety
/// `factory` came from `create_factories` and is released once.
pub unsafe fn release_factory(factory: *mut OrtEpFactory) -> *mut OrtStatus {
    if !factory.is_null() {
        // SAFETY: a factory we boxed in create_factories (`raw` is the first field of the #[repr(C)] Factory), released
        // exactly once (contract).
        let f = unsafe { Box::from_raw(factory.cast::<Factory>()) };
        let _ = catch_unwind(AssertUnwindSafe(move || drop(f)));
    }
    null_mut()
}

// ------------------------------------------------------------------------------------------------ factory

/// `raw` must stay the first field: ORT hands `*OrtEpFactory` back and we cast it to `*Factory`.
#[repr(C)]
struct Factory {
    raw: OrtEpFactory,
    /// The `nibble` custom-op domain (our `MatMulNBits` schema, so models using it load), made on first request
    /// and then handed to every session that selects this EP. ORT keeps the pointer in those sessions' options;
    /// it is leaked, like the custom-op frontend's domains.
    nibble_domain: OnceLock<usize>,
}

impl Factory {
    fn new() -> Factory {
        Factory {
            raw: OrtEpFactory {
                ort_version_supported: EP_API_VERSION,
                GetName: factory_name,
                GetVendor: factory_vendor,
                GetSupportedDevices: supported_devices,
                CreateEp: create_ep,
                ReleaseEp: release_ep,
                GetVendorId: vendor_id,
                GetVersion: factory_version,
                ValidateCompiledModelCompatibilityInfo: null(),
                CreateAllocator: no_allocator,
                ReleaseAllocator: release_no_allocator,
                CreateDataTransfer: no_data_transfer,
                IsStreamAware: not_stream_aware,
                CreateSyncStreamForDevice: no_stream,
                GetHardwareDeviceIncompatibilityDetails: null(),
                CreateExternalResourceImporterForDevice: null(),
                GetNumCustomOpDomains: num_custom_op_domains,
                GetCustomOpDomains: custom_op_domains,
            },
            nibble_domain: OnceLock::new(),
        }
    }
}

unsafe extern "system" fn factory_name(_f: *const OrtEpFactory) -> *const c_char {
    EP_NAME.as_ptr()
}

unsafe extern "system" fn factory_vendor(_f: *const OrtEpFactory) -> *const c_char {
    VENDOR.as_ptr()
}

unsafe extern "system" fn factory_version(_f: *const OrtEpFactory) -> *const c_char {
    VERSION.as_ptr()
}

unsafe extern "system" fn vendor_id(_f: *const OrtEpFactory) -> u32 {
    0
}

/// Host memory only: ORT's CPU allocator serves our tensors, so there is no allocator of ours (ORT never asks:
/// our device declares no memory info) ...
unsafe extern "system" fn no_allocator(
    _f: *mut OrtEpFactory,
    _memory_info: *const c_void,
    _options: *const OrtKeyValuePairs,
    out: *mut *mut OrtAllocator,
) -> *mut OrtStatus {
    // SAFETY: ORT's writable out-parameter ("maybe null" in the header).
    unsafe { *out = null_mut() };
    null_mut()
}

unsafe extern "system" fn release_no_allocator(_f: *mut OrtEpFactory, _allocator: *mut OrtAllocator) {}

/// ... no data transfer (host to host needs none) ...
unsafe extern "system" fn no_data_transfer(_f: *mut OrtEpFactory, out: *mut *mut c_void) -> *mut OrtStatus {
    // SAFETY: ORT's writable out-parameter ("maybe null" in the header).
    unsafe { *out = null_mut() };
    null_mut()
}

/// ... and no streams.
unsafe extern "system" fn no_stream(
    _f: *mut OrtEpFactory,
    _memory_device: *const c_void,
    _options: *const OrtKeyValuePairs,
    out: *mut *mut c_void,
) -> *mut OrtStatus {
    // SAFETY: ORT's writable out-parameter.
    unsafe { *out = null_mut() };
    null_mut()
}

unsafe extern "system" fn not_stream_aware(_f: *const OrtEpFactory) -> bool {
    false
}

/// One `OrtEpDevice` for the host CPU (the first CPU hardware device ORT lists): nibble runs where ORT's CPU EP
/// runs, on host memory, so it declares no allocator and no data transfer.
unsafe extern "system" fn supported_devices(
    factory: *mut OrtEpFactory,
    devices: *const *const OrtHardwareDevice,
    num_devices: usize,
    ep_devices: *mut *mut OrtEpDevice,
    max_ep_devices: usize,
    num_ep_devices: *mut usize,
) -> *mut OrtStatus {
    fenced("NibbleExecutionProvider GetSupportedDevices", || {
        // SAFETY: `num_ep_devices` is ORT's writable out-parameter.
        unsafe { *num_ep_devices = 0 };
        if max_ep_devices == 0 || num_devices == 0 {
            return Ok(());
        }
        let t = tables();
        // SAFETY: ORT passes `num_devices` valid device pointers.
        let devices = unsafe { std::slice::from_raw_parts(devices, num_devices) };
        // SAFETY: each is a live hardware device owned by ORT's environment.
        let cpu = devices
            .iter()
            .find(|&&d| unsafe { (t.ext.HardwareDevice_Type)(d) } == OrtHardwareDeviceType::OrtHardwareDeviceType_CPU);
        let Some(&cpu) = cpu else { return Ok(()) };
        let mut dev: *mut OrtEpDevice = null_mut();
        // SAFETY: `factory` is ours, `cpu` a live device; no metadata or options (null is allowed); `dev` is a
        // writable local that receives a device ORT takes ownership of when we return it below.
        check(unsafe { (t.ep.CreateEpDevice)(factory, cpu, null(), null(), &mut dev) }, "CreateEpDevice")?;
        // SAFETY: ORT's out-array has room for `max_ep_devices` ≥ 1 entries.
        unsafe {
            *ep_devices = dev;
            *num_ep_devices = 1;
        }
        Ok(())
    })
}

unsafe extern "system" fn num_custom_op_domains(_f: *mut OrtEpFactory, n: *mut usize) -> *mut OrtStatus {
    // SAFETY: ORT's writable out-parameter.
    unsafe { *n = 1 };
    null_mut()
}

/// The `nibble` domain with our custom-op `MatMulNBits` (float and float16): gives ORT the schema so models in
/// that domain load; the EP claims their nodes (any left to ORT's CPU EP run the custom-op kernel).
unsafe extern "system" fn custom_op_domains(
    factory: *mut OrtEpFactory,
    domains: *mut *mut OrtCustomOpDomain,
    n: usize,
) -> *mut OrtStatus {
    fenced("NibbleExecutionProvider GetCustomOpDomains", || {
        if n < 1 {
            return Ok(());
        }
        // SAFETY: `factory` is the first field of our Factory, alive until ReleaseEpFactory.
        let f = unsafe { &*factory.cast::<Factory>() };
        let dom = match f.nibble_domain.get() {
            Some(&d) => d as *mut OrtCustomOpDomain,
            None => {
                let d = make_nibble_domain()?;
                let _ = f.nibble_domain.set(d as usize);
                d
            }
        };
        // SAFETY: ORT's out-array has room for `n` ≥ 1 entries.
        unsafe { *domains = dom };
        Ok(())
    })
}

fn make_nibble_domain() -> Result<*mut OrtCustomOpDomain> {
    let name = CString::new(domain::OUR_DOMAIN).expect("no NUL");
    let mut dom: *mut OrtCustomOpDomain = null_mut();
    // SAFETY: `api::init` ran in CreateEpFactories; `name` is NUL-terminated and outlives the call, which copies
    // it; `dom` is a writable local. We own the new domain (leaked below: ORT keeps it in session options).
    api::ort![unsafe CreateCustomOpDomain(name.as_ptr(), &mut dom)]?;
    for dtype in [Dtype::F32, Dtype::F16] {
        let config = OpConfig { default_accuracy: 4, activation_quant: nibble_kernels::ActQuant::Block };
        let def: &'static OpDef = Box::leak(Box::new(OpDef::new(dtype, config, api::API_VERSION, true)));
        // SAFETY: `dom` is the live domain created above; `def.raw()` points into a leaked, never mutated OpDef.
        api::ort![unsafe CustomOpDomain_Add(dom, def.raw())]?;
    }
    Ok(dom)
}

// ------------------------------------------------------------------------------------------------ EP

/// What each kernel of one EP instance needs from the session's settings.
#[derive(Debug, Clone, Copy)]
struct KernelSettings {
    config: OpConfig,
    pack_at: PackAt,
}

/// `raw` must stay the first field: ORT hands `*OrtEp` back and we cast it to `*Ep`.
#[repr(C)]
struct Ep {
    raw: OrtEp,
    registry: *mut OrtKernelRegistry,
    /// Boxed so its address (the kernel creation state) is stable.
    settings: Box<KernelSettings>,
    /// Which `com.microsoft` nodes GetCapability claims.
    override_ms: domain::Override,
    /// The session's logger (ORT's, alive as long as the session and so this EP).
    logger: *const OrtLogger,
}

/// The session's settings for the EP: provider options (`ep.nibbleexecutionprovider.<key>`, from
/// `add_provider_for_devices` / `AppendExecutionProvider_V2`) first, then the custom-op frontend's session keys
/// (`nibble.<key>`).
///
/// # Safety
/// `options` is the live session options ORT passes to CreateEp.
unsafe fn read_settings(options: *const OrtSessionOptions) -> Result<(domain::Registration, PackAt)> {
    let prefix = format!("ep.{}.", EP_NAME.to_string_lossy().to_lowercase());
    let plan = domain::plan_from(|key| {
        let provider_option = format!("{prefix}{}", key.trim_start_matches("nibble."));
        // SAFETY: `options` is live (this function's contract).
        unsafe { api::first_session_config(options, &[provider_option, key.to_string()]) }
    })?;
    // SAFETY: as above.
    let no_prepack = unsafe { api::session_config(options, "session.disable_prepacking")? };
    let pack_at = if no_prepack.as_deref().map(str::trim) == Some("1") { PackAt::Create } else { PackAt::PrePack };
    Ok((plan, pack_at))
}

unsafe extern "system" fn create_ep(
    _factory: *mut OrtEpFactory,
    _devices: *const *const OrtHardwareDevice,
    _metadata: *const *const OrtKeyValuePairs,
    _num_devices: usize,
    options: *const OrtSessionOptions,
    logger: *const OrtLogger,
    out: *mut *mut OrtEp,
) -> *mut OrtStatus {
    fenced("NibbleExecutionProvider CreateEp", || {
        // SAFETY: ORT's writable out-parameter; null until an EP exists.
        unsafe { *out = null_mut() };
        // SAFETY: `options` is the session options ORT passes for this EP.
        let (plan, pack_at) = unsafe { read_settings(options)? };
        let settings = Box::new(KernelSettings { config: plan.config, pack_at });
        let registry = build_registry(&plan.domains, (&*settings as *const KernelSettings).cast_mut().cast())?;
        let ep = Box::new(Ep {
            raw: OrtEp {
                ort_version_supported: EP_API_VERSION,
                GetName: ep_name,
                GetCapability: get_capability,
                Compile: null(),
                ReleaseNodeComputeInfos: null(),
                GetPreferredDataLayout: null(),
                ShouldConvertDataLayoutForOp: null(),
                SetDynamicOptions: null(),
                OnRunStart: null(),
                OnRunEnd: null(),
                CreateAllocator: null(),
                CreateSyncStreamForDevice: null(),
                GetCompiledModelCompatibilityInfo: null(),
                GetKernelRegistry: kernel_registry,
                IsConcurrentRunSupported: concurrent_run_supported,
            },
            registry,
            settings,
            override_ms: plan.override_ms,
            logger,
        });
        // SAFETY: as above; ORT owns the EP until it passes it to ReleaseEp.
        unsafe { *out = Box::into_raw(ep).cast() };
        Ok(())
    })
}

unsafe extern "system" fn release_ep(_factory: *mut OrtEpFactory, ep: *mut OrtEp) {
    if ep.is_null() {
        return;
    }
    // SAFETY: an EP we boxed in create_ep (`raw` first), released once by ORT after its sessions' kernels.
    let ep = unsafe { Box::from_raw(ep.cast::<Ep>()) };
    if !ep.registry.is_null() {
        // SAFETY: the registry we created for this EP; ORT no longer uses it (the EP is being released).
        unsafe { (tables().ep.ReleaseKernelRegistry)(ep.registry) };
    }
    let _ = catch_unwind(AssertUnwindSafe(move || drop(ep)));
}

unsafe extern "system" fn ep_name(_ep: *const OrtEp) -> *const c_char {
    EP_NAME.as_ptr()
}

unsafe extern "system" fn concurrent_run_supported(_ep: *mut OrtEp, out: *mut bool) -> *mut OrtStatus {
    // SAFETY: ORT's writable out-parameter. Kernels are immutable after prepacking; Compute is reentrant.
    unsafe { *out = true };
    null_mut()
}

unsafe extern "system" fn kernel_registry(ep: *mut OrtEp, out: *mut *const OrtKernelRegistry) -> *mut OrtStatus {
    // SAFETY: `ep` is ours (`raw` first), alive until ReleaseEp; `out` is ORT's writable out-parameter.
    unsafe { *out = (*ep.cast::<Ep>()).registry };
    null_mut()
}

/// A kernel registry with `MatMulNBits` in each of `domains`, created by `create_kernel` with `state`.
fn build_registry(domains: &[&str], state: *mut c_void) -> Result<*mut OrtKernelRegistry> {
    let ep = tables().ep;
    let mut reg: *mut OrtKernelRegistry = null_mut();
    // SAFETY: `reg` is a writable local that receives a registry we own (released by release_ep, or below).
    check(unsafe { (ep.CreateKernelRegistry)(&mut reg) }, "CreateKernelRegistry")?;
    let added = domains.iter().try_for_each(|d| {
        let def = kernel_def(d)?;
        // SAFETY: `reg` and `def` are live and ours; ORT copies the definition; `create_kernel` matches
        // OrtKernelCreateFunc and `state` (the EP's boxed settings) outlives the registry.
        let r = check(unsafe { (ep.KernelRegistry_AddKernel)(reg, def, create_kernel, state) }, "AddKernel");
        // SAFETY: the definition we built; the registry holds its own copy.
        unsafe { (ep.ReleaseKernelDef)(def) };
        r
    });
    if let Err(e) = added {
        // SAFETY: our registry, not handed to ORT yet.
        unsafe { (ep.ReleaseKernelRegistry)(reg) };
        return Err(e);
    }
    Ok(reg)
}

/// The kernel definition of `domain::MatMulNBits` for this EP: every opset version; in `com.microsoft` A (T1)
/// float or float16 (ORT's schema also allows bfloat16, which stays on ORT's kernel). The `nibble` domain's
/// schema is ours and already limits A to those two.
fn kernel_def(domain: &str) -> Result<*mut OrtKernelDef> {
    let ep = tables().ep;
    let mut b: *mut OrtKernelDefBuilder = null_mut();
    // SAFETY: `b` is a writable local receiving a builder we own, released at the end of this function.
    check(unsafe { (ep.CreateKernelDefBuilder)(&mut b) }, "CreateKernelDefBuilder")?;
    let dom = CString::new(domain).expect("no NUL");
    let built = (|| -> Result<*mut OrtKernelDef> {
        // SAFETY: `b` is our live builder (for every call in this closure); the strings are NUL-terminated and
        // outlive each call, which copies them; `types` holds pointers to ORT's static data types.
        check(unsafe { (ep.KernelDefBuilder_SetOperatorType)(b, c"MatMulNBits".as_ptr()) }, "SetOperatorType")?;
        // SAFETY: as above.
        check(unsafe { (ep.KernelDefBuilder_SetDomain)(b, dom.as_ptr()) }, "SetDomain")?;
        // SAFETY: as above.
        check(unsafe { (ep.KernelDefBuilder_SetSinceVersion)(b, 1, c_int::MAX) }, "SetSinceVersion")?;
        // SAFETY: as above.
        check(unsafe { (ep.KernelDefBuilder_SetExecutionProvider)(b, EP_NAME.as_ptr()) }, "SetExecutionProvider")?;
        if domain == domain::MS_DOMAIN {
            let mut types: [*const OrtDataType; 2] = [null(); 2];
            for (slot, ty) in types
                .iter_mut()
                .zip([Ty::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, Ty::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16])
            {
                // SAFETY: `slot` is a writable local slot; ORT returns a pointer to a static data type.
                check(unsafe { (ep.GetTensorDataType)(ty, slot) }, "GetTensorDataType")?;
            }
            // SAFETY: as above; `types` holds 2 valid pointers.
            let st = unsafe { (ep.KernelDefBuilder_AddTypeConstraint)(b, c"T1".as_ptr(), types.as_ptr(), 2) };
            check(st, "AddTypeConstraint")?;
        }
        let mut def: *mut OrtKernelDef = null_mut();
        // SAFETY: as above; `def` is a writable local receiving a definition the caller owns.
        check(unsafe { (ep.KernelDefBuilder_Build)(b, &mut def) }, "KernelDefBuilder_Build")?;
        Ok(def)
    })();
    // SAFETY: the builder we created; not used after this.
    unsafe { (ep.ReleaseKernelDefBuilder)(b) };
    built
}

/// Claims every node our kernel registry has a kernel for (ORT matches domain, op type, opset and types), except
/// the `com.microsoft` nodes ORT's own kernel runs faster on this CPU ([`ort_runs`]), which it logs and leaves.
unsafe extern "system" fn get_capability(
    ep: *mut OrtEp,
    graph: *const OrtGraph,
    info: *mut OrtEpGraphSupportInfo,
) -> *mut OrtStatus {
    fenced("NibbleExecutionProvider GetCapability", || {
        // SAFETY: `ep` is one of ours (`raw` first), alive while ORT calls it; only read.
        let ep = unsafe { &*ep.cast::<Ep>() };
        let t = tables();
        let mut n = 0usize;
        // SAFETY: `graph` is the live graph ORT passes for this call; `n` is a writable local.
        check(unsafe { (t.ext.Graph_GetNumNodes)(graph, &mut n) }, "Graph_GetNumNodes")?;
        let mut nodes: Vec<*const OrtNode> = vec![null(); n];
        // SAFETY: as above; `nodes` has room for `n` pointers, which stay owned by the graph.
        check(unsafe { (t.ext.Graph_GetNodes)(graph, nodes.as_mut_ptr(), n) }, "Graph_GetNodes")?;
        for node in nodes {
            let mut def: *const OrtKernelDef = null();
            // SAFETY: `info` is this call's support info and `node` one of its graph's nodes; `def` is a writable
            // local (a borrowed definition or null).
            check(unsafe { (t.ep.EpGraphSupportInfo_LookUpKernel)(info, node, &mut def) }, "LookUpKernel")?;
            if def.is_null() {
                continue;
            }
            // SAFETY: `node` is a node of the live graph of this call.
            if let Some((name, why)) = unsafe { ort_runs(ep, node) } {
                let msg = format!("{OP_PREFIX} node '{name}' left to ORT's own kernel: {why}");
                // SAFETY: the session's logger, alive as long as this EP.
                let _ = unsafe { api::log_info(ep.logger, &msg, c"provider/src/ep/mod.rs", c"GetCapability") };
                continue;
            }
            // SAFETY: as above.
            check(unsafe { (t.ep.EpGraphSupportInfo_AddSingleNode)(info, node) }, "AddSingleNode")?;
        }
        Ok(())
    })
}

/// The name of a `com.microsoft::MatMulNBits` `node` ORT's own kernel runs faster on this CPU, and why
/// (`domain::ort_runs_node`), or None for a node nibble runs. A node whose attributes cannot be read is nibble's:
/// its kernel creation reports what is wrong in the op's words.
///
/// # Safety
/// `node` is a live node of the graph ORT passed to GetCapability.
unsafe fn ort_runs(ep: &Ep, node: *const OrtNode) -> Option<(String, String)> {
    if ep.override_ms != domain::Override::Auto {
        return None;
    }
    let x = &tables().ext;
    let text = |f: unsafe extern "system" fn(*const OrtNode, *mut *const c_char) -> *mut OrtStatus| {
        let mut p: *const c_char = null();
        // SAFETY: `node` is live (this function's contract); `p` is a writable local that receives a string owned
        // by the node, copied right away.
        check(unsafe { f(node, &mut p) }, "Node_GetDomain/GetName").ok()?;
        // SAFETY: as above: null or a NUL-terminated string owned by the node.
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    };
    if text(x.Node_GetDomain)? != domain::MS_DOMAIN {
        return None;
    }
    let attr = |name: &CStr| -> Option<Option<i64>> {
        let mut a = null();
        // SAFETY: `node` is live; `name` is NUL-terminated; `a` is a writable local receiving an attribute owned by
        // the node. An absent attribute is an error status (released by `check`) or null.
        let found = check(unsafe { (x.Node_GetAttributeByName)(node, name.as_ptr(), &mut a) }, "attribute").is_ok();
        if !found || a.is_null() {
            return Some(None);
        }
        // SAFETY: `a` is the node's live attribute (above).
        unsafe { api::read_int_attr(a) }.ok().map(Some)
    };
    let mut n = 0usize;
    // SAFETY: `node` is live; `n` is a writable local.
    check(unsafe { (x.Node_GetNumInputs)(node, &mut n) }, "Node_GetNumInputs").ok()?;
    let mut inputs = vec![null(); n];
    // SAFETY: `node` is live; `inputs` has room for the `n` pointers ORT writes (value infos owned by the graph).
    check(unsafe { (x.Node_GetInputs)(node, inputs.as_mut_ptr(), n) }, "Node_GetInputs").ok()?;
    let traits = nibble_kernels::versus_ort::NodeTraits {
        bits: attr(c"bits")?.unwrap_or(4),
        block_size: attr(c"block_size")??,
        k: attr(c"K")??,
        accuracy_level: attr(c"accuracy_level")?.unwrap_or(0),
        zero_points: inputs.get(3).is_some_and(|p| !p.is_null()),
    };
    let why = domain::ort_runs_node(ep.override_ms, &traits)?;
    Some((text(x.Node_GetName).unwrap_or_default(), why))
}

// ------------------------------------------------------------------------------------------------ kernel

/// `raw` must stay the first field: ORT hands `*OrtKernelImpl` back and we cast it to `*Kernel`.
#[repr(C)]
struct Kernel {
    raw: OrtKernelImpl,
    op: MatMulNBits,
}

unsafe extern "system" fn create_kernel(
    state: *mut c_void,
    info: *const OrtKernelInfo,
    out: *mut *mut OrtKernelImpl,
) -> *mut OrtStatus {
    fenced("MatMulNBits create", || {
        // SAFETY: `state` is the boxed KernelSettings of the EP that owns the registry (alive while its sessions
        // create kernels); `info` is this node's kernel info, used only during this call.
        let (settings, info) = unsafe { (&*state.cast::<KernelSettings>(), KernelInfo::new(info)) };
        let dtype = info.input_dtype(0)?;
        let op = MatMulNBits::create(&info, dtype, &settings.config, settings.pack_at)?;
        let k = Box::new(Kernel {
            raw: OrtKernelImpl {
                ort_version_supported: EP_API_VERSION,
                flags: 0,
                Compute: kernel_compute,
                Release: kernel_release,
                PrePackWeight: Some(prepack_weight),
                SetSharedPrePackedWeight: Some(set_shared_prepacked_weight),
            },
            op,
        });
        // SAFETY: ORT's writable out-parameter; ORT owns the kernel until it calls Release.
        unsafe { *out = Box::into_raw(k).cast() };
        Ok(())
    })
}

unsafe extern "system" fn kernel_compute(this: *mut OrtKernelImpl, ctx: *mut OrtKernelContext) -> *mut OrtStatus {
    fenced("MatMulNBits compute", || {
        // SAFETY: `this` is our kernel (`raw` first), alive until Release; Compute may run concurrently, so only a
        // shared reference is formed. `ctx` is this call's context.
        let (k, ctx) = unsafe { (&*this.cast::<Kernel>(), KernelContext::new(ctx)) };
        k.op.compute(&ctx)
    })
}

unsafe extern "system" fn kernel_release(this: *mut OrtKernelImpl) {
    if this.is_null() {
        return;
    }
    // SAFETY: our kernel, released exactly once by ORT.
    let k = unsafe { Box::from_raw(this.cast::<Kernel>()) };
    let _ = catch_unwind(AssertUnwindSafe(move || drop(k)));
}

/// ORT hands over a constant input. The op keeps what it needs (a copy, until the weight set is complete and
/// packed) and reports it packed, so ORT frees the initializer. Nothing goes to ORT's shared cache: ORT shares
/// that cache across sessions only for its own CPU EP's nodes, so packed weights are shared by `crate::shared`.
unsafe extern "system" fn prepack_weight(
    this: *mut OrtKernelImpl,
    tensor: *const OrtValue,
    input_index: c_int,
    _allocator: *mut OrtAllocator,
    _cache: *mut OrtSharedPrePackedWeightCache,
    is_packed: *mut bool,
) -> *mut OrtStatus {
    fenced("MatMulNBits prepack", || {
        // SAFETY: ORT's writable out-parameter.
        unsafe { *is_packed = false };
        // SAFETY: `this` is our kernel; ORT calls PrePackWeight during session initialization, before any Compute
        // and never concurrently with another call on this kernel, so a unique reference is sound.
        let k = unsafe { &mut *this.cast::<Kernel>() };
        // SAFETY: `tensor` is a live constant initializer for the duration of this call (we copy what we keep).
        let t = unsafe { Tensor::from_value(tensor)? };
        let index = usize::try_from(input_index).map_err(|_| Error::fail(format!("input index {input_index}")))?;
        let packed = k.op.prepack(index, &t)?;
        // SAFETY: as above.
        unsafe { *is_packed = packed };
        Ok(())
    })
}

/// Never called: `prepack_weight` stores nothing in ORT's shared cache.
unsafe extern "system" fn set_shared_prepacked_weight(
    _this: *mut OrtKernelImpl,
    _buffers: *const *const c_void,
    _sizes: *const usize,
    _n: usize,
    input_index: c_int,
) -> *mut OrtStatus {
    api::to_status(Err(Error::fail(format!(
        "{OP_PREFIX} SetSharedPrePackedWeight for input {input_index}: nibble stores no packed weights in ORT's cache"
    ))))
}
