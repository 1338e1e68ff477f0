//! Kernel-driven tests: every registered kernel this CPU can run, on every layout it reads (its own for
//! fixed-layout kernels; for layout-generic ones every family's layout and a variety of descriptors), against
//! the reference over the edge-case taxonomy: odd N, K not a multiple of the block, pad codes set to garbage,
//! every bit width, every block size the kernel claims (16 … 65536), zero-point kinds, g_idx flavours, bias,
//! M = 1..9 and ≥ 64; plus every family as selected, MLAS's shape sweeps and a property test. A runnable kernel
//! that the suite could not exercise on one of its layouts fails the suite.

use nibble_kernels::pack::{LhsFormat, LhsSource, RhsLayout, ZpStorage};
use nibble_kernels::testing::*;
use nibble_kernels::{ActQuant, ComputePath, Cpu, Problem, Selected, UKernel, matmul_serial, registry};
use proptest::prelude::{ProptestConfig, any, proptest};
use std::collections::BTreeMap;

/// Kernels to test: all this CPU runs; the rest are reported as skipped. `NIBBLE_REQUIRE_ISAS=a,b` makes a
/// skip of kernels of those rungs a failure (CI on a machine that has them).
fn kernels() -> Vec<&'static UKernel> {
    let cpu = Cpu::get();
    let required: Vec<String> = std::env::var("NIBBLE_REQUIRE_ISAS")
        .map(|s| s.split(',').map(|x| x.trim().to_string()).filter(|x| !x.is_empty()).collect())
        .unwrap_or_default();
    let mut out = Vec::new();
    for &uk in registry::kernels() {
        if uk.runs_on(cpu) {
            out.push(uk);
        } else {
            let missing = uk.requires().missing_from(cpu.features());
            assert!(
                !required.iter().any(|r| r == uk.isa().name()),
                "{} skipped (needs {missing}) but NIBBLE_REQUIRE_ISAS has {}",
                uk.name(),
                uk.isa()
            );
            eprintln!("SKIP {}: needs {missing}", uk.name());
        }
    }
    out
}

/// Cases run per (kernel, layout): the coverage check at the end of the taxonomy reads it.
type Coverage = BTreeMap<(&'static str, String), usize>;

/// M values cycled through: 1..9 and two beyond 64.
const MS: [usize; 11] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 64, 67];

#[test]
fn every_kernel_edge_taxonomy() {
    let mut coverage = Coverage::new();
    for uk in kernels() {
        let (mut rng, mut mi) = (Rng::for_kernel(1, uk.name()), 0);
        for layout in layouts_of(uk) {
            coverage.entry((uk.name(), layout.name())).or_default();
            for bits in [2u32, 4, 8] {
                for bl in [16usize, 32, 64, 128] {
                    let nr = layout.nr;
                    for (zp, g) in [
                        (ZpKind::None, GIdx::None),
                        (ZpKind::Packed, GIdx::None),
                        (ZpKind::Float, GIdx::None),
                        (ZpKind::Packed, GIdx::Trivial),
                        (ZpKind::None, GIdx::Shuffled),
                        (ZpKind::Float, GIdx::Random),
                    ] {
                        let ns = [1, nr.saturating_sub(1).max(1), nr + 1, 2 * nr + 1];
                        let ks = [bl, 2 * bl + 7, 3 * bl - 1];
                        // Two (N, K) picks per combination; M cycles through MS (small M more often).
                        for _ in 0..2 {
                            let (n, k) = (ns[rng.below(4) as usize], ks[rng.below(3) as usize]);
                            let m = if mi % 4 == 3 { MS[(mi / 4) % MS.len()] } else { 1 + mi % 9 };
                            mi += 1;
                            let case = Case::random(&mut rng, k, n, bits, bl, zp, g, n % 2 == 1);
                            let case = case_for(uk, &layout, case);
                            let p = Problem::of(uk.path(), &case.weights());
                            let Ok(sel) = Selected::single(uk, layout, &p) else { continue };
                            let count = coverage.entry((uk.name(), layout.name())).or_default();
                            // Every third case in the row numerics (the int8 path's second).
                            let act = if *count % 3 == 1 { ActQuant::Row } else { ActQuant::Block };
                            *count += 1;
                            check(&sel.with_activation_quant(act), &case, m, &mut rng);
                        }
                    }
                }
            }
        }
    }
    let missed: Vec<String> =
        coverage.iter().filter(|(_, n)| **n == 0).map(|((k, l), _)| format!("{k} on {l}")).collect();
    assert!(missed.is_empty(), "kernels the suite could not exercise on their own layouts: {}", missed.join(", "));
    eprintln!("{} cases over {} (kernel, layout) pairs", coverage.values().sum::<usize>(), coverage.len());
}

