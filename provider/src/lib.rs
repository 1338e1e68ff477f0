//! nibble-ort: ONNX Runtime `MatMulNBits` on nibble's kernels, as a plugin execution provider (ORT >= 1.24) and as a
//! custom-op library (ORT >= 1.17), from one shared library.
//!
//! Exports four symbols and links nothing from ONNX Runtime (the API tables come from the `OrtApiBase` ORT passes in):
//! - [`RegisterCustomOps`]: registers `MatMulNBits` (float and float16 variants) in domain `nibble` and, unless the
//!   session config entry `nibble.override_com_microsoft` is "0", in `com.microsoft`, where it replaces ORT's own
//!   kernel for existing models. `nibble.accuracy_level_default` ("4" default, or "1") chooses the compute path of
//!   nodes without accuracy_level. Both entries are read when the library is registered.
//! - [`CreateEpFactories`] / [`ReleaseEpFactory`]: the `NibbleExecutionProvider` (module `ep`), which claims the same
//!   nodes with the same settings (also as provider options) and takes the weights over through `PrePackWeight`, so
//!   ORT frees the initializers.
//! - [`NibbleInfo`]: what nibble detects and chooses on this CPU, as text or JSON (`nibble_ort.info()`; no ORT).
//!
//! Walk: the entry points (here) → `custom_op` or `ep` trampolines (panic fences, FFI) → `matmul_nbits` (safe:
//! attributes, validation, packing, compute; the same for both) → `shared` (packed weights shared process-wide) →
//! `nibble_kernels`.

mod api;
mod custom_op;
pub mod domain;
pub mod ep;
#[doc(hidden)]
pub mod fuzzing;
pub mod host;
pub mod info;
mod matmul_nbits;
pub mod shared;
mod status;

use api::Dtype;
use custom_op::OpDef;
use ort_sys::{OrtApiBase, OrtCustomOpDomain, OrtSessionOptions, OrtStatus};
use status::{Error, Result};
use std::ffi::{CStr, CString};

/// Prefix of every message we produce, errors and log lines: the library first, so nobody takes them for ORT's own
/// kernel, then the op.
pub const OP_PREFIX: &str = "nibble [MatMulNBits]";

/// Entry point called by ORT's `RegisterCustomOpsLibrary*` / `register_custom_ops_library`.
///
/// # Safety
/// Called by ONNX Runtime with valid `options` and `api_base`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn RegisterCustomOps(
    options: *mut OrtSessionOptions,
    api_base: *const OrtApiBase,
) -> *mut OrtStatus {
    // SAFETY: ORT passes null or a valid OrtApiBase whose function pointers live for the process.
    let Some(base) = (unsafe { api_base.as_ref() }) else {
        return std::ptr::null_mut(); // nothing to report through
    };
    let too_old =
        |version: &str| format!("{OP_PREFIX} nibble needs ONNX Runtime >= 1.{}, this is {version}", api::API_VERSION);
    entry_point(base, "RegisterCustomOps", api::API_VERSION, too_old, |minor| {
        // SAFETY: `options` is the session options ORT is registering us into.
        unsafe { register(options, minor) }
    })
}

/// The common part of our entry points: checks the runtime is at least API `need` (`too_old(version)` words the
/// error), requests that API table and installs it (`api::init`), then runs `f(runtime minor)`. Panics are caught;
/// an error comes back as an `OrtStatus` made with the runtime's own API 1 table (ours may not be installed).
fn entry_point(
    base: &OrtApiBase,
    what: &str,
    need: u32,
    too_old: impl FnOnce(&str) -> String,
    f: impl FnOnce(u32) -> Result<()>,
) -> *mut OrtStatus {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: `base` is ORT's OrtApiBase; the version string is static in ORT.
        let version = unsafe { CStr::from_ptr((base.GetVersionString)()) }.to_string_lossy().into_owned();
        let minor = runtime_minor(&version);
        if minor < need {
            return Err(Error::fail(too_old(&version)));
        }
        // SAFETY: GetApi returns null or a table valid for the process; `need` ≤ the runtime's version (checked).
        let table = unsafe { (base.GetApi)(need).as_ref() }
            .ok_or_else(|| Error::fail(format!("{OP_PREFIX} ONNX Runtime {version} returned no API {need}")))?;
        api::init(table, minor);
        f(minor)
    }));
    match r.unwrap_or_else(|p| Err(Error::panic(what, p))) {
        Ok(()) => std::ptr::null_mut(),
        Err(e) => {
            // SAFETY: GetApi(1) is supported by every runtime and has CreateStatus.
            let table = unsafe { (base.GetApi)(1).as_ref() };
            table.map_or(std::ptr::null_mut(), |t| api::make_status(t, &e))
        }
    }
}

