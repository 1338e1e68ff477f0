//! For Rust hosts (the Llama driver, the integration tests): loading `libnibble_ort.so` as an execution provider
//! through ORT's C API, given the `OrtApi` table and environment the host already has (e.g. from the `ort` crate:
//! `ort::api()`, `Environment::ptr()`, `SessionBuilder::ptr_mut()`).
//!
//! The `ort` crate (2.0.0-rc.15) has this as `Environment::register_ep_library` + `SessionBuilder::with_devices`,
//! but only with its `api-22` feature, which also makes it refuse runtimes older than 1.22; hosts that must keep
//! running on older ORT (with the custom-op frontend) call these instead. They read the API-22 entries by index
//! from the table (checked against the vendored header like the EP bindings) after checking the runtime's
//! version, so on an older ORT they return an error rather than calling past the table's end.
//!
//! Usage:
//! ```ignore
//! let api = ort::api();
//! // once per environment:
//! let version = nibble_ort::host::runtime_version(&ort_dylib_path)?;
//! unsafe { nibble_ort::host::register_ep_library(api, &version, env.ptr().cast_mut(), "nibble", &lib_path) }?;
//! // per session, before committing the builder:
//! let devices = unsafe { nibble_ort::host::ep_devices(api, env.ptr().cast_mut()) }?;
//! unsafe { nibble_ort::host::append_ep(api, builder.ptr_mut(), env.ptr().cast_mut(), &devices, &[]) }?;
//! ```

use crate::ep::EP_NAME;
use crate::ep::abi::api_entry;
use ort_sys::{OrtApi, OrtEnv, OrtEpDevice, OrtSessionOptions, OrtStatus};
use std::ffi::{CStr, CString, c_char};
use std::path::Path;

/// Indices (in pointers) of the `OrtApi` entries used here (API 22; checked by `ep::abi`'s layout test).
pub(crate) mod index {
    pub const REGISTER_EP_LIBRARY: usize = 301;
    pub const GET_EP_DEVICES: usize = 303;
    pub const APPEND_EP_V2: usize = 304;
    pub const EP_DEVICE_EP_NAME: usize = 312;
}

type RegisterFn = unsafe extern "system" fn(*mut OrtEnv, *const c_char, *const c_char) -> *mut OrtStatus;
type DevicesFn = unsafe extern "system" fn(*const OrtEnv, *mut *const *const OrtEpDevice, *mut usize) -> *mut OrtStatus;
type AppendFn = unsafe extern "system" fn(
    *mut OrtSessionOptions,
    *mut OrtEnv,
    *const *const OrtEpDevice,
    usize,
    *const *const c_char,
    *const *const c_char,
    usize,
) -> *mut OrtStatus;
type EpNameFn = unsafe extern "system" fn(*const OrtEpDevice) -> *const c_char;

fn check(api: &OrtApi, status: *mut OrtStatus, what: &str) -> Result<(), String> {
    if status.is_null() {
        return Ok(());
    }
    // SAFETY: a non-null status an ORT call just returned; we copy its message, then release it once.
    let msg = unsafe {
        let m = CStr::from_ptr((api.GetErrorMessage)(status)).to_string_lossy().into_owned();
        (api.ReleaseStatus)(status);
        m
    };
    Err(format!("{what}: {msg}"))
}

/// The version ("1.MINOR.PATCH") of the ONNX Runtime shared library at `dylib`, from its
/// `OrtGetApiBase()->GetVersionString()`: what `register_ep_library` needs, and what tells a host which frontend
/// the runtime supports before it creates sessions. Loads the library (`dlopen`; a host that uses it has it
/// loaded anyway, so the handle is kept).
pub fn runtime_version(dylib: &Path) -> Result<String, String> {
    // SAFETY: loading ONNX Runtime runs its static initialisers, which have no preconditions on the caller.
    let lib =
        unsafe { libloading::Library::new(dylib) }.map_err(|e| format!("cannot load {}: {e}", dylib.display()))?;
    // SAFETY: OrtGetApiBase has the C signature `const OrtApiBase* OrtGetApiBase(void)` in every ORT.
    let get_base = unsafe { lib.get::<unsafe extern "C" fn() -> *const ort_sys::OrtApiBase>(b"OrtGetApiBase") }
        .map_err(|e| format!("{} has no OrtGetApiBase ({e}): not an ONNX Runtime library", dylib.display()))?;
    // SAFETY: the base and its version string are static in the library, which is loaded (and stays so below).
    let version = unsafe {
        let base = get_base().as_ref().ok_or_else(|| format!("{}: OrtGetApiBase returned null", dylib.display()))?;
        CStr::from_ptr((base.GetVersionString)()).to_string_lossy().into_owned()
    };
    std::mem::forget(lib); // keep the runtime loaded: the host uses it (unloading ORT is not something it expects)
    Ok(version)
}

/// Whether ONNX Runtime `version` ("1.MINOR.PATCH") can run nibble as an execution provider (1.24+); older ones
/// load it as a custom-op library.
pub fn supports_ep(version: &str) -> bool {
    crate::runtime_minor(version) >= crate::ep::abi::EP_API_VERSION
}

