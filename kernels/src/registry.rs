//! The kernel registry and `select()`: one list feeds dispatch, tests and benchmarks.
//!
//! Ladders, best first: aarch64 `sme → sve → i8mm → dotprod → neon → portable`, x86_64
//! `avx512vnni → avx2 → portable`. The CPU is probed once per process ([`Cpu::get`]); `NIBBLE_ISA=<rung>`
//! caps the ladder at that rung (e.g. `NIBBLE_ISA=portable`), and naming a rung this CPU lacks is an error.

use crate::arch::portable;
use crate::cpu::{Cpu, Isa};
use crate::pack::{ComputePath, RhsLayout};
use crate::ukernel::{Role, Selected, UKernel};
use std::sync::OnceLock;

/// Every kernel in this build, for every architecture it was compiled for.
pub fn all() -> &'static [&'static UKernel] {
    static ALL: &[&UKernel] = &[&portable::FP32, &portable::INT8];
    ALL
}

/// The layout packed for families made only of layout-generic (portable) kernels: 8 columns per panel, 4 K
/// values per column group (the shape the SIMD dot-product kernels read).
pub const DEFAULT_LAYOUT: RhsLayout = RhsLayout { nr: 8, kr: 4 };

/// Why no kernel could be selected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectError(pub String);

impl std::fmt::Display for SelectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SelectError {}

/// The usable kernels of this process, best first, under `NIBBLE_ISA`. Computed once.
fn ladder() -> Result<&'static [&'static UKernel], SelectError> {
    static LADDER: OnceLock<Result<Vec<&'static UKernel>, SelectError>> = OnceLock::new();
    LADDER
        .get_or_init(|| build_ladder(Cpu::get(), std::env::var("NIBBLE_ISA").ok().as_deref()))
        .as_ref()
        .map(|v| v.as_slice())
        .map_err(Clone::clone)
}

/// The kernels `cpu` can run, best first, capped at the rung named by `force` (`NIBBLE_ISA`).
pub fn build_ladder(cpu: &Cpu, force: Option<&str>) -> Result<Vec<&'static UKernel>, SelectError> {
    let cap = match force.map(str::trim).filter(|s| !s.is_empty()) {
        None => None,
        Some(name) => {
            let names: Vec<&str> = Isa::ALL.iter().map(|i| i.name()).collect();
            let isa = Isa::from_name(&name.to_ascii_lowercase()).ok_or_else(|| {
                SelectError(format!("NIBBLE_ISA={name} is not a known rung (one of: {})", names.join(", ")))
            })?;
            if !cpu.has(isa) {
                let have: Vec<&str> = cpu.isas().iter().map(|i| i.name()).collect();
                return Err(SelectError(format!(
                    "NIBBLE_ISA={name}: this CPU does not support {isa} (it supports: {})",
                    have.join(", ")
                )));
            }
            Some(isa)
        }
    };
    let mut v: Vec<&'static UKernel> = all()
        .iter()
        .copied()
        .filter(|k| cpu.has(k.isa))
        .filter(|k| cap.is_none_or(|c| k.isa == Isa::Portable || k.isa.rank() <= c.rank()))
        .collect();
    v.sort_by_key(|k| std::cmp::Reverse(k.isa.rank()));
    Ok(v)
}

/// Picks the kernels for a node with this compute path, bit width and block size on this CPU.
pub fn select(path: ComputePath, bits: u32, bl: usize) -> Result<Selected, SelectError> {
    select_from(ladder()?, path, bits, bl)
}

/// [`select`] over an explicit ladder (tests walk forced ladders with it).
pub fn select_from(
    ladder: &[&'static UKernel],
    path: ComputePath,
    bits: u32,
    bl: usize,
) -> Result<Selected, SelectError> {
    // A kernel fits if it computes this path in this role, takes this block, and its layout can hold it (else a
    // lower rung is tried).
    let fits = |k: &&&'static UKernel, role: Role| {
        k.path == path
            && (k.role == role || k.role == Role::Any)
            && (k.supports)(bits, bl)
            && k.rhs.unwrap_or(DEFAULT_LAYOUT).supports(bits, bl)
    };
    let gemv = ladder.iter().find(|k| fits(k, Role::Gemv)).ok_or_else(|| no_kernel(path, bits, bl))?;
    let layout = gemv.rhs.unwrap_or(DEFAULT_LAYOUT);
    let gemm = ladder
        .iter()
        .find(|k| fits(k, Role::Gemm) && k.rhs.is_none_or(|l| l == layout))
        .ok_or_else(|| no_kernel(path, bits, bl))?;
    // A ladder built for another CPU (tests do that) must not hand out kernels this one cannot run.
    for k in [gemv, gemm] {
        if !Cpu::get().has(k.isa) {
            return Err(SelectError(format!("{} needs {}, which this CPU lacks", k.name, k.isa)));
        }
    }
    Ok(Selected { gemv, gemm, layout, path })
}

fn no_kernel(path: ComputePath, bits: u32, bl: usize) -> SelectError {
    SelectError(format!("no {} kernel for bits={bits} block_size={bl} in this build", path.name()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_portable_covers_everything() {
        let mut names: Vec<&str> = all().iter().map(|k| k.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all().len());
        let cpu = Cpu::with(&[]);
        let ladder = build_ladder(&cpu, None).unwrap();
        for path in [ComputePath::Fp32, ComputePath::Int8] {
            for bits in [2, 4, 8] {
                for bl in [16, 32, 64, 256, 2048] {
                    let s = select_from(&ladder, path, bits, bl).unwrap();
                    assert!(s.gemv_name().ends_with("_portable"), "{}", s.gemv_name());
                }
            }
        }
    }

    /// Names follow `matmul_<dst>_<lhs>_<rhs>[...]_<isa>`: the LHS part says the compute path (`f32` or
    /// `qsi8db`), the suffix the ISA, so logs and bench ids are self-describing.
    #[test]
    fn names_describe_path_and_isa() {
        for k in all() {
            let lhs = match k.path {
                ComputePath::Fp32 => "matmul_f32_f32_",
                ComputePath::Int8 => "matmul_f32_qsi8db_",
            };
            assert!(k.name.starts_with(lhs), "{}: path {:?}", k.name, k.path);
            assert!(k.name.ends_with(&format!("_{}", k.isa.name())), "{}: isa {}", k.name, k.isa);
        }
    }

    #[test]
    fn forced_rungs() {
        let cpu = Cpu::with(&[Isa::Avx2]);
        assert!(build_ladder(&cpu, Some("portable")).unwrap().iter().all(|k| k.isa == Isa::Portable));
        let e = build_ladder(&cpu, Some("sme")).unwrap_err();
        assert!(e.0.contains("NIBBLE_ISA=sme") && e.0.contains("does not support"), "{e}");
        let e = build_ladder(&cpu, Some("bogus")).unwrap_err();
        assert!(e.0.contains("bogus") && e.0.contains("avx512vnni"), "{e}");
        assert!(build_ladder(&cpu, Some("avx2")).is_ok());
    }
}
