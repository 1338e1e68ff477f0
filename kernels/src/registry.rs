//! The registry: every kernel and every family of this build, ranked explicitly, and [`select`].
//!
//! Selection is family-first: for a node's [`Problem`] the best-ranked family that serves it on this CPU wins
//! (both its kernels run here and take the bits and block size; its layout can hold the weights). The CPU is
//! probed once per process; `NIBBLE_ISA=<rung>` caps the features kernels may use (e.g. `NIBBLE_ISA=portable`),
//! and `NIBBLE_FAMILIES=a,b` restricts the candidates to the named families, in that order (a test and
//! debugging hook). Naming a rung this CPU lacks, or an unknown or unrunnable family, is an error.

#[cfg(target_arch = "aarch64")]
use crate::arch::aarch64;
use crate::arch::portable;
#[cfg(target_arch = "x86_64")]
use crate::arch::x86_64;
use crate::cpu::{Cpu, Isa};
use crate::family::{Family, Selected};
use crate::pack::{Codes, RhsLayout, ScaleType, ZpStorage};
use crate::problem::{ComputePath, Problem};
use crate::ukernel::UKernel;
use std::sync::OnceLock;

/// Every kernel in this build: the portable ones, then this architecture's.
pub fn kernels() -> &'static [&'static UKernel] {
    static ALL: OnceLock<Vec<&'static UKernel>> = OnceLock::new();
    ALL.get_or_init(|| PORTABLE_KERNELS.iter().chain(ARCH_KERNELS).copied().collect())
}

static PORTABLE_KERNELS: &[&UKernel] = &[&portable::FP32, &portable::INT8, &portable::INT8_U8, &portable::INT8_P4X8];

#[cfg(target_arch = "x86_64")]
static ARCH_KERNELS: &[&UKernel] = &[
    &x86_64::INT8_GEMV_AVX512VNNI,
    &x86_64::INT8_GEMM_AVX512VNNI,
    &x86_64::INT8_GEMV_AVX512VNNI_F16,
    &x86_64::INT8_GEMM_AVX512VNNI_F16,
    &x86_64::INT8_GEMM_AMX,
    &x86_64::INT8_GEMM_AMX_F16,
    &x86_64::FP32_GEMV_AVX512,
    &x86_64::FP32_GEMM_AVX512,
    &x86_64::FP32_GEMM_AVX512_DQ,
    &x86_64::FP32_GEMM_AMX,
    &x86_64::INT8_GEMV_AVXVNNI,
    &x86_64::INT8_GEMM_AVXVNNI,
    &x86_64::INT8_GEMV_AVX2,
    &x86_64::INT8_GEMM_AVX2,
    &x86_64::FP32_GEMV_AVX2,
    &x86_64::FP32_GEMM_AVX2,
    &x86_64::FP32_GEMM_AVX2_DQ,
];
#[cfg(target_arch = "aarch64")]
static ARCH_KERNELS: &[&UKernel] = &[
    &aarch64::INT8_GEMV_DOTPROD_P8X8,
    &aarch64::INT8_GEMM_I8MM,
    &aarch64::INT8_GEMM_SVE_I8MM,
    &aarch64::INT8_GEMV_SVE_P8X8,
    &aarch64::INT8_GEMM_SME2,
    &aarch64::INT8_GEMV_SME2,
    &aarch64::INT8_GEMV_DOTPROD,
    &aarch64::INT8_GEMM_DOTPROD,
    &aarch64::INT8_GEMV_NEON,
    &aarch64::INT8_GEMM_NEON,
    &aarch64::FP32_GEMV_NEON,
    &aarch64::FP32_GEMM_NEON,
    &aarch64::FP32_GEMM_SVE,
    &aarch64::FP32_GEMM_SME2,
];
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
static ARCH_KERNELS: &[&UKernel] = &[];

/// The portable families' layouts (see `arch/portable`).
const QUNB_P8X4: RhsLayout = RhsLayout::plain(8, 4);
const QSNB_P8X8: RhsLayout = RhsLayout {
    nr: 8,
    kr: 8,
    codes: Codes::Signed,
    scales: ScaleType::F32,
    zero_points: ZpStorage::Correction,
    block_sums: false,
};
const QSNB_P8X8_F16_BSUM: RhsLayout = RhsLayout { scales: ScaleType::F16, block_sums: true, ..QSNB_P8X8 };