/// Registers `lib` as execution-provider library `name` in `env` (once per environment and name). A relative `lib`
/// is taken from the current directory, as a user means it (ORT itself would look for it beside its own library).
///
/// # Safety
/// `api` is the table of the ORT that owns `env`, a live environment, and that ORT's version is `version`
/// ("1.MINOR.PATCH", from `OrtApiBase::GetVersionString`).
pub unsafe fn register_ep_library(
    api: &OrtApi,
    version: &str,
    env: *mut OrtEnv,
    name: &str,
    lib: &Path,
) -> Result<(), String> {
    let minor = crate::runtime_minor(version);
    if minor < 22 {
        return Err(format!(
            "ONNX Runtime {version} cannot load execution-provider libraries (1.22+; nibble's EP needs 1.{}+): \
             load libnibble_ort.so as a custom-op library instead",
            crate::ep::abi::EP_API_VERSION
        ));
    }
    let lib = ep_library_path(lib)?;
    let (cname, cpath) = (
        CString::new(name).map_err(|e| e.to_string())?,
        CString::new(lib.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?,
    );
    // SAFETY: API ≥ 22 (checked above) has RegisterExecutionProviderLibrary at this index.
    let f: RegisterFn = unsafe { api_entry(api, index::REGISTER_EP_LIBRARY) };
    // SAFETY: `env` is live (contract); both strings are NUL-terminated and outlive the call.
    check(api, unsafe { f(env, cname.as_ptr(), cpath.as_ptr()) }, &format!("registering {}", lib.display()))
}

/// The path `register_ep_library` gives ORT: `lib` from the current directory when relative (ORT would resolve it
/// against its own library's directory, never what a user typing `--lib target/...` means).
fn ep_library_path(lib: &Path) -> Result<std::path::PathBuf, String> {
    std::path::absolute(lib).map_err(|e| format!("registering {}: {e}", lib.display()))
}

/// nibble's EP devices in `env` (one, for the host CPU), after `register_ep_library`.
///
/// # Safety
/// As for `register_ep_library` (API ≥ 22).
pub unsafe fn ep_devices(api: &OrtApi, env: *mut OrtEnv) -> Result<Vec<*const OrtEpDevice>, String> {
    // SAFETY: API ≥ 22 (contract) has these entries at these indices.
    let (get, ep_name): (DevicesFn, EpNameFn) =
        unsafe { (api_entry(api, index::GET_EP_DEVICES), api_entry(api, index::EP_DEVICE_EP_NAME)) };
    let (mut ptr, mut n): (*const *const OrtEpDevice, usize) = (std::ptr::null(), 0);
    // SAFETY: `env` is live; `ptr`/`n` are writable locals receiving an array the environment owns.
    check(api, unsafe { get(env, &mut ptr, &mut n) }, "GetEpDevices")?;
    let all: &[*const OrtEpDevice] = if n == 0 {
        &[]
    } else {
        // SAFETY: ORT returned `n` device pointers at `ptr`, alive as long as the environment.
        unsafe { std::slice::from_raw_parts(ptr, n) }
    };
    // SAFETY: each is a live device; EpDevice_EpName returns a NUL-terminated string it owns.
    let ours: Vec<_> = all.iter().copied().filter(|&d| unsafe { CStr::from_ptr(ep_name(d)) } == EP_NAME).collect();
    if ours.is_empty() {
        return Err(format!("no {} device: register the library first", EP_NAME.to_string_lossy()));
    }
    Ok(ours)
}

/// Adds nibble's EP on `devices` to the session options `so`, with provider options `options` (keys without
/// the `ep.nibbleexecutionprovider.` prefix, e.g. `("accuracy_level_default", "1")`).
///
/// # Safety
/// As for `register_ep_library`; `so` is live session options of that ORT and `devices` came from `ep_devices`.
pub unsafe fn append_ep(
    api: &OrtApi,
    so: *mut OrtSessionOptions,
    env: *mut OrtEnv,
    devices: &[*const OrtEpDevice],
    options: &[(&str, &str)],
) -> Result<(), String> {
    let keys: Vec<CString> = options.iter().map(|(k, _)| CString::new(*k).expect("no NUL")).collect();
    let vals: Vec<CString> = options.iter().map(|(_, v)| CString::new(*v).expect("no NUL")).collect();
    let (kp, vp): (Vec<*const c_char>, Vec<*const c_char>) =
        (keys.iter().map(|k| k.as_ptr()).collect(), vals.iter().map(|v| v.as_ptr()).collect());
    // SAFETY: API ≥ 22 (contract) has SessionOptionsAppendExecutionProvider_V2 at this index.
    let f: AppendFn = unsafe { api_entry(api, index::APPEND_EP_V2) };
    // SAFETY: `so`, `env` and `devices` are live (contract); the key/value arrays hold `options.len()` NUL-terminated
    // strings that outlive the call, which copies them.
    check(
        api,
        unsafe { f(so, env, devices.as_ptr(), devices.len(), kp.as_ptr(), vp.as_ptr(), options.len()) },
        "SessionOptionsAppendExecutionProvider_V2",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_ep_library_paths_are_taken_from_the_current_directory() {
        let cwd = std::env::current_dir().unwrap();
        let got = ep_library_path(Path::new("target/release/libnibble_ort.so")).unwrap();
        assert_eq!(got, cwd.join("target/release/libnibble_ort.so"));
        assert!(got.is_absolute());
        let abs = Path::new("/opt/nibble/libnibble_ort.so");
        assert_eq!(ep_library_path(abs).unwrap(), abs);
    }
}
