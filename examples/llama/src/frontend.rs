//! How ONNX Runtime loads nibble: as an execution provider (ORT ≥ 1.24) or as a custom-op library (every supported
//! ORT). The EP calls go through `nibble_ort::host` (the `ort` crate has them only behind its `api-22` feature,
//! which would make the driver refuse ORT < 1.22, where the custom-op frontend still runs).

use std::path::Path;

use anyhow::{Result, anyhow, bail};
use ort::AsPointer;
use ort::environment::Environment;
use ort::session::builder::SessionBuilder;

use crate::cli::FrontendArg;

/// The frontend a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frontend {
    /// `SessionBuilder::with_operator_library`.
    CustomOp,
    /// The library registered once in the environment as EP library "nibble", its device appended per session.
    Ep,
}

impl Frontend {
    pub fn name(self) -> &'static str {
        match self {
            Frontend::CustomOp => "custom-op",
            Frontend::Ep => "ep",
        }
    }

    /// `--frontend` against the runtime's version: `auto` picks the EP where the runtime has it; an explicit `ep`
    /// on an older runtime is an error naming both versions.
    pub fn resolve(arg: FrontendArg, ort_version: &str, ort_dylib: &Path) -> Result<Self> {
        let ep = nibble_ort::host::supports_ep(ort_version);
        Ok(match arg {
            FrontendArg::Auto if ep => Frontend::Ep,
            FrontendArg::Auto | FrontendArg::CustomOp => Frontend::CustomOp,
            FrontendArg::Ep if ep => Frontend::Ep,
            FrontendArg::Ep => bail!(
                "--frontend ep needs ONNX Runtime >= {} (the kernel-based plugin EP API); {} is {ort_version}: \
                 use --frontend custom-op (or auto), or a newer --ort-dylib",
                nibble_ort::info::ort_min_ep(),
                ort_dylib.display()
            ),
        })
    }
}

/// The process's ORT environment from `ort_dylib`, its version, and nibble's frontend on it when `lib` is given
/// (`arg` against the runtime's version; the EP library registered when it is the EP).
pub fn start(
    ort_dylib: &Path,
    lib: Option<&Path>,
    arg: FrontendArg,
) -> Result<(Environment, String, Option<Frontend>)> {
    let env = crate::model::init_ort(ort_dylib)?;
    let version = nibble_ort::host::runtime_version(ort_dylib).map_err(|e| anyhow!(e))?;
    let frontend = match lib {
        None => None,
        Some(lib) => {
            let f = Frontend::resolve(arg, &version, ort_dylib)?;
            if f == Frontend::Ep {
                register_ep(&env, &version, lib)?;
            }
            Some(f)
        }
    };
    Ok((env, version, frontend))
}

/// Registers `lib` as execution-provider library "nibble" in `env` (once per process: the driver has one
/// environment).
pub fn register_ep(env: &Environment, ort_version: &str, lib: &Path) -> Result<()> {
    // SAFETY: `ort::api()` is the table of the runtime that owns `env` (ort loaded exactly one), `env` is live for
    // the call, and `ort_version` was read from that same library (host::runtime_version).
    unsafe { nibble_ort::host::register_ep_library(ort::api(), ort_version, env.ptr().cast_mut(), "nibble", lib) }
        .map_err(|e| anyhow!("registering {} as an execution provider: {e}", lib.display()))
}

/// Adds nibble's EP (its one CPU device) to the session being built; ORT's CPU EP keeps every other node.
pub fn append_ep(env: &Environment, builder: &mut SessionBuilder) -> Result<()> {
    let (api, env) = (ort::api(), env.ptr().cast_mut());
    // SAFETY: `register_ep` succeeded on this environment (so the runtime is ≥ 1.24 and has these API entries);
    // `env` and the builder's options are live for the calls, which copy what they keep.
    unsafe {
        let devices = nibble_ort::host::ep_devices(api, env).map_err(|e| anyhow!(e))?;
        nibble_ort::host::append_ep(api, builder.ptr_mut(), env, &devices, &[]).map_err(|e| anyhow!(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_follows_the_runtime_and_ep_names_the_version() {
        let p = Path::new("/x/libonnxruntime.so.1.23.2");
        assert_eq!(Frontend::resolve(FrontendArg::Auto, "1.24.4", p).unwrap(), Frontend::Ep);
        assert_eq!(Frontend::resolve(FrontendArg::Auto, "1.31.1", p).unwrap(), Frontend::Ep);
        assert_eq!(Frontend::resolve(FrontendArg::Auto, "1.23.2", p).unwrap(), Frontend::CustomOp);
        assert_eq!(Frontend::resolve(FrontendArg::CustomOp, "1.31.1", p).unwrap(), Frontend::CustomOp);
        let e = Frontend::resolve(FrontendArg::Ep, "1.23.2", p).unwrap_err().to_string();
        assert!(e.contains(">= 1.24") && e.contains("1.23.2") && e.contains("custom-op"), "{e}");
    }
}