static PORTABLE_FAMILIES: &[&Family] = &[
    &Family {
        name: "portable_fp32_qunbp8x4_sf32_zpb",
        rank: 20,
        ranked_for: everywhere,
        path: ComputePath::Fp32,
        gemv: &portable::FP32,
        gemm: &portable::FP32,
        layout: |_| QUNB_P8X4,
    },
    &Family {
        name: "portable_int8_qunbp8x4_sf32_zpb",
        rank: 20,
        ranked_for: everywhere,
        path: ComputePath::Int8,
        gemv: &portable::INT8,
        gemm: &portable::INT8,
        layout: |_| QUNB_P8X4,
    },
    &Family {
        name: "portable_fp32_qsnbp8x8_sf32_zpc",
        rank: 10,
        ranked_for: everywhere,
        path: ComputePath::Fp32,
        gemv: &portable::FP32,
        gemm: &portable::FP32,
        layout: |_| QSNB_P8X8,
    },
    &Family {
        name: "portable_int8_qsnbp8x8_sf16_zpc_bsum",
        rank: 10,
        ranked_for: everywhere,
        path: ComputePath::Int8,
        gemv: &portable::INT8_U8,
        gemm: &portable::INT8_P4X8,
        layout: |_| QSNB_P8X8_F16_BSUM,
    },
];