/// Entry point of ORT's plugin execution-provider libraries (ORT ≥ 1.24: `register_execution_provider_library` /
/// `RegisterExecutionProviderLibrary`): creates nibble's one EP factory. On older runtimes it fails with a
/// message naming the version needed and the custom-op alternative.
///
/// # Safety
/// Called by ONNX Runtime with a valid `api_base`, `factories` with room for `max_factories` pointers, and a
/// writable `num_factories`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn CreateEpFactories(
    _registered_name: *const std::ffi::c_char,
    api_base: *const OrtApiBase,
    _default_logger: *const ort_sys::OrtLogger,
    factories: *mut *mut ep::abi::OrtEpFactory,
    max_factories: usize,
    num_factories: *mut usize,
) -> *mut OrtStatus {
    // SAFETY: forwarded with ORT's guarantees (this function's contract).
    unsafe { ep::create_factories(api_base, factories, max_factories, num_factories) }
}

/// Releases the factory `CreateEpFactories` made (ORT calls it when the library is unregistered).
///
/// # Safety
/// `factory` came from `CreateEpFactories` and is released once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ReleaseEpFactory(factory: *mut ep::abi::OrtEpFactory) -> *mut OrtStatus {
    // SAFETY: forwarded with ORT's guarantees (this function's contract).
    unsafe { ep::release_factory(factory) }
}

/// What nibble detects and chooses on this machine: `format` 1 gives one JSON object (what `nibble-info --json`
/// prints and the Python package's `nibble_ort.info()` returns), 0 the report for a person (`nibble-info`):
/// version, supported ONNX Runtime versions, CPU features, kernel ladder, and the family each (compute path, bits,
/// block size) gets. Needs no ONNX Runtime. The string is computed on the first call and lives as long as the
/// library stays loaded; null for another `format`, or if computing it panicked.
#[unsafe(no_mangle)]
pub extern "C" fn NibbleInfo(format: std::ffi::c_int) -> *const std::ffi::c_char {
    static REPORTS: std::sync::OnceLock<Option<[CString; 2]>> = std::sync::OnceLock::new();
    let reports = REPORTS.get_or_init(|| {
        std::panic::catch_unwind(|| {
            let info = info::Info::gather();
            Some([CString::new(info.text()).ok()?, CString::new(info.json()).ok()?])
        })
        .ok()
        .flatten()
    });
    match (reports, usize::try_from(format)) {
        (Some(r), Ok(i)) if i < r.len() => r[i].as_ptr(),
        _ => std::ptr::null(),
    }
}

/// "1.20.1" → 20 (0 if unparsable, which fails the version check with the string in the message).
pub(crate) fn runtime_minor(version: &str) -> u32 {
    version.split('.').nth(1).and_then(|m| m.parse().ok()).unwrap_or(0)
}

/// ORT versions before this one crash (null dereference) building the shape-inference context of a custom
/// op whose node has an empty optional input, e.g. `[A, B, scales, zero_points, "", bias]` (seen on 1.20.1,
/// 1.22.1 and 1.23.2; fixed by 1.24). There we register no shape inference: ORT still knows the output type,
/// and Compute checks A against K.
const SHAPE_INFERENCE_SINCE_MINOR: u32 = 24;

