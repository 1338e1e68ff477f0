//! Architecture-specific code: feature detection and the kernels. The only place in this crate with
//! intrinsics, `asm!` or raw-pointer kernels.

/// The one const dispatch of the SIMD bodies: calls `f::<G.., D..>(args)` with the run-time values of the listed
/// dimensions turned into const generic arguments appended after the given ones, in order, so every loop of a
/// body unrolls for them and its epilogue has no branch:
/// - `bits(b)`: the code width, 2, 4 or 8 (anything else is 8: the format admits only these);
/// - `chunk(bl)`: the chunk length min(bl, 32), 16 or 32 (bl is a power of two ≥ 16);
/// - `chunk_one(bl)`: the chunk length and whether a block is one chunk (16 → 16, true; 32 → 32, true; larger →
///   32, false), two arguments;
/// - `zp(has)`: whether the weights have zero points;
/// - `row(is)`: whether the activations are in the `Row` numerics (`RunArgs::row`: every activation scale is 1,
///   so the epilogue skips multiplying by it).
///
/// `dispatch!(unit_c::<R, P>(args, panel); bits(a.bits) chunk_one(a.bl) zp(a.has_zp != 0))` calls
/// `unit_c::<R, P, 4, 32, true, false>(args, panel)` for 4-bit symmetric weights in blocks of 32; `f::<>(..)`
/// when every const argument comes from the dimensions. Expands to
/// calls only (the caller's `unsafe` block covers them).
macro_rules! dispatch {
    ($f:ident::<>($($arg:expr),* $(,)?); $($dims:tt)*) => {
        $crate::arch::dispatch!(@go $f [] ($($arg),*) $($dims)*)
    };
    ($f:ident::<$($g:tt),* $(,)?>($($arg:expr),* $(,)?); $($dims:tt)*) => {
        $crate::arch::dispatch!(@go $f [$($g,)*] ($($arg),*) $($dims)*)
    };
    (@go $f:ident [$($g:tt)*] ($($arg:expr),*) bits($b:expr) $($rest:tt)*) => {
        match $b {
            2 => $crate::arch::dispatch!(@go $f [$($g)* 2,] ($($arg),*) $($rest)*),
            4 => $crate::arch::dispatch!(@go $f [$($g)* 4,] ($($arg),*) $($rest)*),
            _ => $crate::arch::dispatch!(@go $f [$($g)* 8,] ($($arg),*) $($rest)*),
        }
    };
    (@go $f:ident [$($g:tt)*] ($($arg:expr),*) chunk($bl:expr) $($rest:tt)*) => {
        if $bl >= 32 {
            $crate::arch::dispatch!(@go $f [$($g)* 32,] ($($arg),*) $($rest)*)
        } else {
            $crate::arch::dispatch!(@go $f [$($g)* 16,] ($($arg),*) $($rest)*)
        }
    };
    (@go $f:ident [$($g:tt)*] ($($arg:expr),*) chunk_one($bl:expr) $($rest:tt)*) => {
        match $bl {
            16 => $crate::arch::dispatch!(@go $f [$($g)* 16, true,] ($($arg),*) $($rest)*),
            32 => $crate::arch::dispatch!(@go $f [$($g)* 32, true,] ($($arg),*) $($rest)*),
            _ => $crate::arch::dispatch!(@go $f [$($g)* 32, false,] ($($arg),*) $($rest)*),
        }
    };
    (@go $f:ident [$($g:tt)*] ($($arg:expr),*) zp($z:expr) $($rest:tt)*) => {
        if $z {
            $crate::arch::dispatch!(@go $f [$($g)* true,] ($($arg),*) $($rest)*)
        } else {
            $crate::arch::dispatch!(@go $f [$($g)* false,] ($($arg),*) $($rest)*)
        }
    };
    (@go $f:ident [$($g:tt)*] ($($arg:expr),*) row($z:expr) $($rest:tt)*) => {
        if $z {
            $crate::arch::dispatch!(@go $f [$($g)* true,] ($($arg),*) $($rest)*)
        } else {
            $crate::arch::dispatch!(@go $f [$($g)* false,] ($($arg),*) $($rest)*)
        }
    };
    (@go $f:ident [$($g:tt)*] ($($arg:expr),*)) => {
        $f::<$($g)*>($($arg),*)
    };
}
#[allow(unused_imports)] // used (as crate::arch::dispatch!) by the x86_64 and aarch64 kernels only
pub(crate) use dispatch;

#[cfg(target_arch = "aarch64")]
pub mod aarch64;
pub mod portable;
#[cfg(target_arch = "x86_64")]
pub mod x86_64;