#[cfg(target_arch = "x86_64")]
static ARCH_FAMILIES: &[&Family] = &[
    // AMX for prefill, the AVX-512 VNNI GEMV for decode, on the VNNI families' layouts. The f32-scale family
    // ranks above the VNNI f16 one: when scales do not fit f16, both f16 families are out and AMX still serves.
    &Family {
        name: "amx_int8_qunbp64x4_sf16_zpc",
        rank: 50,
        ranked_for: everywhere,
        path: ComputePath::Int8,
        gemv: &x86_64::INT8_GEMV_AVX512VNNI_F16,
        gemm: &x86_64::INT8_GEMM_AMX_F16,
        layout: |_| x86_64::QUNBP64X4_SF16_ZPC,
    },
    &Family {
        name: "amx_int8_qunbp64x4_sf32_zpc",
        rank: 47,
        ranked_for: everywhere,
        path: ComputePath::Int8,
        gemv: &x86_64::INT8_GEMV_AVX512VNNI,
        gemm: &x86_64::INT8_GEMM_AMX,
        layout: |_| x86_64::QUNBP64X4_SF32_ZPC,
    },
    &Family {
        name: "avx512vnni_int8_qunbp64x4_sf16_zpc",
        rank: 45,
        ranked_for: everywhere,
        path: ComputePath::Int8,
        gemv: &x86_64::INT8_GEMV_AVX512VNNI_F16,
        gemm: &x86_64::INT8_GEMM_AVX512VNNI_F16,
        layout: |_| x86_64::QUNBP64X4_SF16_ZPC,
    },
    &Family {
        name: "avx512vnni_int8_qunbp64x4_sf32_zpc",
        rank: 40,
        ranked_for: everywhere,
        path: ComputePath::Int8,
        gemv: &x86_64::INT8_GEMV_AVX512VNNI,
        gemm: &x86_64::INT8_GEMM_AVX512VNNI,
        layout: |_| x86_64::QUNBP64X4_SF32_ZPC,
    },
    &Family {
        name: "avx2_vnni_int8_qunbp64x4_sf32_zpc",
        rank: 35,
        ranked_for: everywhere,
        path: ComputePath::Int8,
        gemv: &x86_64::INT8_GEMV_AVXVNNI,
        gemm: &x86_64::INT8_GEMM_AVXVNNI,
        layout: |_| x86_64::QUNBP64X4_SF32_ZPC,
    },
    &Family {
        name: "avx2_int8_qunbp64x4_sf32_zpc",
        rank: 30,
        ranked_for: everywhere,
        path: ComputePath::Int8,
        gemv: &x86_64::INT8_GEMV_AVX2,
        gemm: &x86_64::INT8_GEMM_AVX2,
        layout: |_| x86_64::QUNBP64X4_SF32_ZPC,
    },
    &Family {
        name: "avx2_fp32_qunbp64x4_sf32_zpc",
        rank: 30,
        ranked_for: everywhere,
        path: ComputePath::Fp32,
        gemv: &x86_64::FP32_GEMV_AVX2,
        gemm: &x86_64::FP32_GEMM_AVX2_DQ,
        layout: |_| x86_64::QUNBP64X4_SF32_ZPC,
    },
    // AMX-BF16 for prefill (f32 activations split exactly into bf16 parts), the AVX-512 FMA GEMV for decode.
    &Family {
        name: "amx_fp32_qunbp64x4_sf32_zpc",
        rank: 45,
        ranked_for: everywhere,
        path: ComputePath::Fp32,
        gemv: &x86_64::FP32_GEMV_AVX512,
        gemm: &x86_64::FP32_GEMM_AMX,
        layout: |_| x86_64::QUNBP64X4_SF32_ZPC,
    },
    &Family {
        name: "avx512vnni_fp32_qunbp64x4_sf32_zpc",
        rank: 40,
        ranked_for: everywhere,
        path: ComputePath::Fp32,
        gemv: &x86_64::FP32_GEMV_AVX512,
        gemm: &x86_64::FP32_GEMM_AVX512_DQ,
        layout: |_| x86_64::QUNBP64X4_SF32_ZPC,
    },
];
#[cfg(target_arch = "aarch64")]
static ARCH_FAMILIES: &[&Family] = &[
    &Family {
        name: "sve_i8mm_int8_qsnbp8x8_sf16_zpc",
        rank: 50,
        ranked_for: everywhere,
        path: ComputePath::Int8,
        gemv: &aarch64::INT8_GEMV_SVE_P8X8,
        gemm: &aarch64::INT8_GEMM_SVE_I8MM,
        layout: |_| aarch64::QSNBP8X8_SF16_ZPC,
    },
    &Family {
        name: "i8mm_int8_qsnbp8x8_sf16_zpc",
        rank: 45,
        ranked_for: everywhere,
        path: ComputePath::Int8,
        gemv: &aarch64::INT8_GEMV_DOTPROD_P8X8,
        gemm: &aarch64::INT8_GEMM_I8MM,
        layout: |_| aarch64::QSNBP8X8_SF16_ZPC,
    },
    // SME2: the SMOPA GEMM (its partial row groups by the few-row SDOT kernel) and the multi-vector SDOT GEMV, all
    // accumulating in ZA. First on SME2 CPUs whose streaming vector is 256 or 512 bits (`sme2_int8_ranked`), where
    // its kernels run their asm and count fewer instructions than ORT's KleidiAI SME2 kernels at every M counted
    // (bench/results/aarch64-icount-sme2.md; `versus_ort.rs`); at other lengths the GEMV and the few-row kernel
    // have no asm, the family is left out of the default ladder and ORT keeps the KleidiAI nodes.
    &Family {
        name: "sme2_int8_qsnbp64x4_sf16_zpc",
        rank: 55,
        ranked_for: sme2_int8_ranked_for,
        path: ComputePath::Int8,
        gemv: &aarch64::INT8_GEMV_SME2,
        gemm: &aarch64::INT8_GEMM_SME2,
        layout: |_| aarch64::QSNBP64X4_SF16_ZPC,
    },
    &Family {
        name: "dotprod_int8_qsnbp8x4_sf16_zpc",
        rank: 40,
        ranked_for: everywhere,
        path: ComputePath::Int8,
        gemv: &aarch64::INT8_GEMV_DOTPROD,
        gemm: &aarch64::INT8_GEMM_DOTPROD,
        layout: |_| aarch64::QSNBP8X4_SF16_ZPC,
    },
    &Family {
        name: "neon_int8_qsnbp8x4_sf16_zpc",
        rank: 30,
        ranked_for: everywhere,
        path: ComputePath::Int8,
        gemv: &aarch64::INT8_GEMV_NEON,
        gemm: &aarch64::INT8_GEMM_NEON,
        layout: |_| aarch64::QSNBP8X4_SF16_ZPC,
    },
    // The NEON fp32 GEMV with the SME2 (FMOPA) GEMM, at a 256- or 512-bit streaming vector (with or without SVE).
    &Family {
        name: "sme2_fp32_qsnbp8x4_sf32_zpc",
        rank: 50,
        ranked_for: sme2_fp32_ranked_for,
        path: ComputePath::Fp32,
        gemv: &aarch64::FP32_GEMV_NEON,
        gemm: &aarch64::FP32_GEMM_SME2,
        layout: |_| aarch64::QSNBP8X4_SF32_ZPC,
    },
    // The NEON fp32 GEMV (decode is bound by reading the weights, not by FMLA width) with the SVE GEMM.
    &Family {
        name: "sve_fp32_qsnbp8x4_sf32_zpc",
        rank: 40,
        ranked_for: everywhere,
        path: ComputePath::Fp32,
        gemv: &aarch64::FP32_GEMV_NEON,
        gemm: &aarch64::FP32_GEMM_SVE,
        layout: |_| aarch64::QSNBP8X4_SF32_ZPC,
    },
    &Family {
        name: "neon_fp32_qsnbp8x4_sf32_zpc",
        rank: 30,
        ranked_for: everywhere,
        path: ComputePath::Fp32,
        gemv: &aarch64::FP32_GEMV_NEON,
        gemm: &aarch64::FP32_GEMM_NEON,
        layout: |_| aarch64::QSNBP8X4_SF32_ZPC,
    },
];
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
static ARCH_FAMILIES: &[&Family] = &[];

