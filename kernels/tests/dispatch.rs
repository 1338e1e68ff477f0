//! CPU detection, the `NIBBLE_ISA` ladder and family selection. Under qemu, `NIBBLE_EXPECT_ISAS` (set by
//! scripts/test-aarch64.sh per `-cpu` model) states which rungs detection must find, so a detection bug fails
//! here instead of as a SIGILL, `NIBBLE_EXPECT_CPU` every feature and vector length detected (the `Cpu`'s
//! display, e.g. `neon+dotprod+i8mm+fp16+sve+svei8mm (sve vl 32 B)`), and `NIBBLE_EXPECT_FAMILIES` which family
//! each compute path gets.

use nibble_kernels::registry::{self, build_ladder};
use nibble_kernels::{ComputePath, Cpu, Isa, Problem};

fn names(isas: &[Isa]) -> String {
    isas.iter().map(|i| i.name()).collect::<Vec<_>>().join(",")
}

#[test]
fn detected_isas_match_expectation() {
    let cpu = Cpu::get();
    let got = names(&cpu.rungs());
    eprintln!("detected: {got}; features {cpu}");
    assert!(got.starts_with("portable"), "portable is always available: {got}");
    if let Ok(want) = std::env::var("NIBBLE_EXPECT_ISAS") {
        assert_eq!(got, want, "CPU feature detection");
    }
    if let Ok(want) = std::env::var("NIBBLE_EXPECT_CPU") {
        assert_eq!(cpu.to_string(), want, "CPU features and vector lengths");
    }
    // SVE/SME kernels size their tiles by vector length: detection must know it wherever the feature is.
    assert_eq!(cpu.sve_vl().is_some(), cpu.has(nibble_kernels::Feature::Sve), "{cpu}");
    assert_eq!(cpu.sme_svl().is_some(), cpu.has(nibble_kernels::Feature::Sme), "{cpu}");
}

#[test]
fn every_available_rung_can_be_forced() {
    let cpu = Cpu::get();
    for isa in cpu.rungs() {
        let ladder = build_ladder(cpu, Some(isa.name()), None).unwrap();
        assert!(isa.features().contains(ladder.cpu().features()), "{isa}: {}", ladder.cpu());
        assert!(cpu.features().contains(ladder.cpu().features()));
        for path in [ComputePath::Fp32, ComputePath::Int8] {
            let sel = ladder.select(&Problem::new(path, 4, 32, true)).unwrap();
            for k in [sel.gemv(), sel.gemm()] {
                assert!(ladder.cpu().supports(k.requires()), "{isa}: {} needs {}", k.name(), k.requires());
            }
        }
    }
    // Forcing a rung this CPU lacks is an error naming it.
    if let Some(missing) = Isa::ALL.into_iter().find(|&i| !cpu.has_rung(i)) {
        let e = build_ladder(cpu, Some(missing.name()), None).unwrap_err();
        assert!(e.0.contains(missing.name()), "{e}");
    }
}

#[test]
fn portable_rung_selects_portable_kernels() {
    let ladder = build_ladder(Cpu::get(), Some("portable"), None).unwrap();
    for path in [ComputePath::Fp32, ComputePath::Int8] {
        let sel = ladder.select(&Problem::new(path, 4, 32, false)).unwrap();
        assert!(sel.gemv().name().ends_with("_portable") && sel.gemm().name().ends_with("_portable"));
    }
}

/// Families are tried best rank first; the process ladder (no env override in tests) selects, for every problem,
/// the first family in that order that is ranked for it on this CPU (`Family::ranked_for`) and serves it.
#[test]
fn selection_is_family_first_by_rank() {
    let ladder = build_ladder(Cpu::get(), None, None).unwrap();
    assert!(ladder.families().windows(2).all(|w| w[0].rank() >= w[1].rank()));
    for path in [ComputePath::Fp32, ComputePath::Int8] {
        for (bits, bl, zp) in [(4, 32, false), (4, 32, true), (2, 16, true), (8, 4096, false)] {
            let p = Problem::new(path, bits, bl, zp);
            let sel = ladder.select(&p).unwrap();
            let first = ladder
                .families()
                .iter()
                .find(|f| f.ranked_for(ladder.cpu(), &p) && f.why_not(ladder.cpu(), &p).is_none())
                .unwrap();
            assert_eq!(sel.name(), first.name(), "{p}");
        }
    }
    assert!(registry::families().len() >= 4);
}

/// `NIBBLE_EXPECT_FAMILIES=int8=<family>,fp32=<family>`: the family the process ladder selects for a 4-bit,
/// block-32 node with zero points, per path (scripts/test-aarch64.sh states it per qemu CPU model; the x86 test
/// script per forced rung).
#[test]
fn selected_families_match_expectation() {
    let ladder = registry::ladder().unwrap();
    let got: Vec<String> = [ComputePath::Int8, ComputePath::Fp32]
        .into_iter()
        .map(|path| {
            let sel = ladder.select(&Problem::new(path, 4, 32, true)).unwrap();
            format!("{}={}", path.name(), sel.name())
        })
        .collect();
    let got = got.join(",");
    eprintln!("selected: {got} on {}", ladder.cpu());
    if let Ok(want) = std::env::var("NIBBLE_EXPECT_FAMILIES") {
        assert_eq!(got, want, "family selection on {}", ladder.cpu());
    }
}

/// The selected family computes the same output from weights packed into a caller's buffer and read in place
/// (`PackedRhs::pack_into` + `PackedRhs::borrowed`) as from weights it packed itself, on both paths.
#[test]
fn kernels_read_weights_packed_into_a_callers_buffer() {
    use nibble_kernels::format::{Params, Weights, ZeroPoints};
    use nibble_kernels::pack::{LhsSource, PackedRhs};
    use nibble_kernels::{ComputePath, Problem, select};
    let (k, n, m) = (300usize, 77usize, 5usize);
    let p = Params::new(k as i64, n as i64, 4, 32).unwrap();
    let b: Vec<u8> = (0..n * p.k_blocks() * p.blob_size()).map(|i| (i * 131 % 251) as u8).collect();
    let scales: Vec<f32> = (0..n * p.k_blocks()).map(|i| 0.01 + (i % 7) as f32 * 1e-3).collect();
    let zp: Vec<u8> = (0..n * p.zp_row_bytes()).map(|i| (i * 7 % 256) as u8).collect();
    let w = Weights::new(p, &b, &scales, ZeroPoints::Packed(&zp), None).unwrap();
    let a: Vec<f32> = (0..m * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
    for path in [ComputePath::Int8, ComputePath::Fp32] {
        let sel = select(&Problem::of(path, &w)).unwrap();
        let owned = sel.pack_rhs(&w).unwrap();
        let mut buf = vec![0u8; PackedRhs::packed_len(&w, sel.layout()).unwrap()];
        sel.pack_rhs_into(&w, &mut buf).unwrap();
        let view = sel.borrow_rhs(&w, std::sync::Arc::new(buf)).unwrap();
        let run = |rhs: &PackedRhs| {
            let mut out = vec![0f32; m * n];
            sel.matmul(rhs, LhsSource::F32(&a), m, None, &mut out, |count, f| {
                (0..count).for_each(f);
                Ok::<(), ()>(())
            })
            .unwrap();
            out
        };
        assert_eq!(run(&owned), run(&view), "{} ({path:?})", sel.name());
    }
}