/// The SME GEMMs' row tails: every row count of a 16-row group (their passes differ by it: the few-row SDOT passes
/// of 1–4 rows, 5–10 at SVL 512, the SMOPA passes where they count fewer, the FMOPA GEMM's fallback under 4 rows)
/// against the reference, with a K tail and a last, partial panel: blocks of 32 (one chunk per block), 64 with zero
/// points and 128, the row numerics at every fourth row count and at 10 (at SVL 512 their choice between the passes
/// changes at 9 and 10 rows). Nothing runs where no SME kernel does.
#[test]
fn sme_gemms_every_row_count() {
    let mut rng = Rng::new(0x51ED_2705);
    for uk in kernels().into_iter().filter(|uk| uk.name().ends_with("_sme_mopa")) {
        for layout in layouts_of(uk) {
            for (bl, zp) in [(32usize, ZpKind::None), (64, ZpKind::Packed), (128, ZpKind::None)] {
                let case = Case::random(&mut rng, 2 * bl - 7, 64 + 5, 4, bl, zp, GIdx::None, true);
                let case = case_for(uk, &layout, case);
                let p = Problem::of(uk.path(), &case.weights());
                let Ok(sel) = Selected::single(uk, layout, &p) else { continue };
                for m in 1..=16 {
                    let act = if m % 4 == 1 || m == 10 { ActQuant::Row } else { ActQuant::Block };
                    check(&sel.with_activation_quant(act), &case, m, &mut rng);
                }
            }
        }
    }
}

/// One row over many panels: the aarch64 GEMVs walk 2 or 4 panels per asm pass (4-bit codes in whole 32-K
/// chunks), then a tail of 1–3; the taxonomy's widths (up to 3 panels) seldom meet M = 1 there. Every int8
/// kernel, each layout, N = 4 panels + 1 column on 8-column layouts (2 panels + 1 on wider ones), blocks of
/// one and of two chunks, with and without zero points, both numerics, with a bias.
#[test]
fn one_row_over_many_panels() {
    for uk in kernels().into_iter().filter(|uk| uk.path() == ComputePath::Int8) {
        let mut rng = Rng::for_kernel(12, uk.name());
        for layout in layouts_of(uk) {
            let n = if layout.nr <= 8 { 4 * layout.nr + 1 } else { 2 * layout.nr + 1 };
            for (bl, k) in [(32usize, 96usize), (64, 64 * 3 - 5)] {
                for zp in [ZpKind::None, ZpKind::Packed] {
                    let case = Case::random(&mut rng, k, n, 4, bl, zp, GIdx::None, true);
                    let case = case_for(uk, &layout, case);
                    let Ok(sel) = Selected::single(uk, layout, &Problem::of(uk.path(), &case.weights())) else {
                        continue;
                    };
                    for act in [ActQuant::Block, ActQuant::Row] {
                        check(&sel.with_activation_quant(act), &case, 1, &mut rng);
                    }
                }
            }
        }
    }
}

/// Every block size a kernel claims, 16 … 65536, with a K tail, on each of its layouts that holds it: a panel and
/// one column past it up to blocks of 2048; from 4096 on, 3 columns (the K walk is what those sizes add: the
/// column tails are the smaller sizes' work, and 65 columns of K = 65541 were most of the suite's time under qemu).
#[test]
fn every_claimed_block_size() {
    for uk in kernels() {
        let mut rng = Rng::for_kernel(2, uk.name());
        let layouts = layouts_of(uk);
        for log in 4..=16 {
            let bl = 1usize << log;
            for bits in [2u32, 4, 8] {
                if !uk.supports(bits, bl) {
                    continue;
                }
                // Large blocks: 4-bit on every layout, 2/8-bit on the first that holds them (time).
                let mut ran = 0;
                for layout in &layouts {
                    if bl >= 1024 && bits != 4 && ran > 0 {
                        break;
                    }
                    let k = if bl >= 4096 { bl + 5 } else { [bl + 5, 2 * bl][rng.below(2) as usize] };
                    let zp = [ZpKind::Packed, ZpKind::Float, ZpKind::None][rng.below(3) as usize];
                    let n = if bl >= 4096 { 3 } else { layout.nr + 1 };
                    let case = Case::random(&mut rng, k, n, bits, bl, zp, GIdx::None, true);
                    let case = case_for(uk, layout, case);
                    let Ok(sel) = Selected::single(uk, *layout, &Problem::of(uk.path(), &case.weights())) else {
                        continue;
                    };
                    let m = if bl >= 4096 { 2 } else { MS[rng.below(MS.len() as u64) as usize].min(9) };
                    check(&sel, &case, m, &mut rng);
                    ran += 1;
                }
                assert!(ran > 0, "{} claims bits={bits} bl={bl} but none of its layouts holds it", uk.name());
            }
        }
    }
}

