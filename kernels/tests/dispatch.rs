//! CPU detection and the `NIBBLE_ISA` ladder. Under qemu, `NIBBLE_EXPECT_ISAS` (set by scripts/test-aarch64.sh
//! per `-cpu` model) states what detection must find, so a detection bug fails here instead of as a SIGILL.

use nibble_kernels::registry::{self, build_ladder, select_from};
use nibble_kernels::{ComputePath, Cpu, Isa};

fn names(isas: &[Isa]) -> String {
    isas.iter().map(|i| i.name()).collect::<Vec<_>>().join(",")
}

#[test]
fn detected_isas_match_expectation() {
    let got = names(Cpu::get().isas());
    eprintln!("detected: {got}");
    assert!(got.starts_with("portable"), "portable is always available: {got}");
    if let Ok(want) = std::env::var("NIBBLE_EXPECT_ISAS") {
        assert_eq!(got, want, "CPU feature detection");
    }
}

#[test]
fn every_available_rung_can_be_forced() {
    let cpu = Cpu::get();
    for &isa in cpu.isas() {
        let ladder = build_ladder(cpu, Some(isa.name())).unwrap();
        assert!(!ladder.is_empty());
        assert!(ladder.iter().all(|k| k.isa().rank() <= isa.rank() && cpu.has(k.isa())), "{isa}");
        // Best first.
        assert!(ladder.windows(2).all(|w| w[0].isa().rank() >= w[1].isa().rank()));
        for path in [ComputePath::Fp32, ComputePath::Int8] {
            let sel = select_from(&ladder, path, 4, 32).unwrap();
            assert!(registry::all().iter().any(|k| k.name() == sel.gemv_name()));
        }
    }
    // Forcing a rung this CPU lacks is an error naming it.
    if let Some(missing) = Isa::ALL.into_iter().find(|&i| !cpu.has(i)) {
        let e = build_ladder(cpu, Some(missing.name())).unwrap_err();
        assert!(e.0.contains(missing.name()), "{e}");
    }
}

#[test]
fn portable_rung_selects_portable_kernels() {
    let ladder = build_ladder(Cpu::get(), Some("portable")).unwrap();
    for path in [ComputePath::Fp32, ComputePath::Int8] {
        let sel = select_from(&ladder, path, 4, 32).unwrap();
        assert!(sel.gemv_name().ends_with("_portable") && sel.gemm_name().ends_with("_portable"));
    }
}