use crate::cpu::Cpu;
use crate::pack::RowQuant;
use crate::ukernel::RunArgs;
use std::sync::OnceLock;

/// The row epilogue of the `ActQuant::Row` numerics, after the kernel has written `Y = Σ_k q·w` (no bias) into
/// the tile: `y = sa·(Y − z·Σ_k w) + bias` per (row, column), with row r's quantization `row[r]` (scale sa, zero
/// point z) and column j's weight sum `col_sums[j]`. Shared by every family (M·N operations against the
/// kernel's M·N·K).
///
/// # Safety
/// `args` is the tile's `RunArgs` as the kernel got it: `dst` (stride `dst_stride`) holds `rows` × `cols`
/// initialised values that no other thread accesses during the call. `row` holds `rows` values, `col_sums` and
/// `bias` (if any) `cols`.
pub(crate) unsafe fn finish_row_tile(args: &RunArgs, row: &[RowQuant], col_sums: &[f32], bias: Option<&[f32]>) {
    check_row_tile(args, row, col_sums, bias);
    let (rows, cols) = (args.rows, args.cols);
    for (r, rq) in row[..rows].iter().enumerate() {
        // SAFETY: row r < rows of the tile, `cols` values from its start (the caller's guarantee).
        let y = unsafe { std::slice::from_raw_parts_mut(args.dst.add(r * args.dst_stride), cols) };
        let z = rq.zero as f32;
        // Separate multiplies and adds (not `mul_add`: a library call where the target has no FMA): they
        // vectorise on every target.
        match bias {
            None => y.iter_mut().zip(col_sums).for_each(|(y, &w)| *y = rq.scale * (*y - z * w)),
            Some(b) => y.iter_mut().zip(col_sums).zip(b).for_each(|((y, &w), &b)| *y = rq.scale * (*y - z * w) + b),
        }
    }
}

/// The sizes every row epilogue relies on: `row` holds the tile's rows, `col_sums` and `bias` its columns.
///
/// # Panics
/// If one is short (the message names the sizes).
pub(crate) fn check_row_tile(args: &RunArgs, row: &[RowQuant], col_sums: &[f32], bias: Option<&[f32]>) {
    let (rows, cols) = (args.rows, args.cols);
    assert!(
        row.len() >= rows && col_sums.len() >= cols && bias.is_none_or(|b| b.len() >= cols),
        "row epilogue of a {rows} × {cols} tile: {} row quantizations, {} column sums, bias {:?} values",
        row.len(),
        col_sums.len(),
        bias.map(<[f32]>::len)
    );
}

/// A tile's row epilogue: [`finish_row_tile`]'s arguments, safety contract and results.
pub(crate) type FinishRow = unsafe fn(&RunArgs, &[RowQuant], &[f32], Option<&[f32]>);

/// The row epilogue for kernel `uk`'s tiles: the SME2 kernels' in streaming SVE (the same results bit for bit,
/// ~8x fewer instructions at SVL 512), every other kernel's [`finish_row_tile`].
pub(crate) fn finish_row_for(uk: &crate::ukernel::UKernel) -> FinishRow {
    #[cfg(target_arch = "aarch64")]
    {
        use crate::cpu::Feature;
        if uk.requires.has(Feature::Sme2) {
            return aarch64::finish_row_tile_sme::finish_row_tile;
        }
    }
    let _ = uk;
    finish_row_tile
}

/// f16 → f32 and f32 → f16 slice conversions for `cpu` (the same values as `half`'s: IEEE 754, round to nearest
/// even): F16C loops where it has AVX2 and F16C, else `half`'s (FCVT on aarch64, software elsewhere).
pub(crate) fn convert_f16_for(cpu: &Cpu) -> (crate::pack::WidenF16, crate::pack::NarrowF16) {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::cpu::Feature;
        if cpu.has(Feature::Avx2) && cpu.has(Feature::F16c) {
            return (x86_64::convert_f16_f16c::widen, x86_64::convert_f16_f16c::narrow);
        }
    }
    let _ = cpu;
    (crate::pack::widen_f16_portable, crate::pack::narrow_f16_portable)
}

/// The fastest row-numerics quantizer and range `cpu` runs (the same numbers as `pack::quantize_block_row` and
/// `pack::min_max`).
pub(crate) fn quantize_row_for(cpu: &Cpu) -> (crate::pack::QuantizeRow, crate::pack::MinMax) {
    #[cfg(target_arch = "aarch64")]
    {
        use crate::cpu::Feature;
        if cpu.has(Feature::Neon) {
            return (aarch64::quantize_block_neon::quantize_block_row, aarch64::quantize_block_neon::min_max);
        }
    }
    let _ = cpu;
    (crate::pack::quantize_block_row, crate::pack::min_max)
}

