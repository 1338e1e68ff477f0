//! When nibble steps aside: the decision table, per CPU class, of the `com.microsoft::MatMulNBits` nodes whose
//! own ONNX Runtime kernel is faster than every nibble family this CPU runs. The provider leaves those nodes to
//! ORT (the EP declines them; the custom-op frontend does not replace `com.microsoft` at all on such a CPU, since a
//! custom-op domain replaces the op for every node) and says why in its log line. Nodes in the `nibble` domain,
//! `NIBBLE_FAMILIES` and an explicit `nibble.override_com_microsoft=1` still run nibble.
//!
//! What ORT runs on each CPU (onnxruntime/core/mlas/lib/kleidiai/qnbitgemm_kleidiai.cpp): KleidiAI's kernels, for
//! 4-bit weights at accuracy_level 4 (CompInt8) only, block 32/64/128/256, K a multiple of the block; symmetric
//! weights since ORT 1.22 (activations per row, `qai8dxp`), weights with zero points since ORT 1.28 (activations
//! per block of 32, `qsi8d32p`). Each has an SME2 tier (`…_1vlx4vl_sme2_mopa` for M > 1, `…_1x4vl_sme2_dot` /
//! `…_sme2_sdot` for M = 1), chosen on CPUs with SME2 (ORT's cpuinfo, like nibble, reads HWCAP2_SME2).
//!
//! | CPU class | nodes ORT runs faster | measured (instructions per Run, nibble / ORT 1.31.1, 1 thread) |
//! |---|---|---|
//! | aarch64 with SME2, a streaming vector of 256 or 512 bits | none | the SME2 family (ranked first there: `registry::sme2_int8_ranked`), qemu 11 `-cpu max` and `sme-default-vector-length=64`, 2048², 1 thread, counted from qemu's exec log (bench/results/aarch64-icount-sme2.md): M = 1 (multi-vector SDOT GEMV) 0.74–0.79x (blocks of 32–128, zero points included); M = 32 and 128 (SMOPA GEMM, block numerics) 0.76–0.77x; M = 2–16 with blocks of 32, 64 and 128 (the few-row SDOT kernel or the SMOPA passes, whichever counted fewer) 0.53–0.99x at SVL 256 and 0.65–0.99x at SVL 512 (there the few-row kernel's passes of exactly 5–10 rows: M = 5 was 1.003x in blocks of 128 as 3 + 2 rows, M = 9–10 1.04x in blocks of 64 as 8 + 1–2); zero points 0.55–0.78x at M = 2–10 and 0.63x at M = 32; row numerics 0.68–0.95x at M = 1–16 and 0.66–0.72x at M = 32 (since their tile epilogue runs in streaming SVE and the SMOPA passes take over from 9–10 rows at SVL 512; before, 1.06–1.09x at M = 9–10 in blocks of 64 at SVL 512). Claimed (a node is judged by its decode cost, below) |
//! | aarch64 with SME2, a streaming vector of 128 or ≥ 1024 bits | the KleidiAI nodes above | nibble's SME2 GEMV and few-row kernel have asm only at 256 and 512 bits (the family is not ranked at other lengths); its SVE i8mm family executes 2.45x ORT's instructions at M = 1 and 2.0–2.1x at M = 32–128 under qemu 11 `-cpu max`. Declined |
//! | aarch64 SVE i8mm, vectors ≥ 256 bits (Graviton3) | none | SVE i8mm family (qemu 7.2 `max,sve-default-vector-length=32,sme=off`, 2048² and 4096², bs32, counted 2026-12-05 and, M ≥ 16, 2026-12-06 after the 12-row tiles): M = 1 0.50–0.55x (2026-12-06 evening, both numerics, zero points included); M = 4 0.76–0.78x (NEON one-group tile, 2026-12-03); M = 16 0.61x, M = 28 0.51x; M = 32, 128 per-block 0.54–0.56x, row 0.48–0.51x, zero points 0.40–0.47x; bs128 0.46–0.53x (bench/results/aarch64-icount.md) |
//! | aarch64 i8mm | none | M = 1 0.67–0.70x; M = 4 0.78x (row 0.71x); M = 32–128 sym 0.88–0.89x (row 0.76–0.79x, bs128 0.82–0.83x), zp 0.70–0.73x; SmolLM2-135M 64-token prefill 0.949x (sym), 0.768x (zp), decode step 0.83x / 0.73x (bench/results/aarch64-icount.md): claimed |
//! | aarch64 dotprod | none | M = 1 0.68–0.70x; M = 4 0.80x (row 0.75x, zp 0.74x); M = 32–128 sym 0.95x (row 0.87x, bs128 0.89x), zp 0.79x; SmolLM2-135M 64-token prefill 0.968x (sym), 0.804x (zp), decode step 0.84x / 0.73x (bench/results/aarch64-icount.md): claimed |
//! | aarch64 base NEON (Cortex-A72 class; ORT runs MLAS without SDOT) | none | M = 1 0.12x, M = 4 0.30x, M = 32 0.67x, M = 128 0.78x (row 0.64–0.74x) |
//! | aarch64, fp32 path (accuracy_level 1–3; every NEON CPU) | none | M = 1 0.44–0.45x, M = 4–128 0.79–0.96x (the GEMM dequantizes each panel once per task; it took 1.85x at M = 32 before, bench/results/aarch64-icount.md); SVE vectors ≥ 256 bits, the SVE fp32 family: M = 4–128 0.45–0.54x; SME2 at a 256- or 512-bit streaming vector, with or without SVE (ORT runs NEON on this path there), the SME2 fp32 family (FMOPA): M = 32 0.14x, M = 128 0.11x at 256 bits, 0.09x and 0.05x at 512 (Apple M4's shape, qemu 11 `max,sve=off,sme-default-vector-length=64`; bench/results/aarch64-icount-sme2.md). The EP takes these nodes on SME2 CPUs; the custom-op frontend, which leaves the whole domain to ORT where the SME2 int8 family is not ranked, does not there |
//! | x86_64 with AMX (AMX-INT8, AMX-BF16: Sapphire Rapids and later) | none | Intel Xeon family 6 model 207, 2026-12-06 (bench/results/x86-kernels.md, time ratio ORT / nibble, 1 and 2 threads, f32 / f16 A): int8 path M = 1 1.23–2.38x at block 32; at block 128 with uint8 zero points 0.95–1.57x (median 1.10): below 1.0 only on the shapes whose weights are too big for L2 (L3.2-1B gate/up and down 0.95–0.98, L3-8B q/o 0.97 with f16 A, L3-8B gate/up 0.99 in one session's two runs; 0.92–1.20x on the same shapes in a later run, bench/results/x86-kernels/intel-amx-2026-12-06-decode-zp), where both run at the cache's read bandwidth and nibble's layout reads ~3–5% more bytes per block (an f32 zero-point correction against ORT's packed 4-bit zero point); M = 128 3.0–6.3x (f16 A at block 128 2.9–6.2x, since its F16C conversions and per-tile rounding); fp32 path (AMX-BF16, activations split exactly into bf16 parts) M = 1 1.23–2.1x, M = 16–512 1.5–3.3x with f32 or f16 A. Claimed: the decode cells below 1.0 are within 5% on 2 of 10 shapes at one block size every prefill cell 1.5–6.3x; the fix is a layout with packed zero points for the decode GEMV |
//! | x86_64 with AVX-512 VNNI | none | 2.0–2.9x faster at M = 1 (bench/results/x86-kernels.md); fp32 path at M = 128 1.0–1.9x (Cascade Lake, Zen 4; 0.62–0.79x before the dequantizing FMA GEMM): claimed, decode faster |
//! | x86_64 with AVX2 only (Zen 2/3, older Intel) | none | Zen 3, 2026-11-26 (scalar activation quantizer, unit-walking GEMV): int8 GEMV from cache 1.05–1.72x ORT's speed, from DRAM 0.80–1.10x, SmolLM2 decode under onnxruntime-genai 0.83–0.96x. Zen 2, 2026-12-05 (AVX2 quantizer, panel-major GEMV): from DRAM 0.94–1.19x (medians 1.00–1.14x), SmolLM2 decode under onnxruntime-genai 1.01–1.07x with a shorter time to first token (bench/results/x86-avx2-decode-smollm2-shapes.md, bench/results/genai-decode-smollm2.md): claimed. Zen 3 not re-measured (issue 26) |
//!
//! A node is judged by its decode (M = 1) cost, which dominates generation: where nibble is faster at M = 1 and
//! slower at M = 32 it is claimed, and the prefill gap is the aarch64 prefill issue's to close.

