//! Paths shared by the provider's integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The workspace root (the parent of provider/).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("provider/ has a parent").to_path_buf()
}

/// A non-empty environment variable as a path.
pub fn env_path(var: &str) -> Option<PathBuf> {
    std::env::var_os(var).filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// Our library: `NIBBLE_LIB`, else `$CARGO_TARGET_DIR/release/…`, else `<workspace>/target/release/…`. Fails the
/// test, saying how to build it, when the file is missing.
pub fn nibble_lib() -> PathBuf {
    let lib = env_path("NIBBLE_LIB").unwrap_or_else(|| {
        let target = env_path("CARGO_TARGET_DIR").unwrap_or_else(|| workspace().join("target"));
        target.join("release").join("libnibble_ort.so")
    });
    assert!(
        lib.is_file(),
        "{} does not exist: build it with cargo build --release -p nibble-ort first (or set NIBBLE_LIB)",
        lib.display()
    );
    lib
}