/// MLAS's sweep (test_sqnbitgemm.cpp): cubes 1..15, (1, b, 32), and the odd large shapes; on each kernel's first
/// layout.
#[test]
fn mlas_shapes() {
    for uk in kernels() {
        let mut rng = Rng::for_kernel(3, uk.name());
        let layout = layouts_of(uk)[0];
        let run = |rng: &mut Rng, m, n, k, bl, zp, bias| {
            let case = case_for(uk, &layout, Case::random(rng, k, n, 4, bl, zp, GIdx::None, bias));
            let sel = Selected::single(uk, layout, &Problem::of(uk.path(), &case.weights())).unwrap();
            check(&sel, &case, m, rng);
        };
        for s in 1..=15 {
            run(&mut rng, s, s, s, 16, ZpKind::Packed, false);
        }
        for b in [1, 7, 33, 95] {
            run(&mut rng, 1, b, 32, 32, ZpKind::None, false);
        }
        for (m, n, k, bl) in [(43, 500, 401, 32), (1, 1027, 1031, 64), (11, 1027, 1031, 128)] {
            run(&mut rng, m, n, k, bl, ZpKind::Float, true);
        }
    }
}

/// Every family this CPU runs, as selected (GEMV for small M, GEMM beyond), over the whole M range, tiled: N = 150
/// (two 64-column panels and a tail, or many narrower ones), K = 160 (5 blocks of 32, 2½ of 64).
#[test]
fn every_family_tiles_correctly() {
    let mut rng = Rng::new(4);
    let ladder = registry::build_ladder(Cpu::get(), None, None).unwrap();
    let mut ran = 0;
    for f in registry::families() {
        let l = registry::build_ladder(Cpu::get(), None, Some(f.name()));
        let Ok(l) = l else {
            eprintln!("SKIP family {}: {}", f.name(), l.unwrap_err());
            continue;
        };
        for (zp, bits, bl) in
            [(ZpKind::Packed, 4, 32), (ZpKind::None, 4, 64), (ZpKind::Float, 8, 32), (ZpKind::Packed, 2, 32)]
        {
            let case = Case::random(&mut rng, 160, 150, bits, bl, zp, GIdx::None, true);
            let p = Problem::of(f.path(), &case.weights());
            let sel = l.select(&p).unwrap();
            assert_eq!(sel.name(), f.name());
            for m in [1usize, 2, 3, 4, 5, 7, 9, 33, 67] {
                check(&sel, &case, m, &mut rng);
                if f.path() == ComputePath::Int8 && m % 2 == 1 {
                    check(&sel.with_activation_quant(ActQuant::Row), &case, m, &mut rng);
                }
            }
            ran += 1;
        }
    }
    assert!(ran > 0);
    // What the provider gets by default: the best family of each path.
    for path in [ComputePath::Fp32, ComputePath::Int8] {
        let p = Problem::new(path, 4, 32, true);
        let sel = ladder.select(&p).unwrap();
        let best = registry::families()
            .iter()
            .find(|f| f.ranked_for(ladder.cpu(), &p) && f.why_not(ladder.cpu(), &p).is_none())
            .unwrap();
        assert_eq!(sel.name(), best.name());
    }
}