use crate::cpu::{Cpu, Feature};

/// What the decision needs of a node: its attributes as ORT reads them (accuracy_level unset = 0) and whether
/// it has a zero-points input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeTraits {
    pub bits: i64,
    pub block_size: i64,
    pub k: i64,
    pub accuracy_level: i64,
    pub zero_points: bool,
}

/// ORT 1.MINOR from which its KleidiAI kernels (SME2 tier included) run symmetric 4-bit nodes.
pub const KLEIDIAI_SYMMETRIC_SINCE_MINOR: u32 = 22;
/// ORT 1.MINOR from which they also run 4-bit nodes with zero points (PR #29654).
pub const KLEIDIAI_ZERO_POINTS_SINCE_MINOR: u32 = 28;

/// Whether ORT 1.`ort_minor` runs `node` with KleidiAI's kernels on a CPU with the needed extensions (any
/// aarch64 one with dotprod): 4-bit, accuracy_level 4, block 32…256, K a multiple of the block.
pub fn ort_runs_kleidiai(node: &NodeTraits, ort_minor: u32) -> bool {
    let since = if node.zero_points { KLEIDIAI_ZERO_POINTS_SINCE_MINOR } else { KLEIDIAI_SYMMETRIC_SINCE_MINOR };
    node.bits == 4
        && node.accuracy_level == 4
        && matches!(node.block_size, 32 | 64 | 128 | 256)
        && node.k > 0
        && node.k % node.block_size == 0
        && ort_minor >= since
}

