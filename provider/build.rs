//! Gives libnibble_ort.so its SONAME, so programs and CMake / pkg-config consumers that link it (for `NibbleInfo`)
//! record `libnibble_ort.so` rather than the path they were linked with.
fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnibble_ort.so");
    }
}
