//! Every registered kernel this CPU can run, against the reference, over the edge-case taxonomy: odd N, K not a
//! multiple of the block, pad codes set to garbage, every bit width, zero-point kind, g_idx flavour, bias,
//! several panel layouts; plus MLAS's shape sweeps and a property test over random shapes.

mod common;

use common::*;
use nibble_kernels::pack::{ComputePath, LhsSource, RhsLayout};
use nibble_kernels::registry::{self, DEFAULT_LAYOUT};
use nibble_kernels::{Cpu, Selected, UKernel, matmul_serial, reference};
use proptest::prelude::{ProptestConfig, any, proptest};

/// Kernels to test: all this CPU runs; the rest are reported as skipped. `NIBBLE_REQUIRE_ISAS=a,b` makes a
/// skip of those ISAs a failure (CI on a machine that has them).
fn kernels() -> Vec<&'static UKernel> {
    let cpu = Cpu::get();
    let required: Vec<String> = std::env::var("NIBBLE_REQUIRE_ISAS")
        .map(|s| s.split(',').map(|x| x.trim().to_string()).filter(|x| !x.is_empty()).collect())
        .unwrap_or_default();
    let mut out = Vec::new();
    for &uk in registry::all() {
        if cpu.has(uk.isa()) {
            out.push(uk);
        } else {
            assert!(
                !required.iter().any(|r| r == uk.isa().name()),
                "{} skipped but NIBBLE_REQUIRE_ISAS has {}",
                uk.name(),
                uk.isa()
            );
            eprintln!("SKIP {}: needs {}", uk.name(), uk.isa());
        }
    }
    out
}

/// Runs `sel` on `case` with M rows and checks it against the references. Returns the max |error|.
fn check(sel: &Selected, case: &Case, m: usize, rng: &mut Rng) -> f64 {
    let w = case.weights();
    let p = w.params;
    let a = activations(rng, m, p.k);
    let rhs = sel.pack_rhs(&w);
    let mut out = vec![f32::NAN; m * p.n];
    matmul_serial(sel, &rhs, LhsSource::F32(&a), m, case.bias.as_deref(), &mut out);
    let what = format!(
        "{} layout={:?} M={m} N={} K={} bits={} bl={} zp={:?} g_idx={} bias={}",
        sel.gemv_name(),
        sel.layout(),
        p.n,
        p.k,
        p.bits,
        p.block_size,
        case.zp,
        case.g_idx.is_some(),
        case.bias.is_some()
    );
    let exact = reference::matmul(&a, m, &w, case.bias.as_deref());
    let mag = magnitudes(&a, m, &w);
    let bias_mag = |i: usize| case.bias.as_ref().map_or(0.0, |b| b[i % p.n].abs() as f64);
    match sel.path() {
        ComputePath::Fp32 => {
            // f32 products and sums: a few ulps of the magnitude sum, far below any quantization effect.
            assert_close(&what, &out, &exact, |i| 3e-6 * mag[i] + 1e-6 * bias_mag(i) + 1e-7);
        }
        ComputePath::Int8 => {
            let cmag = code_magnitudes(&a, m, &w);
            let float_tol = |i: usize| 1e-5 * cmag[i] + 1e-6 * bias_mag(i) + 1e-7;
            if !w.has_reordering_g_idx() {
                // Same integer numerics: only the f32 epilogue may differ.
                let int_ref = reference::matmul_int8(&a, m, &w, case.bias.as_deref());
                assert_close(&format!("{what} vs int8 reference"), &out, &int_ref, float_tol);
            }
            // Against exact arithmetic: at most half a quantization step per activation.
            let wd = reference::dequantize(&w);
            // Activation blocks are the weight blocks, except with g_idx regrouping (then bound by the row).
            let a_block = if w.has_reordering_g_idx() { p.k } else { p.block_size };
            assert_close(&format!("{what} vs exact"), &out, &exact, |i| {
                let (row, n) = (i / p.n, i % p.n);
                let bound = reference::int8_error_bound(&a[row * p.k..][..p.k], &wd[n * p.k..][..p.k], a_block);
                bound * 1.001 + float_tol(i)
            });
        }
    }
    out.iter().zip(&exact).map(|(&g, &e)| (g as f64 - e).abs()).fold(0.0, f64::max)
}