/// The fastest activation quantizer `cpu` runs (all give the same numbers as `pack::quantize_block`).
pub(crate) fn quantize_block_for(cpu: &Cpu) -> crate::pack::QuantizeBlocks {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::cpu::Feature;
        if cpu.has(Feature::Avx512f) && cpu.has(Feature::Avx512bw) {
            return x86_64::quantize_block_avx512::quantize_blocks;
        }
        if cpu.has(Feature::Avx2) {
            return x86_64::quantize_block_avx2::quantize_blocks;
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        use crate::cpu::Feature;
        if cpu.has(Feature::Neon) {
            return aarch64::quantize_block_neon::quantize_blocks;
        }
    }
    let _ = cpu;
    crate::pack::quantize_block_runs
}

impl Cpu {
    /// This process's CPU, detected once (kept here, beside the platform code, so that `cpu` depends on
    /// nothing and `arch` on `cpu` only).
    pub fn get() -> &'static Cpu {
        static CPU: OnceLock<Cpu> = OnceLock::new();
        CPU.get_or_init(detect)
    }
}

/// This CPU's features and vector lengths.
#[cfg(target_arch = "x86_64")]
fn detect() -> Cpu {
    use crate::cpu::{Feature, Features};
    use std::is_x86_feature_detected as has;
    let amx = amx();
    let f: Vec<Feature> = [
        (has!("avx2"), Feature::Avx2),
        (has!("fma"), Feature::Fma),
        (has!("f16c"), Feature::F16c),
        (has!("avx512f"), Feature::Avx512f),
        (has!("avx512bw"), Feature::Avx512bw),
        (has!("avx512vl"), Feature::Avx512vl),
        (has!("avx512vnni"), Feature::Avx512Vnni),
        (has!("avxvnni"), Feature::AvxVnni),
        (amx.int8, Feature::AmxInt8),
        (amx.bf16, Feature::AmxBf16),
    ]
    .into_iter()
    .filter_map(|(on, feat)| on.then_some(feat))
    .collect();
    Cpu::with(Features::of(&f))
}

/// Which AMX multiplies this process may use.
#[cfg(target_arch = "x86_64")]
#[derive(Default)]
struct Amx {
    int8: bool,
    bf16: bool,
}

/// AMX usable by this process: the CPU has AMX-TILE (CPUID.(7,0):EDX bit 24) and AMX-INT8 (bit 25) or AMX-BF16
/// (bit 22), the OS enables the tile state (XCR0 bits 17, 18, read with XGETBV once CPUID says OSXSAVE) and, on
/// Linux, grants this process the tile data (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`,
/// process-wide, what ORT's own AMX kernels ask for too). Elsewhere (no permission call known) AMX is left off.
#[cfg(target_arch = "x86_64")]
fn amx() -> Amx {
    use std::arch::x86_64::__cpuid_count;
    let (leaf1, leaf7) = (__cpuid_count(1, 0), __cpuid_count(7, 0));
    let osxsave = leaf1.ecx & (1 << 27) != 0;
    let (int8, bf16) = (leaf7.edx & (1 << 25) != 0, leaf7.edx & (1 << 22) != 0);
    if !osxsave || leaf7.edx & (1 << 24) == 0 || !(int8 || bf16) {
        return Amx::default();
    }
    /// # Safety
    /// The CPU has XSAVE and the OS enabled it (CPUID.1:ECX.OSXSAVE).
    #[target_feature(enable = "xsave")]
    unsafe fn xcr0() -> u64 {
        // SAFETY: XGETBV(0) with OSXSAVE set (the caller's guarantee).
        unsafe { std::arch::x86_64::_xgetbv(0) }
    }
    let tile_state = 3u64 << 17;
    // SAFETY: OSXSAVE checked above.
    if unsafe { xcr0() } & tile_state != tile_state || !tile_permission() {
        return Amx::default();
    }
    Amx { int8, bf16 }
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn tile_permission() -> bool {
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: arch_prctl with this request only changes which xstate components the process may use; it reads
    // and writes no memory of ours.
    unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 }
}

#[cfg(all(target_arch = "x86_64", not(target_os = "linux")))]
fn tile_permission() -> bool {
    false
}