/// The SIMD GEMM kernels over tiles of many rows, where the x86 fp32 GEMMs switch from codes in registers to a
/// dequantized weight piece (at 32 rows on AVX-512, 8 on AVX2, in pieces of up to 1024 K values spread evenly over
/// whole blocks, row blocks of up to 12 (AVX-512) or 6 (AVX2) rows as equal as the tile's rows allow): M across the switch and the row blocks (tiles of
/// up to 66 rows where a call has few column tiles: M = 67 leaves a 1-row tile, M = 98 a 32-row one; tiles of
/// 258 rows where it has many: M = 300 at N = 520), K across whole pieces, inside one block and over many blocks,
/// with tails; N tails inside a panel and past one; every block size the pieces meet (16: 17 blocks in one
/// piece; 32 at K = 2100: pieces of 22 blocks and a tail; 2048: two pieces per block), every zero-point kind,
/// bias on and off; and f16 A. The AMX GEMM's row tiles of 32 meet full tiles, tails of one 16-row half (M = 33,
/// 67, 98) and of two (50), and K = 1024 in blocks of 32 (rows the packer pads to an odd line stride).
///
/// x86_64 only: the sweep is for the x86 GEMMs (the dequantizing one above all); the aarch64 GEMMs get the
/// edge-case taxonomy and `every_family_tiles_correctly`, and under qemu this sweep alone took ~6 min per CPU model.
#[cfg(target_arch = "x86_64")]
#[test]
fn gemm_row_blocks_and_k_pieces() {
    let cpu = Cpu::get();
    for uk in kernels() {
        let layout = layouts_of(uk)[0];
        if uk.geometry(cpu, &layout).max_m == 1 || uk.isa() == nibble_kernels::Isa::Portable {
            continue; // GEMV kernels; the portable GEMMs (one row loop, no row blocks) are the suite's reference
        }
        let mut rng = Rng::for_kernel(10, uk.name());
        let mut n_cases = 0;
        for (bl, k) in [
            (16, 272),
            (32, 256),
            (32, 1024),
            (32, 2100),
            (64, 600),
            (128, 1029),
            (256, 250),
            (512, 1029),
            (2048, 2100),
        ] {
            for zp in [ZpKind::None, ZpKind::Packed, ZpKind::Float] {
                let bits = [4u32, 2, 8][n_cases % 3];
                let n = [33, 64, 129, 95][n_cases % 4];
                let case = Case::random(&mut rng, k, n, bits, bl, zp, GIdx::None, n_cases % 2 == 0);
                let case = case_for(uk, &layout, case);
                let Ok(sel) = Selected::single(uk, layout, &Problem::of(uk.path(), &case.weights())) else {
                    continue;
                };
                for m in [7usize, 8, 31, 32, 33, 50, 67, 98] {
                    check(&sel, &case, m, &mut rng);
                }
                n_cases += 1;
            }
        }
        assert!(n_cases > 0, "{}: no case ran", uk.name());
        // Tall tiles: enough column tiles that 300 rows stay in tiles of up to 258 (and 130 rows are halved).
        let case = case_for(uk, &layout, Case::random(&mut rng, 600, 520, 4, 32, ZpKind::Packed, GIdx::None, true));
        if let Ok(sel) = Selected::single(uk, layout, &Problem::of(uk.path(), &case.weights())) {
            for m in [130usize, 300] {
                check(&sel, &case, m, &mut rng);
            }
        }
        // Wide tasks (an LM head's N): kernels that do per-task work on the rows (`min_task_cols`) get tasks of
        // more than 512 columns here, which the AMX fp32 GEMM walks in groups of units, K in two pieces (x86 only:
        // its 400 M multiply-adds and their f64 reference would take minutes under qemu).
        if cfg!(target_arch = "x86_64") && uk.geometry(cpu, &layout).min_task_cols > 0 {
            let case = Case::random(&mut rng, 600, 17000, 4, 32, ZpKind::Float, GIdx::None, true);
            let case = case_for(uk, &layout, case);
            if let Ok(sel) = Selected::single(uk, layout, &Problem::of(uk.path(), &case.weights())) {
                check(&sel, &case, 40, &mut rng);
            }
        }
    }
}

/// The fp32 path computes with f32 precision, not just within the quantization noise: every product positive
/// (activations in [1, 2) with all 24 significant bits random, codes above the zero point, positive scales), so
/// nothing cancels and a kernel that kept fewer bits of A or of its sums (e.g. A in bf16, or two bf16 parts of
/// it: 16 bits, ~8e−6 of each product on average) is off by more than f32 summation's rounding. Every fp32-path
/// kernel this CPU runs, M in the GEMV and GEMM ranges, K of 1024 and 4096 in blocks of 32 and 128, and with
/// zero points no kernel folds into its codes (float ½: the corrections' path), 4- and 8-bit.
#[test]
fn fp32_path_keeps_f32_precision() {
    let cpu = Cpu::get();
    let mut n_cases = 0;
    for uk in kernels().into_iter().filter(|uk| uk.path() == ComputePath::Fp32) {
        let layout = layouts_of(uk)[0];
        let mut rng = Rng::for_kernel(12, uk.name());
        for (k, bl, bits, zp) in [
            (1024usize, 32usize, 4u32, ZpKind::None),
            (4096, 128, 4, ZpKind::None),
            (1024, 32, 4, ZpKind::Float),
            (1024, 64, 8, ZpKind::Float),
        ] {
            let mut case = Case::random(&mut rng, k, 96, bits, bl, zp, GIdx::None, false);
            // Every q − z ≥ ½: without zero points codes 9 … 15 (z = 8) in both nibbles; with float zero points of
            // ½ (which no kernel can fold into integer codes) codes ≥ 1. Positive scales.
            match (bits, zp) {
                (4, ZpKind::None) => case.b.iter_mut().for_each(|v| *v = (9 + *v % 7) | ((9 + (*v / 16) % 7) << 4)),
                (4, _) => case.b.iter_mut().for_each(|v| *v = (1 + *v % 15) | ((1 + (*v / 16) % 15) << 4)),
                _ => case.b.iter_mut().for_each(|v| *v = 1 + *v % 255),
            }
            case.zp_float.iter_mut().for_each(|z| *z = 0.5);
            case.scales.iter_mut().for_each(|s| *s = s.abs());
            let case = case_for(uk, &layout, case);
            let w = case.weights();
            let Ok(sel) = Selected::single(uk, layout, &Problem::of(uk.path(), &w)) else { continue };
            let max_m = uk.geometry(cpu, &layout).max_m;
            for m in [1usize, 40, 130].into_iter().filter(|&m| m <= max_m) {
                let a: Vec<f32> = (0..m * k).map(|_| 1.0 + rng.f32(0.0, 1.0)).collect();
                let rhs = sel.pack_rhs(&w).unwrap();
                let mut out = vec![f32::NAN; m * 96];
                matmul_serial(&sel, &rhs, LhsSource::F32(&a), m, None, &mut out);
                let eff = case.with_scales(layout.scales);
                let wd = nibble_kernels::reference::dequantize(&eff.weights());
                let exact = nibble_kernels::reference::matmul_dequantized(&a, m, &wd, 96, k, None);
                // f32 sums of up to K positive terms, each weight rounded once: measured 3e−7 … 2.2e−6 on x86 (the
                // portable kernel's serial sum the largest); two bf16 parts of A give 7e−6.
                let worst = out.iter().zip(&exact).map(|(&g, &e)| ((g as f64 - e) / e).abs()).fold(0f64, f64::max);
                // The bound grows with K where serial sums do (aarch64's NEON GEMM: 4.6e−6 at K = 4096); two bf16
                // parts of A are off by ~7e−6 at any K, so K = 1024 catches them.
                let bound = if k <= 1024 { 4e-6 } else { 1e-5 };
                assert!(
                    worst <= bound,
                    "{} M={m} K={k} bl={bl} bits={bits} zp={zp:?}: relative error {worst:e} > {bound:e} (f32 precision)",
                    uk.name()
                );
                n_cases += 1;
            }
        }
    }
    assert!(n_cases > 0, "no fp32-path kernel ran");
}