/// A family ranked wherever it runs.
fn everywhere(_: &Cpu, _: &Problem) -> bool {
    true
}

/// The SME2 fp32 family's ranking: at the streaming lengths its FMOPA tiles are written for (256 and 512 bits; at
/// others its GEMM runs the SVE or NEON kernel, so the families below it are the same work without the detour).
#[cfg(target_arch = "aarch64")]
fn sme2_fp32_ranked_for(cpu: &Cpu, _: &Problem) -> bool {
    matches!(cpu.sme_svl(), Some(32 | 64))
}

/// Whether the SME2 int8 family (`sme2_int8_qsnbp64x4_sf16_zpc`) is ranked on `cpu`: SME2 with a streaming vector
/// of 256 or 512 bits, the lengths its GEMV and few-row kernel have asm for and where it was counted faster than
/// ORT's KleidiAI SME2 kernels (`versus_ort`).
pub fn sme2_int8_ranked(cpu: &Cpu) -> bool {
    cpu.has(crate::cpu::Feature::Sme2) && matches!(cpu.sme_svl(), Some(32 | 64))
}

/// The SME2 int8 family's ranking for a problem: on such a CPU, for what its asm computes (`aarch64::sme2_int8_asm_takes`: 4-bit codes
/// in blocks of whole 32-K chunks, every block size ORT's KleidiAI kernels take); other bit widths and blocks of 16
/// run its portable bodies, so the families below it (NEON i8mm code) keep them.
#[cfg(target_arch = "aarch64")]
fn sme2_int8_ranked_for(cpu: &Cpu, p: &Problem) -> bool {
    sme2_int8_ranked(cpu) && aarch64::sme2_int8_asm_takes(p.bits as usize, p.block_size)
}

/// Every family in this build, best first (by rank).
pub fn families() -> &'static [&'static Family] {
    static SORTED: OnceLock<Vec<&'static Family>> = OnceLock::new();
    SORTED.get_or_init(|| {
        let mut v: Vec<&'static Family> = PORTABLE_FAMILIES.iter().chain(ARCH_FAMILIES).copied().collect();
        v.sort_by_key(|f| std::cmp::Reverse(f.rank()));
        v
    })
}

/// Why no family could be selected, or a bad setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectError(pub String);

impl std::fmt::Display for SelectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SelectError {}

/// What selection works from: the CPU as capped by `NIBBLE_ISA`, and the candidate families in order.
#[derive(Debug, Clone)]
pub struct Ladder {
    cpu: Cpu,
    cap: Option<Isa>,
    families: Vec<&'static Family>,
    /// The families were named (`NIBBLE_FAMILIES`): they run even where ORT's own kernel is faster.
    named: bool,
}

impl Ladder {
    /// The CPU kernels may use (this CPU, capped).
    pub fn cpu(&self) -> &Cpu {
        &self.cpu
    }

    /// The `NIBBLE_ISA` cap, if any.
    pub fn cap(&self) -> Option<Isa> {
        self.cap
    }

    /// Candidate families, in the order they are tried.
    pub fn families(&self) -> &[&'static Family] {
        &self.families
    }

    /// Whether the families were named (`NIBBLE_FAMILIES`): nibble then runs every node it is given, also those
    /// [`crate::versus_ort`] would leave to ORT.
    pub fn families_named(&self) -> bool {
        self.named
    }

