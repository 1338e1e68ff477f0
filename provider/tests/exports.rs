//! The shape of the built cdylib, checked with binutils (`nm`, `readelf`):
//! - it exports exactly four dynamic symbols: `RegisterCustomOps` (ORT's custom-op library entry point),
//!   `CreateEpFactories` / `ReleaseEpFactory` (ORT >= 1.24's plugin execution-provider library entry points) and
//!   `NibbleInfo` (what nibble detects and chooses, for `nibble_ort.info()`);
//! - it does not link ONNX Runtime: no `NEEDED libonnxruntime…`, no undefined `Ort*` symbols
//!   (everything goes through the `OrtApiBase` that ORT passes to `RegisterCustomOps` or `CreateEpFactories`).
//!
//! Library: `NIBBLE_LIB`, else `$CARGO_TARGET_DIR/release/libnibble_ort.so`, else `<workspace>/target/release/…`.
//! Build it first with `cargo build --release -p nibble-ort` (scripts/test.sh does).

mod common;

use common::nibble_lib;
use std::path::Path;
use std::process::Command;

/// Runs a binutils tool and returns its stdout; a missing tool or a failure is a test failure with the reason.
fn tool(cmd: &str, args: &[&str], lib: &Path) -> String {
    let out = Command::new(cmd)
        .args(args)
        .arg(lib)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{cmd}` ({e}): install binutils (scripts/setup.sh does)"));
    assert!(
        out.status.success(),
        "`{cmd} {} {}` failed: {}",
        args.join(" "),
        lib.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 tool output")
}

/// Symbol names from `nm` output lines "[address] TYPE name[@version]".
fn symbols(nm_output: &str) -> Vec<String> {
    nm_output
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .map(|s| s.split('@').next().unwrap_or(s).to_string())
        .collect()
}

#[test]
fn exports_only_the_four_entry_points() {
    let lib = nibble_lib();
    let out = tool("nm", &["-D", "--defined-only"], &lib);
    let mut syms = symbols(&out);
    syms.sort();
    let want = ["CreateEpFactories", "NibbleInfo", "RegisterCustomOps", "ReleaseEpFactory"];
    assert_eq!(syms, want, "{} must export exactly {want:?}; nm -D --defined-only:\n{out}", lib.display());
    // ...each as a function in the text section.
    for name in want {
        assert!(
            out.lines().any(|l| l.split_whitespace().collect::<Vec<_>>().ends_with(&["T", name])),
            "{name} is not a text (T) symbol:\n{out}"
        );
    }
}

#[test]
fn does_not_link_onnxruntime() {
    let lib = nibble_lib();
    let dynamic = tool("readelf", &["-d", "-W"], &lib);
    let needed: Vec<&str> = dynamic.lines().filter(|l| l.contains("(NEEDED)")).collect();
    assert!(!needed.is_empty(), "readelf -d shows no NEEDED entries at all (not a dynamic library?):\n{dynamic}");
    let ort: Vec<&&str> = needed.iter().filter(|l| l.to_lowercase().contains("onnxruntime")).collect();
    assert!(ort.is_empty(), "{} links ONNX Runtime: {ort:?}", lib.display());

    let undefined = symbols(&tool("nm", &["-D", "--undefined-only"], &lib));
    let ort_syms: Vec<&String> =
        undefined.iter().filter(|s| s.starts_with("Ort") || s.starts_with("_ZN11onnxruntime")).collect();
    assert!(ort_syms.is_empty(), "{} has undefined ONNX Runtime symbols: {ort_syms:?}", lib.display());
    eprintln!("[exports] {} NEEDED: {}", lib.display(), needed.iter().map(|l| l.trim()).collect::<Vec<_>>().join("; "));
}
