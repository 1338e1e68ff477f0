//! Architecture-specific code: feature detection and the kernels. The only place in this crate with
//! intrinsics, `asm!` or raw-pointer kernels.

pub mod portable;

use crate::cpu::Isa;

/// The rungs this CPU supports, beyond portable.
pub(crate) fn detect() -> Vec<Isa> {
    let mut v = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            v.push(Isa::Avx2);
            if std::is_x86_feature_detected!("avx512f")
                && std::is_x86_feature_detected!("avx512bw")
                && std::is_x86_feature_detected!("avx512vl")
                && std::is_x86_feature_detected!("avx512vnni")
            {
                v.push(Isa::Avx512Vnni);
            }
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        use std::arch::is_aarch64_feature_detected as has;
        if has!("neon") {
            v.push(Isa::Neon);
            if has!("dotprod") {
                v.push(Isa::Dotprod);
                if has!("i8mm") {
                    v.push(Isa::I8mm);
                }
            }
            if has!("sve") {
                v.push(Isa::Sve);
            }
            if aarch64_has_sme() {
                v.push(Isa::Sme);
            }
        }
    }
    v
}

/// SME from HWCAP2 (bit 23, `HWCAP2_SME`): `is_aarch64_feature_detected!("sme")` is unstable on Rust 1.95.
#[cfg(all(target_arch = "aarch64", target_os = "linux"))]
fn aarch64_has_sme() -> bool {
    const AT_HWCAP2: core::ffi::c_ulong = 26;
    const HWCAP2_SME: core::ffi::c_ulong = 1 << 23;
    unsafe extern "C" {
        fn getauxval(kind: core::ffi::c_ulong) -> core::ffi::c_ulong;
    }
    // SAFETY: getauxval is a glibc/musl function with no preconditions; unknown keys return 0.
    unsafe { getauxval(AT_HWCAP2) & HWCAP2_SME != 0 }
}

#[cfg(all(target_arch = "aarch64", not(target_os = "linux")))]
fn aarch64_has_sme() -> bool {
    false
}