/// Whether this CPU belongs to a class where ORT has a kernel nibble cannot beat for some node (see the table):
/// the custom-op frontend, which cannot decline single nodes, leaves `com.microsoft` to ORT there.
pub fn ort_faster_somewhere(cpu: &Cpu, ort_minor: u32) -> Option<String> {
    ort_faster_somewhere_with(cpu, cpu, ort_minor)
}

/// [`ort_faster_somewhere`] where nibble's kernels may use only `kernels` (`cpu` capped by `NIBBLE_ISA`).
pub fn ort_faster_somewhere_with(cpu: &Cpu, kernels: &Cpu, ort_minor: u32) -> Option<String> {
    let any = NodeTraits { bits: 4, block_size: 32, k: 32, accuracy_level: 4, zero_points: false };
    ort_faster_with(cpu, kernels, &any, ort_minor)
}

/// `Some(reason)` when ORT 1.`ort_minor`'s own kernel for `node` is faster on `cpu` than every nibble family it
/// runs (the table above), worded for the log line after "left to ORT's own kernel: ".
pub fn ort_faster(cpu: &Cpu, node: &NodeTraits, ort_minor: u32) -> Option<String> {
    ort_faster_with(cpu, cpu, node, ort_minor)
}

/// [`ort_faster`] where nibble's kernels may use only `kernels` (`cpu` capped by `NIBBLE_ISA`): ORT runs what
/// `cpu` has, nibble what `kernels` has.
pub fn ort_faster_with(cpu: &Cpu, kernels: &Cpu, node: &NodeTraits, ort_minor: u32) -> Option<String> {
    if cpu.has(Feature::Sme2) && ort_runs_kleidiai(node, ort_minor) && !crate::registry::sme2_int8_ranked(kernels) {
        let (lhs, rhs) = if node.zero_points { ("qsi8d32p", "qai4c32p") } else { ("qai8dxp", "qsi4c32p") };
        let svl = cpu.sme_svl().map_or("unknown".to_string(), |b| format!("{} bits", 8 * b));
        let nibble = if kernels.has(Feature::Sme2) {
            "nibble's SME2 kernels are counted faster only at 256 and 512 bits"
        } else {
            "NIBBLE_ISA keeps nibble's kernels off SME2"
        };
        return Some(format!(
            "this CPU has SME2 ({cpu}) with a streaming vector of {svl}, where ONNX Runtime 1.{ort_minor} runs \
             4-bit accuracy_level-4 nodes with KleidiAI's SME2 kernels ({lhs}_{rhs} sme2_mopa for M > 1, sme2 dot \
             for M = 1); {nibble}"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::Features;

    fn node(bits: i64, block_size: i64, k: i64, accuracy_level: i64, zero_points: bool) -> NodeTraits {
        NodeTraits { bits, block_size, k, accuracy_level, zero_points }
    }

    #[test]
    fn sme2_declines_exactly_the_kleidiai_nodes() {
        let base = [Feature::Neon, Feature::Dotprod, Feature::I8mm, Feature::Sve, Feature::Sve2, Feature::Sme];
        let with_sme2 = Features::of(&[base.as_slice(), &[Feature::Sme2]].concat());
        // Streaming vectors of 128 and 1024 bits: nibble's SME2 GEMV has no asm there, ORT keeps the nodes.
        let sme2 = Cpu::with(with_sme2).with_vector_lengths(64, 16);
        let sme2_1024 = Cpu::with(with_sme2).with_vector_lengths(64, 128);
        // 256 and 512 bits: nibble's SME2 family is ranked and counted faster; nibble keeps every node.
        let sme2_256 = Cpu::with(with_sme2).with_vector_lengths(32, 32);
        let sme2_512 = Cpu::with(with_sme2).with_vector_lengths(64, 64);
        let sme1 = Cpu::with(Features::of(&base)).with_vector_lengths(64, 64);
        let i8mm = Cpu::with(Features::of(&[Feature::Neon, Feature::Dotprod, Feature::I8mm]));
        let x86 = Cpu::with(Features::of(&[Feature::Avx2, Feature::Fma, Feature::Avx512f, Feature::Avx512Vnni]));
        let sym = node(4, 32, 4096, 4, false);
        let why = ort_faster(&sme2, &sym, 31).expect("SME2 at 128 bits, ORT 1.31, sym 4-bit acc 4 bs 32: ORT's");
        assert!(why.contains("SME2") && why.contains("1.31") && why.contains("qai8dxp"), "{why}");
        assert!(why.contains("128 bits"), "{why}");
        assert!(ort_faster(&sme2_1024, &sym, 31).is_some_and(|w| w.contains("1024 bits")));
        for bs in [32, 64, 128, 256] {
            assert!(ort_faster(&sme2, &node(4, bs, 4096, 4, false), 24).is_some(), "bs {bs}");
            assert!(ort_faster(&sme2, &node(4, bs, 4096, 4, true), 28).is_some(), "zp bs {bs}");
            for cpu in [&sme2_256, &sme2_512] {
                assert!(ort_faster(cpu, &node(4, bs, 4096, 4, false), 31).is_none(), "{cpu} bs {bs}");
                assert!(ort_faster(cpu, &node(4, bs, 4096, 4, true), 31).is_none(), "{cpu} zp bs {bs}");
            }
        }
        // NIBBLE_ISA below SME2 on an SME2 CPU whose length nibble's SME2 family covers: ORT's kernels again.
        let capped = sme2_256.capped(crate::cpu::Isa::Sve);
        let why = ort_faster_with(&sme2_256, &capped, &sym, 31).expect("capped below SME2: ORT's");
        assert!(why.contains("NIBBLE_ISA"), "{why}");
        assert!(ort_faster_somewhere_with(&sme2_256, &capped, 31).is_some());
        assert!(ort_faster_with(&sme2_256, &sme2_256, &sym, 31).is_none());
        // Zero points: ORT's KleidiAI path only from 1.28; symmetric from 1.22.
        assert!(ort_faster(&sme2, &node(4, 32, 4096, 4, true), 27).is_none());
        assert!(ort_faster(&sme2, &node(4, 32, 4096, 4, false), 21).is_none());
        assert!(ort_faster(&sme2, &node(4, 32, 4096, 4, false), 22).is_some());
        // What ORT runs with its NEON/MLAS code stays nibble's: other bits, accuracy levels, block sizes, K tails.
        for other in [
            node(8, 32, 4096, 4, false),
            node(2, 32, 4096, 4, false),
            node(4, 32, 4096, 1, false),
            node(4, 32, 4096, 0, false),
            node(4, 16, 4096, 4, false),
            node(4, 512, 4096, 4, false),
            node(4, 32, 4100, 4, false),
            node(4, 32, 0, 4, false),
        ] {
            assert!(ort_faster(&sme2, &other, 31).is_none(), "{other:?}");
        }
        // Other CPU classes: nibble is faster at decode everywhere measured.
        for cpu in [sme1, i8mm, x86, sme2_256, sme2_512] {
            assert!(ort_faster(&cpu, &sym, 31).is_none(), "{cpu}");
            assert!(ort_faster_somewhere(&cpu, 31).is_none(), "{cpu}");
        }
        assert!(ort_faster_somewhere(&sme2, 31).is_some());
        assert!(ort_faster_somewhere(&sme2, 21).is_none());
    }
}