/// # Safety
/// `options` is a live `OrtSessionOptions` (the one ORT passed to `RegisterCustomOps`), and `api::init` ran.
unsafe fn register(options: *mut OrtSessionOptions, runtime_minor: u32) -> Result<()> {
    let op_version = runtime_minor.min(api::API_VERSION);
    let shape_inference = runtime_minor >= SHAPE_INFERENCE_SINCE_MINOR;
    // Each setting under its own key, or as C++'s RegisterCustomOpsLibrary(path, CustomOpConfigs) stores it.
    // SAFETY: `options` is live (this function's contract).
    if unsafe { api::session_config(options, domain::KEY_REGISTERED)? }.is_some() {
        return Err(Error::invalid(format!(
            "{OP_PREFIX} libnibble_ort.so is already registered on these session options: register it once per \
             SessionOptions (ORT would add its domains twice and fail with \"Domain already set in registry\")"
        )));
    }
    // SAFETY: as above.
    if let Some(entries) = unsafe { api::session_config_entries(options)? }
        && let Some(key) = domain::unknown_key(entries.iter().map(|(k, _)| k.as_str()))
    {
        return Err(domain::unknown_key_error(key));
    }
    let plan = domain::plan_from(|key| {
        // SAFETY: `options` is live (this function's contract).
        unsafe { api::first_session_config(options, &domain::custom_op_spellings(key)) }
    })?;
    let mut domains = plan.domains.clone();
    if let Some(why) = domain::ort_keeps_ms_domain(plan.override_ms) {
        domains.retain(|&d| d != domain::MS_DOMAIN);
        // No session logger exists yet: say it once per process on stderr, where ORT's own log goes by default.
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            eprintln!(
                "{OP_PREFIX} com.microsoft::MatMulNBits left to ORT's own kernel: {why}. Nodes in domain nibble \
                 still run nibble; {}=1 or NIBBLE_FAMILIES runs nibble on com.microsoft too",
                domain::KEY_OVERRIDE
            )
        });
    }
    for &name in &domains {
        let cname = CString::new(name).expect("domain names have no NUL");
        let mut dom: *mut OrtCustomOpDomain = std::ptr::null_mut();
        // SAFETY: `api::init` ran (this function's contract); `cname` is NUL-terminated and outlives the call,
        // which copies it; `dom` is a writable local. On success we own the new domain until AddCustomOpDomain.
        api::ort![unsafe CreateCustomOpDomain(cname.as_ptr(), &mut dom)]?;
        let added = [Dtype::F32, Dtype::F16].into_iter().try_for_each(|dtype| {
            // ORT keeps the op's pointer for the life of every session made from these options: leak it (a
            // few hundred bytes per registration).
            let def = OpDef::new(dtype, plan.config, op_version, shape_inference).registered(plan.clone());
            let def: &'static OpDef = Box::leak(Box::new(def));
            // SAFETY: `dom` is the live domain created above (ours, not released); `def.raw()` points into a
            // leaked, never mutated `OpDef`, so it stays valid for as long as ORT keeps it.
            api::ort![unsafe CustomOpDomain_Add(dom, def.raw())]
        });
        // SAFETY: `options` is the live session options (this function's contract); `dom` is the live domain
        // created above. On success ORT keeps the pointer for the life of the options and its sessions, so we
        // never release it after that.
        let added = added.and_then(|()| api::ort![unsafe AddCustomOpDomain(options, dom)]);
        if let Err(e) = added {
            // SAFETY: `dom` came from CreateCustomOpDomain and was not handed to the options (AddCustomOpDomain
            // failed or never ran), so we still own it and release it exactly once.
            unsafe { (api::api().ReleaseCustomOpDomain)(dom) };
            return Err(e);
        }
        // From here ORT reads the domain for the life of the sessions and never frees it: leaked on purpose.
    }
    // SAFETY: `options` is live (this function's contract).
    unsafe { api::set_session_config(options, domain::KEY_REGISTERED, "1") }
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_runtime_minor() {
        assert_eq!(super::runtime_minor("1.20.1"), 20);
        assert_eq!(super::runtime_minor("1.31.1"), 31);
        assert_eq!(super::runtime_minor("garbage"), 0);
    }
}