    /// The best family serving `p`, resolved for this ladder's CPU.
    pub fn select(&self, p: &Problem) -> Result<Selected, SelectError> {
        let mut why = Vec::new();
        for &f in &self.families {
            if !self.named && !f.ranked_for(&self.cpu, p) {
                why.push(format!("{}: not ranked for {p} on this CPU", f.name()));
                continue;
            }
            match Selected::new(f, &self.cpu, p) {
                Ok(s) => return Ok(s),
                Err(e) => why.push(format!("{}: {e}", f.name())),
            }
        }
        let cap = self.cap.map(|c| format!(" (NIBBLE_ISA={c})")).unwrap_or_default();
        Err(SelectError(format!("no kernel family for {p} on this CPU{cap}: {}", why.join("; "))))
    }
}

/// This process's ladder, from `NIBBLE_ISA` and `NIBBLE_FAMILIES`. Built once.
pub fn ladder() -> Result<&'static Ladder, SelectError> {
    static LADDER: OnceLock<Result<Ladder, SelectError>> = OnceLock::new();
    LADDER
        .get_or_init(|| {
            let env = |k| std::env::var(k).ok();
            build_ladder(Cpu::get(), env("NIBBLE_ISA").as_deref(), env("NIBBLE_FAMILIES").as_deref())
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The ladder for `cpu`, capped at the rung `isa` (`NIBBLE_ISA`), restricted to the comma-separated
/// `families` in their order (`NIBBLE_FAMILIES`).
pub fn build_ladder(cpu: &Cpu, isa: Option<&str>, families: Option<&str>) -> Result<Ladder, SelectError> {
    let cap = match isa.map(str::trim).filter(|s| !s.is_empty()) {
        None => None,
        Some(name) => {
            let names: Vec<&str> = Isa::ALL.iter().map(|i| i.name()).collect();
            let isa = Isa::from_name(&name.to_ascii_lowercase()).ok_or_else(|| {
                SelectError(format!("NIBBLE_ISA={name} is not a known rung (one of: {})", names.join(", ")))
            })?;
            if !cpu.has_rung(isa) {
                let have: Vec<&str> = cpu.rungs().iter().map(|i| i.name()).collect();
                return Err(SelectError(format!(
                    "NIBBLE_ISA={name}: this CPU does not support {isa} (it supports: {})",
                    have.join(", ")
                )));
            }
            Some(isa)
        }
    };
    let capped = cap.map_or(*cpu, |c| cpu.capped(c));
    let named = families.map(str::trim).is_some_and(|s| !s.is_empty());
    let list = match families.map(str::trim).filter(|s| !s.is_empty()) {
        None => self::families().to_vec(),
        Some(names) => {
            let mut v = Vec::new();
            for name in names.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                let f = self::families().iter().find(|f| f.name() == name).ok_or_else(|| {
                    let known: Vec<&str> = self::families().iter().map(|f| f.name()).collect();
                    SelectError(format!("NIBBLE_FAMILIES: unknown family {name} (known: {})", known.join(", ")))
                })?;
                if let Some(why) = [f.gemv(), f.gemm()].into_iter().find_map(|k| k.why_not_on(&capped)) {
                    return Err(SelectError(format!("NIBBLE_FAMILIES: {name} cannot run on this CPU: {why}")));
                }
                v.push(*f);
            }
            v
        }
    };
    Ok(Ladder { cpu: capped, cap, families: list, named })
}

/// The family for problem `p` on this process's ladder.
pub fn select(p: &Problem) -> Result<Selected, SelectError> {
    ladder()?.select(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::Features;

    #[test]
    fn names_are_unique_and_ranks_distinct_per_path() {
        let mut names: Vec<&str> = kernels().iter().map(|k| k.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), kernels().len());
        for f in families() {
            assert!(kernels().iter().any(|k| std::ptr::eq(*k, f.gemv())), "{}: gemv not registered", f.name());
            assert!(kernels().iter().any(|k| std::ptr::eq(*k, f.gemm())), "{}: gemm not registered", f.name());
            for g in families() {
                if !std::ptr::eq(*f, *g) {
                    assert_ne!(f.name(), g.name());
                    assert!(f.path() != g.path() || f.rank() != g.rank(), "{} and {} tie", f.name(), g.name());
                }
            }
        }
    }

    /// Names follow the grammar of kernels/README.md: `matmul_f32_<lhs>_<rhs>[_<tile>]_<isa>[_<tech>]` with the
    /// kernel's own LHS format and `qnb` (any layout) or its layout's name; families
    /// `<isa>[_<tech>]_<path>_<layout name>`.
    #[test]
    fn names_follow_the_grammar() {
        use crate::ukernel::RhsReads;
        let cpu = Cpu::with(Features::NONE);
        for k in kernels() {
            let rhs = match k.rhs() {
                RhsReads::Any | RhsReads::Where(_) => "qnb".to_string(),
                RhsReads::Only(f) => f(&cpu).name(),
            };
            let head = format!("matmul_f32_{}_{rhs}_", k.lhs().name());
            assert!(k.name().starts_with(&head), "{}: expected {head}...", k.name());
            let engine = format!("_{}", k.isa().name());
            let tail = &k.name()[k.name().rfind(&engine).unwrap_or_else(|| panic!("{}: no _{}", k.name(), k.isa()))..];
            assert!(
                tail == engine
                    || tail[engine.len()..]
                        .strip_prefix('_')
                        .is_some_and(|t| t.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())),
                "{}: must end with _{}[_<tech>]",
                k.name(),
                k.isa()
            );
            assert!(Isa::Portable.features().contains(k.requires()) || k.isa() != Isa::Portable, "{}", k.name());
            assert!(k.isa().features().contains(k.requires()), "{}: needs more than its rung {}", k.name(), k.isa());
        }
        for f in families() {
            let layout = f.layout(&Cpu::with(f.gemm().requires().union(f.gemv().requires())));
            let base = layout.name();
            let (isa, tail) = (f.gemm().isa().name(), format!("_{}_{base}", f.path().name()));
            assert!(f.name().starts_with(isa) && f.name().ends_with(&tail), "{}: want {isa}[_<tech>]{tail}", f.name());
            assert_eq!(f.gemv().path(), f.path());
            assert_eq!(f.gemm().path(), f.path());
        }
    }

    #[test]
    fn portable_covers_everything() {
        let ladder = build_ladder(&Cpu::with(Features::NONE), None, None).unwrap();
        for path in [ComputePath::Fp32, ComputePath::Int8] {
            for bits in [2, 4, 8] {
                for bl in [16, 32, 64, 256, 2048, 1 << 16] {
                    for zp in [false, true] {
                        let s = ladder.select(&Problem::new(path, bits, bl, zp)).unwrap();
                        assert!(s.gemv().name().ends_with("_portable"), "{}", s.gemv().name());
                    }
                }
            }
        }
    }

    /// The SME2 int8 family is first by default where its asm covers the streaming vector (256 and 512 bits) and the
    /// problem (4-bit, blocks of 32·n), passed over otherwise (the SVE i8mm family then), yet runs anywhere when named.
    #[cfg(target_arch = "aarch64")]
    #[test]
    fn sme2_int8_ranked_at_its_streaming_lengths() {
        use crate::cpu::Feature;
        // Selection also checks the real CPU: the families named here must run on it (qemu max).
        let real = Cpu::get();
        if !real.has(Feature::Sme2) || !real.has(Feature::SveI8mm) || real.sve_vl().unwrap_or(0) < 32 {
            return;
        }
        let feats = Features::of(&[
            Feature::Neon,
            Feature::Dotprod,
            Feature::I8mm,
            Feature::Fp16,
            Feature::Sve,
            Feature::Sve2,
            Feature::SveI8mm,
            Feature::Sme,
            Feature::Sme2,
        ]);
        let (sme2, sve) = ("sme2_int8_qsnbp64x4_sf16_zpc", "sve_i8mm_int8_qsnbp8x8_sf16_zpc");
        for svl in [16, 32, 64, 128] {
            let cpu = Cpu::with(feats).with_vector_lengths(32, svl);
            let ranked = svl == 32 || svl == 64;
            assert_eq!(sme2_int8_ranked(&cpu), ranked, "SVL {svl} bytes");
            let l = build_ladder(&cpu, None, None).unwrap();
            let named = build_ladder(&cpu, None, Some(sme2)).unwrap();
            // 4-bit in blocks of 32·n (its asm; every KleidiAI node): first where ranked. Other bit widths and
            // blocks of 16 (its portable bodies): the SVE i8mm family, as without it. Named, it takes them all.
            for (bits, bl, zp) in [
                (4, 32, false),
                (4, 64, true),
                (4, 128, false),
                (4, 256, false),
                (8, 32, false),
                (2, 64, false),
                (4, 16, false),
            ] {
                let p = Problem::new(ComputePath::Int8, bits, bl, zp);
                let want = if ranked && bits == 4 && bl % 32 == 0 { sme2 } else { sve };
                assert_eq!(l.select(&p).unwrap().name(), want, "SVL {svl} bytes, {p}");
                assert_eq!(named.select(&p).unwrap().name(), sme2, "SVL {svl} bytes, {p}");
            }
        }
    }

    /// The SME2 fp32 family is first for the fp32 path where its FMOPA tiles are written for the streaming vector
    /// (256 and 512 bits), with SVE of any length or none (Apple M4: SME2 at 512 bits without SVE); at 128 and 1024
    /// bits the SVE fp32 family (SVE vectors of 256 bits or more) or the NEON one, yet it runs anywhere when named.
    #[cfg(target_arch = "aarch64")]
    #[test]
    fn sme2_fp32_ranked_at_its_streaming_lengths() {
        use crate::cpu::Feature;
        let (sme2, sve, neon) =
            ("sme2_fp32_qsnbp8x4_sf32_zpc", "sve_fp32_qsnbp8x4_sf32_zpc", "neon_fp32_qsnbp8x4_sf32_zpc");
        let base = [Feature::Neon, Feature::Dotprod, Feature::I8mm, Feature::Fp16, Feature::Sme, Feature::Sme2];
        let with_sve = [&base[..], &[Feature::Sve, Feature::Sve2, Feature::SveI8mm]].concat();
        // Selection also checks the real CPU: the families expected here must run on it (qemu max; without SVE
        // of 256 bits or more, the SVE family's cases are left out).
        let real = Cpu::get();
        if !real.has(Feature::Sme2) {
            return;
        }
        let real_sve = real.sve_vl().unwrap_or(0);
        for (feats, vl) in [(&base[..], 0), (&with_sve[..], 16), (&with_sve[..], 32)] {
            if vl > real_sve {
                continue;
            }
            for svl in [16, 32, 64, 128] {
                let cpu = Cpu::with(Features::of(feats)).with_vector_lengths(vl, svl);
                let want = if svl == 32 || svl == 64 {
                    sme2
                } else if vl >= 32 {
                    sve
                } else {
                    neon
                };
                let p = Problem::new(ComputePath::Fp32, 4, 32, true);
                let l = build_ladder(&cpu, None, None).unwrap();
                assert_eq!(l.select(&p).unwrap().name(), want, "SVE {vl} bytes, SVL {svl} bytes");
                let named = build_ladder(&cpu, None, Some(sme2)).unwrap();
                assert_eq!(named.select(&p).unwrap().name(), sme2, "SVE {vl} bytes, SVL {svl} bytes");
            }
        }
    }

    #[test]
    fn forced_rungs_and_families() {
        let cpu = Cpu::with(Isa::Avx2.features());
        let l = build_ladder(&cpu, Some("portable"), None).unwrap();
        assert_eq!(l.cpu().features(), Features::NONE);
        let e = build_ladder(&cpu, Some("sme"), None).unwrap_err();
        assert!(e.0.contains("NIBBLE_ISA=sme") && e.0.contains("does not support"), "{e}");
        let e = build_ladder(&cpu, Some("bogus"), None).unwrap_err();
        assert!(e.0.contains("bogus") && e.0.contains("avx512vnni"), "{e}");
        assert!(build_ladder(&cpu, Some("avx2"), None).is_ok());
        let e = build_ladder(&cpu, None, Some("nope")).unwrap_err();
        assert!(e.0.contains("unknown family nope"), "{e}");
        // Restricting to the second-ranked int8 family that runs here (and on this test's CPU) selects it.
        let runs = |f: &&&Family| [f.gemv(), f.gemm()].iter().all(|k| k.runs_on(&cpu) && k.runs_on(Cpu::get()));
        let second = families().iter().filter(|f| f.path() == ComputePath::Int8).filter(runs).nth(1).unwrap();
        let l = build_ladder(&cpu, None, Some(second.name())).unwrap();
        let s = l.select(&Problem::new(ComputePath::Int8, 4, 32, true)).unwrap();
        assert_eq!(s.name(), second.name());
        // An fp32 node has no family in an int8-only list: the error says why for each candidate.
        let e = l.select(&Problem::new(ComputePath::Fp32, 4, 32, true)).unwrap_err();
        assert!(e.0.contains(second.name()) && e.0.contains("int8 family"), "{e}");
    }
}