/// This CPU's features and vector lengths.
#[cfg(all(target_arch = "aarch64", any(target_os = "linux", target_os = "android")))]
fn detect() -> Cpu {
    let (cpu, sve_vl, sme_svl) = aarch64_linux::detect();
    cpu.with_vector_lengths(sve_vl, sme_svl)
}

/// This CPU's features and vector lengths.
#[cfg(all(target_arch = "aarch64", target_os = "macos"))]
fn detect() -> Cpu {
    let (cpu, sme_svl) = aarch64_macos::detect();
    cpu.with_vector_lengths(0, sme_svl)
}

/// Elsewhere only the portable kernels run.
#[cfg(not(any(
    target_arch = "x86_64",
    all(target_arch = "aarch64", any(target_os = "linux", target_os = "android", target_os = "macos"))
)))]
fn detect() -> Cpu {
    Cpu::with(crate::cpu::Features::NONE)
}

/// aarch64 Linux and Android: features from the auxiliary vector (`getauxval(AT_HWCAP / AT_HWCAP2)`, what the
/// kernel vouches for; never /proc or /sys, which qemu-user and containers may show wrong), vector lengths from
/// `prctl(PR_SVE_GET_VL / PR_SME_GET_VL)`, which needs no SVE instruction. Every SVE feature is gated on
/// HWCAP_SVE and every SME one on HWCAP2_SME: Linux before 6.14 reports sve2 (and svei8mm) on cores that have
/// SVE only in streaming mode (SME without SVE), where an SVE instruction outside streaming mode is a SIGILL.
/// (The HWCAP decoding is also compiled for tests on every host.)
#[cfg(any(test, all(target_arch = "aarch64", any(target_os = "linux", target_os = "android"))))]
mod aarch64_linux {
    use crate::cpu::{Feature, Features};
    #[cfg(target_arch = "aarch64")]
    use core::ffi::c_int;
    use core::ffi::c_ulong;

    #[cfg(target_arch = "aarch64")]
    const AT_HWCAP: c_ulong = 16;
    #[cfg(target_arch = "aarch64")]
    const AT_HWCAP2: c_ulong = 26;
    // linux/arch/arm64/include/uapi/asm/hwcap.h (the same bits on Android)
    const HWCAP_ASIMD: c_ulong = 1 << 1;
    const HWCAP_ASIMDHP: c_ulong = 1 << 10;
    const HWCAP_ASIMDDP: c_ulong = 1 << 20;
    const HWCAP_SVE: c_ulong = 1 << 22;
    const HWCAP2_SVE2: c_ulong = 1 << 1;
    const HWCAP2_SVEI8MM: c_ulong = 1 << 9;
    const HWCAP2_I8MM: c_ulong = 1 << 13;
    const HWCAP2_BF16: c_ulong = 1 << 14;
    const HWCAP2_SME: c_ulong = 1 << 23;
    const HWCAP2_SME2: c_ulong = 1 << 37;
    // linux/include/uapi/linux/prctl.h
    #[cfg(target_arch = "aarch64")]
    const PR_SVE_GET_VL: c_int = 51;
    #[cfg(target_arch = "aarch64")]
    const PR_SME_GET_VL: c_int = 64;
    #[cfg(target_arch = "aarch64")]
    const PR_VL_LEN_MASK: c_int = 0xffff;

    /// The features the two HWCAP words `hw`, `hw2` state (see the module's note on gating).
    pub(super) fn features(hw: c_ulong, hw2: c_ulong) -> Features {
        let mut f = Vec::new();
        let mut add = |word: c_ulong, list: &[(c_ulong, Feature)]| {
            f.extend(list.iter().filter(|&&(bit, _)| word & bit != 0).map(|&(_, feat)| feat));
        };
        if hw & HWCAP_ASIMD != 0 {
            add(hw, &[(HWCAP_ASIMD, Feature::Neon), (HWCAP_ASIMDHP, Feature::Fp16), (HWCAP_ASIMDDP, Feature::Dotprod)]);
            add(hw2, &[(HWCAP2_I8MM, Feature::I8mm), (HWCAP2_BF16, Feature::Bf16)]);
        }
        if hw & HWCAP_SVE != 0 {
            add(hw, &[(HWCAP_SVE, Feature::Sve)]);
            add(hw2, &[(HWCAP2_SVE2, Feature::Sve2), (HWCAP2_SVEI8MM, Feature::SveI8mm)]);
        }
        if hw2 & HWCAP2_SME != 0 {
            add(hw2, &[(HWCAP2_SME, Feature::Sme), (HWCAP2_SME2, Feature::Sme2)]);
        }
        Features::of(&f)
    }