/// f16 A costs a conversion, not a different kernel: bit-identical results to f32 A in the GEMM range, on both
/// paths' default families.
#[test]
fn f16_activations_match_f32_in_the_gemm_range() {
    let mut rng = Rng::new(11);
    let case = Case::random(&mut rng, 600, 129, 4, 64, ZpKind::Packed, GIdx::None, true);
    let w = case.weights();
    for path in [ComputePath::Fp32, ComputePath::Int8] {
        let sel = registry::select(&Problem::of(path, &w)).unwrap();
        let rhs = sel.pack_rhs(&w).unwrap();
        for m in [9usize, 40] {
            let a16: Vec<half::f16> = activations(&mut rng, m, 600).into_iter().map(half::f16::from_f32).collect();
            let a32: Vec<f32> = a16.iter().map(|x| x.to_f32()).collect();
            let (mut y16, mut y32) = (vec![0f32; m * 129], vec![1f32; m * 129]);
            matmul_serial(&sel, &rhs, LhsSource::F16(&a16), m, case.bias.as_deref(), &mut y16);
            matmul_serial(&sel, &rhs, LhsSource::F32(&a32), m, case.bias.as_deref(), &mut y32);
            assert_eq!(y16, y32, "{} M={m}", sel.name());
        }
    }
}

