//! Where the ONNX Runtime library and nibble's library are looked for.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

/// The workspace root at compile time (examples/llama/../..), canonical when it still exists.
pub fn workspace() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("..");
    std::fs::canonicalize(&p).unwrap_or(p)
}

/// A non-empty environment variable as a path.
fn env_path(var: &str) -> Option<PathBuf> {
    std::env::var_os(var).filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// The ONNX Runtime shared library: `--ort-dylib`, else `$NIBBLE_ORT_DYLIB`, else `$ORT_DYLIB_PATH`, else
/// `<workspace>/.cache/ort/1.31.1/libonnxruntime.so.1.31.1`.
pub fn ort_dylib(arg: Option<&Path>) -> Result<PathBuf> {
    let (path, from) = if let Some(p) = arg {
        (p.to_path_buf(), "--ort-dylib")
    } else if let Some(p) = env_path("NIBBLE_ORT_DYLIB") {
        (p, "$NIBBLE_ORT_DYLIB")
    } else if let Some(p) = env_path("ORT_DYLIB_PATH") {
        (p, "$ORT_DYLIB_PATH")
    } else {
        (workspace().join(".cache/ort/1.31.1/libonnxruntime.so.1.31.1"), "the default")
    };
    if !path.is_file() {
        bail!(
            "ONNX Runtime library {} ({from}) does not exist: run scripts/setup.sh (it puts ORT 1.31.1 in \
             <workspace>/.cache/ort/1.31.1/), or pass --ort-dylib PATH / set NIBBLE_ORT_DYLIB to a \
             libonnxruntime.so (e.g. onnxruntime/capi/libonnxruntime.so.1.31.1 of the onnxruntime wheel)",
            path.display()
        );
    }
    Ok(path)
}

/// nibble's custom-op library: `--lib`, else `$NIBBLE_LIB`, else `$CARGO_TARGET_DIR/release/libnibble_ort.so`,
/// else `<workspace>/target/release/libnibble_ort.so`.
pub fn nibble_lib(arg: Option<&Path>) -> Result<PathBuf> {
    let (path, from) = if let Some(p) = arg {
        (p.to_path_buf(), "--lib")
    } else if let Some(p) = env_path("NIBBLE_LIB") {
        (p, "$NIBBLE_LIB")
    } else if let Some(t) = env_path("CARGO_TARGET_DIR") {
        (t.join("release").join("libnibble_ort.so"), "$CARGO_TARGET_DIR")
    } else {
        (workspace().join("target").join("release").join("libnibble_ort.so"), "the default")
    };
    if !path.is_file() {
        bail!(
            "nibble library {} ({from}) does not exist: build it with `cargo build --release -p nibble-ort`, \
             or pass --lib PATH / set NIBBLE_LIB (or use --no-nibble for ORT's own kernels)",
            path.display()
        );
    }
    Ok(path)
}