    #[cfg(target_arch = "aarch64")]
    pub(super) fn detect() -> (crate::cpu::Cpu, usize, usize) {
        // SAFETY: getauxval has no preconditions; unknown keys return 0.
        let (hw, hw2) = unsafe { (libc::getauxval(AT_HWCAP), libc::getauxval(AT_HWCAP2)) };
        let vl = |option| {
            // SAFETY: PR_SVE_GET_VL / PR_SME_GET_VL take no further arguments and only return a value (-1 with
            // errno set where unsupported).
            let r = unsafe { libc::prctl(option) };
            if r < 0 { 0 } else { (r & PR_VL_LEN_MASK) as usize }
        };
        let sve_vl = if hw & HWCAP_SVE != 0 { vl(PR_SVE_GET_VL) } else { 0 };
        let sme_svl = if hw2 & HWCAP2_SME != 0 { vl(PR_SME_GET_VL) } else { 0 };
        (crate::cpu::Cpu::with(features(hw, hw2)), sve_vl, sme_svl)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn sve_and_sme_features_need_their_base_hwcap() {
            let all2 = HWCAP2_SVE2 | HWCAP2_SVEI8MM | HWCAP2_I8MM | HWCAP2_BF16 | HWCAP2_SME | HWCAP2_SME2;
            // An SME-only core as Linux < 6.14 reports it: sve2 and svei8mm without HWCAP_SVE mean no SVE.
            let f = features(HWCAP_ASIMD | HWCAP_ASIMDDP, all2);
            assert_eq!(f.to_string(), "neon+dotprod+i8mm+bf16+sme+sme2");
            let f = features(HWCAP_ASIMD | HWCAP_SVE, HWCAP2_SVEI8MM | HWCAP2_SME2);
            assert_eq!(f.to_string(), "neon+sve+svei8mm");
            assert_eq!(features(HWCAP_ASIMD | HWCAP_SVE, all2).iter().count(), 8);
            assert_eq!(features(0, all2), Features::of(&[Feature::Sme, Feature::Sme2]));
        }
    }
}

/// macOS on Apple silicon: features from `sysctlbyname("hw.optional.arm.FEAT_*")` (each an int32, 1 when
/// present; an absent name is an absent feature), the SME streaming vector length from
/// `hw.optional.arm.sme_max_svl_b`. Apple's cores have no SVE (non-streaming). SME is reported only with a
/// streaming vector length.
#[cfg(all(target_arch = "aarch64", target_os = "macos"))]
mod aarch64_macos {
    use crate::cpu::{Cpu, Feature, Features};
    use core::ffi::CStr;

    /// The int32 sysctl `name`, if the kernel has it.
    fn sysctl_u32(name: &CStr) -> Option<u32> {
        let mut value: u32 = 0;
        let mut len = core::mem::size_of::<u32>();
        // SAFETY: `name` is NUL-terminated; `value` and `len` are valid for writes and `len` holds value's size;
        // no new value is set (null, 0).
        let r = unsafe {
            libc::sysctlbyname(
                name.as_ptr(),
                (&raw mut value).cast::<libc::c_void>(),
                &mut len,
                core::ptr::null_mut(),
                0,
            )
        };
        (r == 0 && len == core::mem::size_of::<u32>()).then_some(value)
    }

    pub(super) fn detect() -> (Cpu, usize) {
        let on = |name: &CStr| sysctl_u32(name) == Some(1);
        let mut f = Vec::new();
        if on(c"hw.optional.AdvSIMD") || on(c"hw.optional.neon") {
            f.push(Feature::Neon);
            for (name, feat) in [
                (c"hw.optional.arm.FEAT_FP16", Feature::Fp16),
                (c"hw.optional.arm.FEAT_DotProd", Feature::Dotprod),
                (c"hw.optional.arm.FEAT_I8MM", Feature::I8mm),
                (c"hw.optional.arm.FEAT_BF16", Feature::Bf16),
            ] {
                if on(name) {
                    f.push(feat);
                }
            }
        }
        let svl = sysctl_u32(c"hw.optional.arm.sme_max_svl_b").unwrap_or(0) as usize;
        if on(c"hw.optional.arm.FEAT_SME") && svl > 0 {
            f.push(Feature::Sme);
            if on(c"hw.optional.arm.FEAT_SME2") {
                f.push(Feature::Sme2);
            }
        }
        let svl = if f.contains(&Feature::Sme) { svl } else { 0 };
        (Cpu::with(Features::of(&f)), svl)
    }
}