/// Packing is a function of (weights, layout): every layout unpacks to the source weights (codes exactly,
/// scales as the scale type rounds them, zero points exactly or through the correction term, block sums).
#[test]
fn every_layout_unpacks_to_the_source() {
    let mut rng = Rng::new(10);
    let mut all: Vec<RhsLayout> = registry::families().iter().map(|f| f.layout(Cpu::get())).chain(variety()).collect();
    all.dedup();
    for layout in all {
        for bits in [2u32, 4, 8] {
            for bl in [16usize, 32, 128] {
                if !layout.holds_blocks(bits, bl) {
                    continue;
                }
                for (zp, g) in
                    [(ZpKind::None, GIdx::None), (ZpKind::Packed, GIdx::None), (ZpKind::Float, GIdx::Shuffled)]
                {
                    if zp != ZpKind::None && layout.zero_points == ZpStorage::None {
                        continue;
                    }
                    let case = Case::random(&mut rng, 2 * bl + 3, 2 * layout.nr + 1, bits, bl, zp, g, false);
                    let w = case.weights();
                    let rhs = nibble_kernels::PackedRhs::pack(&w, layout).unwrap();
                    let what = format!("{layout} bits={bits} bl={bl} zp={zp:?} g_idx={g:?}");
                    let p = w.params;
                    let kmap: Vec<Option<usize>> = match rhs.k_map() {
                        Some(m) => {
                            m.iter().map(|&s| (s != nibble_kernels::pack::NO_SOURCE).then_some(s as usize)).collect()
                        }
                        None => (0..rhs.k_packed()).map(|k| (k < p.k).then_some(k)).collect(),
                    };
                    for n in 0..p.n {
                        for vb in 0..rhs.blocks() {
                            let mut sum = 0i32;
                            let mut src_blk = None;
                            for o in 0..bl {
                                let kk = vb * bl + o;
                                let v = rhs.value_at(n, kk);
                                sum += v;
                                let Some(k) = kmap[kk] else {
                                    assert_eq!(v, 0, "{what}: pad position ({n},{kk}) must hold v = 0");
                                    continue;
                                };
                                assert_eq!(rhs.code_at(n, kk), w.code(n, k), "{what}: code ({n},{k})");
                                src_blk = Some(w.block_of(k));
                                let s = layout.scales.round(w.scale(n, w.block_of(k))) as f64;
                                let want = (w.code(n, k) as f64 - w.zero_point(n, w.block_of(k)) as f64) * s;
                                let got = rhs.weight_at(n, kk);
                                // f32 rounding of v·s + c: a few ulps of (2^bits · s).
                                let tol = 1e-6 * (1u32 << bits) as f64 * s.abs();
                                assert!((got - want).abs() <= tol, "{what}: w({n},{k}) {got} vs {want}");
                            }
                            if let Some(b) = src_blk {
                                assert_eq!(rhs.scale_at(n, vb), layout.scales.round(w.scale(n, b)), "{what}: scale");
                                let z = rhs.zero_point_at(n, vb);
                                assert!((z - w.zero_point(n, b)).abs() <= 1e-3, "{what}: zero point {z}");
                            }
                            if layout.block_sums {
                                assert_eq!(rhs.block_sum_at(n, vb), Some(sum), "{what}: block sum ({n},{vb})");
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Every LHS format holds the same quantized numbers, and pads interleaved groups with zeros.
#[test]
fn every_lhs_format_unpacks_to_the_same_numbers() {
    let mut rng = Rng::new(11);
    let case = Case::random(&mut rng, 93, 5, 4, 32, ZpKind::None, GIdx::Shuffled, false);
    let rhs = nibble_kernels::PackedRhs::pack(&case.weights(), RhsLayout::plain(8, 4)).unwrap();
    let m = 7;
    let a = activations(&mut rng, m, 93);
    let base = nibble_kernels::PackedLhs::pack(LhsSource::F32(&a), m, &rhs, LhsFormat::Qsi8Db);
    for f in [LhsFormat::Qsu8Db, LhsFormat::Qsi8DbP { mr: 4, kr: 8 }, LhsFormat::Qsi8DbP { mr: 2, kr: 4 }] {
        let other = nibble_kernels::PackedLhs::pack(LhsSource::F32(&a), m, &rhs, f);
        for r in 0..m {
            for b in 0..rhs.blocks() {
                assert_eq!(base.block_at(r, b), other.block_at(r, b), "{}", f.name());
            }
            for kk in 0..rhs.k_packed() {
                assert_eq!(base.q_at(r, kk), other.q_at(r, kk), "{} row {r} k {kk}", f.name());
            }
        }
        if f.mr() > 1 {
            for kk in 0..rhs.k_packed() {
                assert_eq!(other.q_at(m.next_multiple_of(f.mr()) - 1, kk), 0, "padding rows are zero");
            }
        }
    }
}

#[test]
fn f16_activations_equal_their_f32_values() {
    let mut rng = Rng::new(5);
    let case = Case::random(&mut rng, 93, 21, 4, 32, ZpKind::Packed, GIdx::Shuffled, true);
    let w = case.weights();
    for path in [ComputePath::Fp32, ComputePath::Int8] {
        let sel = registry::select(&Problem::of(path, &w)).unwrap();
        let rhs = sel.pack_rhs(&w).unwrap();
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
    let sel = registry::select(&Problem::of(ComputePath::Fp32, &case.weights())).unwrap();
    let rhs = sel.pack_rhs(&case.weights()).unwrap();
    let a = activations(&mut rng, 1, 32);
    let lhs = sel.pack_lhs(LhsSource::F32(&a), 1, &rhs);
    let mut out = vec![0f32; 8];
    let tiles = nibble_kernels::OutTiles::new(&mut out, sel.plan(1, &rhs));
    sel.run_tile(&lhs, &rhs, None, &tiles, 0);
    sel.run_tile(&lhs, &rhs, None, &tiles, 0);
}

/// Activations packed in another kernel's format are refused, not misread.
#[test]
#[should_panic(expected = "activations packed as")]
fn lhs_in_the_wrong_format_is_refused() {
    let mut rng = Rng::new(12);
    let case = Case::random(&mut rng, 64, 8, 4, 32, ZpKind::None, GIdx::None, false);
    let sel = registry::select(&Problem::of(ComputePath::Int8, &case.weights())).unwrap();
    let rhs = sel.pack_rhs(&case.weights()).unwrap();
    let a = activations(&mut rng, 1, 64);
    let lhs = nibble_kernels::PackedLhs::pack(LhsSource::F32(&a), 1, &rhs, LhsFormat::F32);
    let mut out = vec![0f32; 8];
    let tiles = nibble_kernels::OutTiles::new(&mut out, sel.plan(1, &rhs));
    sel.run_tile(&lhs, &rhs, None, &tiles, 0);
}

/// A family refuses weights its layout cannot hold instead of packing them wrong.
#[test]
fn pack_refuses_what_a_family_cannot_hold() {
    let mut rng = Rng::new(13);
    let case = Case::random(&mut rng, 64, 8, 2, 16, ZpKind::Packed, GIdx::None, false);
    let f = registry::families()
        .iter()
        .find(|f| f.layout(Cpu::get()).kr == 8 && f.gemm().runs_on(Cpu::get()))
        .expect("a kr=8 family this CPU runs (the portable one at least)");
    let sel = Selected::single(f.gemm(), f.layout(Cpu::get()), &Problem::new(f.path(), 4, 32, true)).unwrap();
    let e = sel.pack_rhs(&case.weights()).unwrap_err();
    assert!(e.0.contains("cannot hold bits=2"), "{e}");
}

proptest! {
    // A fixed seed: the same 48 cases on every machine and run (PROPTEST_* in the environment cannot change them);
    // change the seed here to explore others.
    #![proptest_config(ProptestConfig {
        cases: 48,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x6e69_6262_6c65),
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_shapes_match_reference(
        seed in any::<u64>(),
        m in 1usize..10,
        n in 1usize..70,
        k in 1usize..300,
        bits_i in 0usize..3,
        bl_log in 4u32..9,
        zp_i in 0usize..3,
        g_i in 0usize..4,
        bias in any::<bool>(),
        layout_i in any::<usize>(),
        row in any::<bool>(),
    ) {
        let bits = [2u32, 4, 8][bits_i];
        let bl = 1usize << bl_log;
        let zp = [ZpKind::None, ZpKind::Packed, ZpKind::Float][zp_i];
        let g = [GIdx::None, GIdx::Trivial, GIdx::Shuffled, GIdx::Random][g_i];
        let mut rng = Rng::new(seed);
        let case = Case::random(&mut rng, k, n, bits, bl, zp, g, bias);
        for uk in kernels() {
            let layouts = layouts_of(uk);
            let layout = layouts[layout_i % layouts.len()];
            let case = case_for(uk, &layout, case.clone());
            if let Ok(sel) = Selected::single(uk, layout, &Problem::of(uk.path(), &case.weights())) {
                let act = if row { ActQuant::Row } else { ActQuant::Block };
                check(&sel.with_activation_quant(act), &case, m, &mut rng);
            }
        }
    }
}

/// Found by the kernels fuzz target (`fuzz/corpus/kernels/crash-6d5374e2…`): in the row numerics a short K in a long
/// block (K = 1, blocks of 512) leaves 511 packed positions that hold q = z against the model's don't-care codes;
/// with each row's one real code at its zero point (w = 0) the exact output is 0, and all that remains is the
/// kernel's f32 rounding of those cancelling terms, which the tolerance must count. Every int8 kernel, on each of
/// its layouts, every bit width.
#[test]
fn row_numerics_with_a_long_k_tail_of_garbage_codes() {
    for uk in kernels().into_iter().filter(|uk| uk.path() == ComputePath::Int8) {
        let mut rng = Rng::for_kernel(11, uk.name());
        for layout in layouts_of(uk) {
            for bits in [2u32, 4, 8] {
                let mut case = Case::random(&mut rng, 1, 22, bits, 512, ZpKind::Packed, GIdx::Trivial, false);
                let p = case.params;
                for n in 0..p.n {
                    let zp = case.zp_packed[n * p.zp_row_bytes()] & p.max_code();
                    let b0 = &mut case.b[n * p.k_blocks() * p.blob_size()];
                    *b0 = (*b0 & !p.max_code()) | zp;
                }
                let case = case_for(uk, &layout, case);
                let Ok(sel) = Selected::single(uk, layout, &Problem::of(uk.path(), &case.weights())) else {
                    continue;
                };
                check(&sel.with_activation_quant(ActQuant::Row), &case, 14, &mut rng);
            }
        }
    }
}

/// A NaN in A must reach the output rows it feeds (as f32 arithmetic would), on every family, and only those rows
/// (M = 40: the GEMMs that take tall tiles only, e.g. the AMX ones).
#[test]
fn nan_activations_propagate() {
    let mut rng = Rng::new(7);
    let case = Case::random(&mut rng, 93, 21, 4, 32, ZpKind::Packed, GIdx::None, true);
    let w = case.weights();
    for f in registry::families() {
        let Ok(l) = registry::build_ladder(Cpu::get(), None, Some(f.name())) else { continue };
        let sel = l.select(&Problem::of(f.path(), &w)).unwrap();
        let rhs = sel.pack_rhs(&w).unwrap();
        for (m, act) in
            [(3, ActQuant::Block), (5, ActQuant::Block), (40, ActQuant::Block), (3, ActQuant::Row), (5, ActQuant::Row)]
        {
            let sel = sel.with_activation_quant(act);
            let mut a = activations(&mut rng, m, 93);
            a[93 + 40] = f32::NAN; // row 1
            let mut out = vec![0f32; m * 21];
            matmul_serial(&sel, &rhs, LhsSource::F32(&a), m, case.bias.as_deref(), &mut out);
            let name = format!("{} act={act}", f.name());
            assert!(out[21..42].iter().all(|y| y.is_nan()), "{name}: row 1 should be NaN");
            assert!(out[..21].iter().chain(&out[42..]).all(|y| y.is_finite()), "{name}: other rows finite");
        }
    }
}

/// Integer sums at their extremes: the largest block size, every code at its maximum, every activation at ±amax
/// (q = ±127), no zero point subtraction (zp = 0). Nothing may overflow in any family.
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
            let want = sign as f64 * p.max_code() as f64 * bl as f64;
            for f in registry::families() {
                let Ok(l) = registry::build_ladder(Cpu::get(), None, Some(f.name())) else { continue };
                let sel = l.select(&Problem::of(f.path(), &w)).unwrap();
                let rhs = sel.pack_rhs(&w).unwrap();
                for (m, act) in [(1, ActQuant::Block), (5, ActQuant::Block), (1, ActQuant::Row), (5, ActQuant::Row)] {
                    let sel = sel.with_activation_quant(act);
                    let a = vec![sign; m * bl];
                    let mut out = vec![0f32; m * 3];
                    matmul_serial(&sel, &rhs, LhsSource::F32(&a), m, None, &mut out);
                    for &y in &out {
                        assert!(
                            (y as f64 - want).abs() <= want.abs() * 1e-6,
                            "bits={bits} {} act={act}: {y} vs {want}",
                            f.name()
                        );
                    }
                }
            }
        }
    }
}

/// The safe API refuses activations that do not cover the plan instead of reading past them.
#[test]
#[should_panic(expected = "activations")]
fn short_activations_are_refused() {
    let mut rng = Rng::new(8);
    let case = Case::random(&mut rng, 64, 8, 4, 32, ZpKind::None, GIdx::None, false);
    let sel = registry::select(&Problem::of(ComputePath::Fp32, &case.weights())).unwrap();
    let rhs = sel.pack_rhs(&case.weights()).unwrap();
    let a = activations(&mut rng, 2, 64);
    let lhs = sel.pack_lhs(LhsSource::F32(&a), 2, &rhs);
    let plan = sel.plan(64, &rhs);
    let mut out = vec![0f32; 64 * 8];
    let tiles = nibble_kernels::OutTiles::new(&mut out, plan);
    sel.run_tile(&lhs, &rhs, None, &tiles, 0);
}

/// A parallel-for that spreads `tiles` over 4 threads (tile t on thread t % 4).
fn four_threads(tiles: usize, job: &(dyn Fn(usize) + Sync)) -> Result<(), ()> {
    std::thread::scope(|s| {
        for i in 0..4 {
            s.spawn(move || (i..tiles).step_by(4).for_each(job));
        }
    });
    Ok(())
}

/// Tiles computed concurrently from several threads give the serial result, bit for bit, in every family. N is
/// wide enough for several tiles in every geometry (the SME2 fp32 GEMM takes at least 512 columns per task).
/// With f16 A and an f16 output (`matmul_f16`: each task rounds its own tiles from the thread's f32 scratch), the
/// output is the serial f32 result rounded to f16, at two M, so the second call reuses the scratch with the first
/// call's values in it.
#[test]
fn tiles_run_concurrently() {
    let mut rng = Rng::new(9);
    let (k, n) = (100, 2049);
    let case = Case::random(&mut rng, k, n, 4, 32, ZpKind::Packed, GIdx::None, true);
    let w = case.weights();
    for f in registry::families() {
        let Ok(l) = registry::build_ladder(Cpu::get(), None, Some(f.name())) else { continue };
        let sel = l.select(&Problem::of(f.path(), &w)).unwrap();
        let rhs = sel.pack_rhs(&w).unwrap();
        let m = 37;
        let a = activations(&mut rng, m, k);
        let mut serial = vec![0f32; m * n];
        matmul_serial(&sel, &rhs, LhsSource::F32(&a), m, case.bias.as_deref(), &mut serial);
        let mut parallel = vec![f32::NAN; m * n];
        sel.matmul(&rhs, LhsSource::F32(&a), m, case.bias.as_deref(), &mut parallel, |tiles, job| {
            assert!(tiles >= 4, "{}: want several tiles, got {tiles}", f.name());
            four_threads(tiles, job)
        })
        .unwrap();
        assert_eq!(serial, parallel, "{}", f.name());
        for m in [37, 5] {
            let a16: Vec<half::f16> = activations(&mut rng, m, k).into_iter().map(half::f16::from_f32).collect();
            let mut y32 = vec![0f32; m * n];
            matmul_serial(&sel, &rhs, LhsSource::F16(&a16), m, case.bias.as_deref(), &mut y32);
            let want: Vec<u16> = y32.iter().map(|&x| half::f16::from_f32(x).to_bits()).collect();
            let mut y16 = vec![half::f16::NAN; m * n];
            sel.matmul_f16(&rhs, LhsSource::F16(&a16), m, case.bias.as_deref(), &mut y16, four_threads).unwrap();
            let got: Vec<u16> = y16.iter().map(|x| x.to_bits()).collect();
            assert_eq!(got, want, "{} f16 output, M={m}", f.name());
        }
    }
}