fn layouts() -> [RhsLayout; 4] {
    [DEFAULT_LAYOUT, RhsLayout { nr: 4, kr: 4 }, RhsLayout { nr: 16, kr: 4 }, RhsLayout { nr: 4, kr: 8 }]
}

#[test]
fn every_kernel_edge_taxonomy() {
    let mut rng = Rng::new(1);
    let mut cases = 0;
    for uk in kernels() {
        for layout in layouts() {
            for bits in [2u32, 4, 8] {
                for bl in [16usize, 32, 64, 128] {
                    let Some(sel) = Selected::single(uk, Some(layout), bits, bl) else { continue };
                    let nr = layout.nr;
                    for (zp, g) in [
                        (ZpKind::None, GIdx::None),
                        (ZpKind::Packed, GIdx::None),
                        (ZpKind::Float, GIdx::None),
                        (ZpKind::Packed, GIdx::Trivial),
                        (ZpKind::None, GIdx::Shuffled),
                        (ZpKind::Float, GIdx::Random),
                    ] {
                        for &n in &[1, nr - 1, nr + 1, 2 * nr + 1] {
                            for &k in &[bl, 2 * bl + 7, 3 * bl - 1] {
                                let m = 1 + rng.below(5) as usize;
                                let case = Case::random(&mut rng, k, n.max(1), bits, bl, zp, g, n % 2 == 1);
                                check(&sel, &case, m, &mut rng);
                                cases += 1;
                            }
                        }
                    }
                }
            }
        }
    }
    eprintln!("{cases} cases");
}

#[test]
fn large_blocks_and_tails() {
    let mut rng = Rng::new(2);
    for uk in kernels() {
        for bl in [256usize, 512, 1024, 2048] {
            for bits in [2u32, 4, 8] {
                let sel = Selected::single(uk, None, bits, bl).expect("portable takes every block size");
                for k in [16usize, 93, bl + 5, 2 * bl] {
                    let case = Case::random(&mut rng, k, 19, bits, bl, ZpKind::Packed, GIdx::None, true);
                    check(&sel, &case, 3, &mut rng);
                }
            }
        }
    }
}

/// MLAS's sweep (test_sqnbitgemm.cpp): cubes 1..15, (1, b, 32), and the odd large shapes.
#[test]
fn mlas_shapes() {
    let mut rng = Rng::new(3);
    for uk in kernels() {
        let sel = Selected::single(uk, None, 4, 16).unwrap();
        for s in 1..=15 {
            let case = Case::random(&mut rng, s, s, 4, 16, ZpKind::Packed, GIdx::None, false);
            check(&sel, &case, s, &mut rng);
        }
        let sel32 = Selected::single(uk, None, 4, 32).unwrap();
        for b in [1, 7, 33, 95] {
            let case = Case::random(&mut rng, 32, b, 4, 32, ZpKind::None, GIdx::None, false);
            check(&sel32, &case, 1, &mut rng);
        }
        for (m, n, k, bl) in [(43, 500, 401, 32), (1, 1027, 1031, 64), (11, 1027, 1031, 128)] {
            let sel = Selected::single(uk, None, 4, bl).unwrap();
            let case = Case::random(&mut rng, k, n, 4, bl, ZpKind::Float, GIdx::None, true);
            check(&sel, &case, m, &mut rng);
        }
    }
}

/// The selected families (what the provider gets) on the whole M range, including tiling across many tiles.
#[test]
fn selected_families_tile_correctly() {
    let mut rng = Rng::new(4);
    for path in [ComputePath::Fp32, ComputePath::Int8] {
        let sel = registry::select(path, 4, 32).unwrap();
        for m in [1usize, 2, 7, 33, 100] {
            let case = Case::random(&mut rng, 288, 300, 4, 32, ZpKind::Packed, GIdx::None, true);
            check(&sel, &case, m, &mut rng);
        }
    }
}

#[test]
fn f16_activations_equal_their_f32_values() {
    let mut rng = Rng::new(5);
    let case = Case::random(&mut rng, 93, 21, 4, 32, ZpKind::Packed, GIdx::Shuffled, true);
    let w = case.weights();
    for path in [ComputePath::Fp32, ComputePath::Int8] {
        let sel = registry::select(path, 4, 32).unwrap();
        let rhs = sel.pack_rhs(&w);
        let a16: Vec<half::f16> = activations(&mut rng, 3, 93).into_iter().map(half::f16::from_f32).collect();
        let a32: Vec<f32> = a16.iter().map(|x| x.to_f32()).collect();
        let (mut y16, mut y32) = (vec![0f32; 3 * 21], vec![0f32; 3 * 21]);
        matmul_serial(&sel, &rhs, LhsSource::F16(&a16), 3, case.bias.as_deref(), &mut y16);
        matmul_serial(&sel, &rhs, LhsSource::F32(&a32), 3, case.bias.as_deref(), &mut y32);
        assert_eq!(y16, y32);
    }
}

#[test]
#[should_panic(expected = "computed twice")]
fn a_tile_cannot_be_written_twice() {
    let mut rng = Rng::new(6);
    let case = Case::random(&mut rng, 32, 8, 4, 32, ZpKind::None, GIdx::None, false);
    let sel = registry::select(ComputePath::Fp32, 4, 32).unwrap();
    let rhs = sel.pack_rhs(&case.weights());
    let a = activations(&mut rng, 1, 32);
    let lhs = sel.pack_lhs(LhsSource::F32(&a), 1, &rhs);
    let mut out = vec![0f32; 8];
    let tiles = nibble_kernels::OutTiles::new(&mut out, sel.plan(1, &rhs));
    sel.run_tile(&lhs, &rhs, None, &tiles, 0);
    sel.run_tile(&lhs, &rhs, None, &tiles, 0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn random_shapes_match_reference(
        seed in any::<u64>(),
        m in 1usize..9,
        n in 1usize..70,
        k in 1usize..300,
        bits_i in 0usize..3,
        bl_log in 4u32..9,
        zp_i in 0usize..3,
        g_i in 0usize..4,
        bias in any::<bool>(),
    ) {
        let bits = [2u32, 4, 8][bits_i];
        let bl = 1usize << bl_log;
        let zp = [ZpKind::None, ZpKind::Packed, ZpKind::Float][zp_i];
        let g = [GIdx::None, GIdx::Trivial, GIdx::Shuffled, GIdx::Random][g_i];
        let mut rng = Rng::new(seed);
        let case = Case::random(&mut rng, k, n, bits, bl, zp, g, bias);
        for uk in kernels() {
            if let Some(sel) = Selected::single(uk, None, bits, bl) {
                check(&sel, &case, m, &mut rng);
            }
        }
    }
}

/// A NaN in A must reach the output rows it feeds (as f32 arithmetic would), on both paths, and only those rows.
#[test]
fn nan_activations_propagate() {
    let mut rng = Rng::new(7);
    let case = Case::random(&mut rng, 93, 21, 4, 32, ZpKind::Packed, GIdx::None, true);
    let w = case.weights();
    for path in [ComputePath::Fp32, ComputePath::Int8] {
        let sel = registry::select(path, 4, 32).unwrap();
        let rhs = sel.pack_rhs(&w);
        let mut a = activations(&mut rng, 3, 93);
        a[93 + 40] = f32::NAN; // row 1
        let mut out = vec![0f32; 3 * 21];
        matmul_serial(&sel, &rhs, LhsSource::F32(&a), 3, case.bias.as_deref(), &mut out);
        assert!(out[21..42].iter().all(|y| y.is_nan()), "{path:?}: row 1 should be NaN");
        assert!(out[..21].iter().chain(&out[42..]).all(|y| y.is_finite()), "{path:?}: other rows finite");
    }
}

/// Integer sums at their extremes: the largest block size, every code at its maximum, every activation at ±amax
/// (q = ±127), no zero point subtraction (zp = 0). Nothing may overflow on either path.
#[test]
fn worst_case_sums_at_the_largest_block() {
    use nibble_kernels::format::{MAX_BLOCK_SIZE, Params, Weights, ZeroPoints};
    let bl = MAX_BLOCK_SIZE;
    for bits in [4u32, 8] {
        let p = Params::new(bl as i64, 3, bits as i64, bl as i64).unwrap();
        let b = vec![0xFFu8; 3 * p.blob_size()];
        let scales = vec![1.0f32; 3];
        let zp = vec![0u8; 3 * p.zp_row_bytes()];
        let w = Weights::new(p, &b, &scales, ZeroPoints::Packed(&zp), None).unwrap();
        for sign in [1.0f32, -1.0] {
            let a = vec![sign; bl];
            let want = sign as f64 * p.max_code() as f64 * bl as f64;
            for path in [ComputePath::Fp32, ComputePath::Int8] {
                let sel = registry::select(path, bits, bl).unwrap();
                let rhs = sel.pack_rhs(&w);
                let mut out = vec![0f32; 3];
                matmul_serial(&sel, &rhs, LhsSource::F32(&a), 1, None, &mut out);
                for &y in &out {
                    assert!((y as f64 - want).abs() <= want.abs() * 1e-6, "bits={bits} {path:?}: {y} vs {want}");
                }
            }
        }
    }
}

/// The safe API refuses activations that do not cover the plan instead of reading past them.
#[test]
#[should_panic(expected = "activations hold")]
fn short_activations_are_refused() {
    let mut rng = Rng::new(8);
    let case = Case::random(&mut rng, 64, 8, 4, 32, ZpKind::None, GIdx::None, false);
    let sel = registry::select(ComputePath::Fp32, 4, 32).unwrap();
    let rhs = sel.pack_rhs(&case.weights());
    let lhs = nibble_kernels::PackedLhs::F32 { m: 64, k_packed: rhs.k_packed(), data: vec![1.0] };
    let plan = sel.plan(64, &rhs);
    let mut out = vec![0f32; 64 * 8];
    let tiles = nibble_kernels::OutTiles::new(&mut out, plan);
    sel.run_tile(&lhs, &rhs, None, &tiles, 0);
}

/// Tiles computed concurrently from several threads through one `OutTiles` give the serial result, bit for bit.
#[test]
fn tiles_run_concurrently() {
    let mut rng = Rng::new(9);
    let case = Case::random(&mut rng, 300, 257, 4, 32, ZpKind::Packed, GIdx::None, true);
    let w = case.weights();
    for path in [ComputePath::Fp32, ComputePath::Int8] {
        let sel = registry::select(path, 4, 32).unwrap();
        let rhs = sel.pack_rhs(&w);
        let m = 37;
        let a = activations(&mut rng, m, 300);
        let mut serial = vec![0f32; m * 257];
        matmul_serial(&sel, &rhs, LhsSource::F32(&a), m, case.bias.as_deref(), &mut serial);
        let lhs = sel.pack_lhs(LhsSource::F32(&a), m, &rhs);
        let plan = sel.plan(m, &rhs);
        assert!(plan.count() >= 4, "want several tiles, got {}", plan.count());
        let mut parallel = vec![f32::NAN; m * 257];
        let tiles = nibble_kernels::OutTiles::new(&mut parallel, plan);
        std::thread::scope(|s| {
            for i in 0..4 {
                let (sel, lhs, rhs, tiles, bias) = (&sel, &lhs, &rhs, &tiles, case.bias.as_deref());
                s.spawn(move || {
                    for t in (i..plan.count()).step_by(4) {
                        sel.run_tile(lhs, rhs, bias, tiles, t);
                    }
                });
            }
        });
        drop(tiles);
        assert_eq!(serial, parallel, "{path:?}");
    }
}
