"""Parity of nibble's MatMulNBits with ORT's built-in com.microsoft::MatMulNBits and with a float64 reference.

Every case builds one model per domain and runs all its A shapes (M ∈ {1, 2, 100} for 2-D A) through:
  - ORT's built-in kernel (a session without our library) on the com.microsoft model, where ORT is right
    (`ort_is_oracle`); that output is also checked against numpy, which validates the reference itself;
  - our kernel through the 'nibble' model and through the com.microsoft model (our library overrides it);
and compares with the tolerance of the computation paths involved (`tolerance`). The matrix mirrors ORT's
onnxruntime/test/contrib_ops/matmul_4bits_test.cc; the MLAS shapes come from test_sqnbitgemm.cpp.

The rest of the file tests session-level behaviour: the override switch, the accuracy_level default, concurrent
Run() calls, thread counts and graph optimization levels (including ORT's MatMulNBits + Add fusion).
"""

from __future__ import annotations

import functools
import itertools
import os
import warnings
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import platform

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import build_matmulnbits as bm
from conftest import ACCURACY_DEFAULT_KEY, ACT_QUANT_KEY, OVERRIDE_KEY

M_VALUES = (1, 2, 100)
ZP_KINDS = (None, "uint8", "float")

# ---------------------------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    group: str  # summary row
    N: int
    K: int
    block_size: int
    bits: int = 4
    zp: str | None = None  # None (symmetric, implicit zero points) | 'uint8' (packed) | 'float'
    accuracy_level: int | None = 0  # None: attribute omitted
    g_idx: str | None = None  # None | 'K' (length K) | 'padded' (length k_blocks · block_size)
    bias: bool = False
    dtype: str = "float32"
    legacy_1d: bool = False  # 1-D scales / zero points
    a_rank: int = 2

    @property
    def id(self) -> str:
        parts = [f"n{self.N}", f"k{self.K}", f"bs{self.block_size}", f"{self.bits}b", f"zp-{self.zp or 'none'}",
                 f"acc{'-unset' if self.accuracy_level is None else self.accuracy_level}"]
        flags = [f"gidx-{self.g_idx}" if self.g_idx else "", "bias" if self.bias else "",
                 "f16" if self.dtype == "float16" else "", "legacy1d" if self.legacy_1d else "",
                 f"rank{self.a_rank}" if self.a_rank != 2 else ""]
        return "-".join(parts + [f for f in flags if f])

    @property
    def weight_key(self) -> "Case":
        """The fields that decide weights and inputs: cases differing only in accuracy_level share them."""
        return replace(self, group="", accuracy_level=0)

    @property
    def symbolic_a_shape(self) -> list[int | str]:
        return {1: [self.K], 2: ["M", self.K], 3: ["batch", "M", self.K]}[self.a_rank]

    @property
    def run_shapes(self) -> list[tuple[int, ...]]:
        return {
            1: [(self.K,)],
            2: [(m, self.K) for m in M_VALUES],
            3: [(2, 3, self.K), (1, 1, self.K)],
        }[self.a_rank]


def ort_is_oracle(case: Case) -> bool:
    """Whether ORT 1.31.1's built-in CPU kernel computes `case` correctly, so its output is a valid oracle.

    Measured against the float64 reference (FACTS.md §1, research/ort.md §1); elsewhere numpy alone decides.
    """
    if case.block_size > 256:
        # MLAS supports block sizes 16..256 only: ORT 1.31.1 refuses larger ones at session creation
        # ("block_size_ == 16 || ... || block_size_ == 256 was false"); ORT 1.26 returned zeros (issue #28551).
        return False
    if case.g_idx and case.zp == "uint8":
        # Dequantize4BitsKernelReOrder computes the packed zero point but never uses it (8 instead).
        return False
    if case.g_idx and case.bits == 2:
        # Wrong results without / with packed zero points; "g_idx ... is not supported for 2-bit" with float ones.
        return False
    if case.bits == 8 and (case.g_idx or case.zp == "float"):
        # Run-time error "Only 2b and 4b quantization is supported for unpacked compute for now".
        return False
    return True


# (N, K, block_size) shapes for the variant groups: a partial last block (93, 1234), odd k_blocks (3, 39, 1),
# k_blocks not a multiple of 4 (2-bit zero-point packing), N = 1, a single block, block_size > K.
SUBSET = ((1, 16, 16), (2, 93, 32), (32, 1234, 16), (288, 93, 128),
          (288, 1024, 64), (32, 1024, 256), (288, 1234, 32), (1, 1234, 128))
SMALL_SUBSET = SUBSET[1:6]


def _grid(group: str, shapes, zps=ZP_KINDS, accs=(0, 1, 4), **fields) -> list[Case]:
    """Cases for every shape × zero-point kind × accuracy level (the level innermost: it shares weights)."""
    return [Case(group.format(zp=zp or "none", acc="unset" if acc is None else acc), N, K, bs,
                 zp=zp, accuracy_level=acc, **fields)
            for (N, K, bs), zp, acc in itertools.product(shapes, zps, accs)]


def _cases() -> list[Case]:
    main_shapes = list(itertools.product((1, 2, 32, 288), (16, 32, 93, 1024, 1234), (16, 32, 64, 128, 256)))
    mlas_shapes = [(n, k, bs) for n, k in ((1, 1), (7, 7), (15, 15), (500, 401), (1027, 1031)) for bs in (16, 32)]
    large_block_shapes = [(32, 1234, 512), (288, 2048, 1024), (2, 4100, 2048), (32, 4100, 2048)]
    cases = [
        # Full (N, K, block_size) grid for the main 4-bit variants.
        *_grid("4-bit zp={zp} acc={acc}", main_shapes),
        # accuracy_level unset (attribute omitted: the library's default, int8), and 2 (fp16) and 3 (bf16),
        # which the library computes on its fp32-accurate path.
        *_grid("4-bit acc={acc}", SUBSET, zps=(None, "uint8"), accs=(None, 2, 3)),
        *_grid("4-bit g_idx", SUBSET, g_idx="K"),
        *_grid("4-bit g_idx", SMALL_SUBSET, g_idx="padded", accs=(1, 4)),
        *_grid("4-bit bias", SUBSET, bias=True),
        *_grid("4-bit g_idx+bias", SMALL_SUBSET, g_idx="K", bias=True, accs=(1, 4)),
        *_grid("fp16", SUBSET, accs=(0, 1, 2, 4), dtype="float16"),
        *_grid("fp16 g_idx/bias", SMALL_SUBSET, accs=(1, 4), dtype="float16", g_idx="K", bias=True),
        *_grid("legacy 1-D", SUBSET, accs=(0, 4), legacy_1d=True),
        *_grid("A rank 3", SMALL_SUBSET, zps=(None, "uint8"), accs=(1, 4), a_rank=3),
        *_grid("A rank 1", SMALL_SUBSET, zps=(None, "uint8"), accs=(1, 4), a_rank=1),
        *_grid("MLAS shapes", mlas_shapes, zps=(None, "uint8"), accs=(1, 4)),
        *_grid("bs>=512 (numpy only)", large_block_shapes, accs=(1, 4)),
        *_grid("bs>=512 (numpy only)", large_block_shapes[:2], accs=(1, 4), bits=2),
        *_grid("bs>=512 (numpy only)", large_block_shapes[:2], accs=(1, 4), bits=8),
    ]
    for bits in (2, 8):
        cases += [
            *_grid(f"{bits}-bit", SUBSET, bits=bits),
            *_grid(f"{bits}-bit g_idx/bias", SMALL_SUBSET, accs=(1, 4), bits=bits, g_idx="K", bias=True),
            *_grid(f"{bits}-bit legacy 1-D", SMALL_SUBSET[:2], accs=(4,), bits=bits, legacy_1d=True),
        ]
    return cases


ALL_CASES = _cases()

# NIBBLE_PARITY_SUBSET: a representative part of the matrix for runs where all of it is too slow (the aarch64 runs
# under qemu, scripts/aarch64/python-aarch64.sh: the full matrix takes ~35 min there). Unset or "all": every case.
# Each subset keeps the matrix's own cases (same ids and groups), every one still run in both domains against ORT's
# built-in op (where it is the oracle) and numpy, for each of M = 1, 2, 100 (2-D A: GEMV and GEMM kernels):
#   quick  4-bit with no / uint8 / float zero points at accuracy_level 0, 1, 4 on N=2 K=93 bs=32 (a partial 8-column
#          tile, a partial last block) and at levels 1, 4 on N=32 K=1234 bs=16 (several tiles, a long K loop, K % 16
#          = 2), N=288 K=93 bs=128 (many tiles, one partial block) and N=1 K=1234 bs=128; a case or two each of 2-bit
#          (also at block 16), 8-bit, fp16, bias, g_idx, A rank 3 and block 512 (~40 cases)
#   wide   every group of the matrix on the shapes (N, K, block) = (1, 16, 16), (2, 93, 32), (288, 93, 128),
#          (1, 1234, 128), the MLAS shapes up to 15 and (32, 1234, 512), plus the 4-bit grid on (32, 1234, 16) and
#          (32, 1024, 256) (~400 cases)
# A subset of the cases is all that changes: the session-level tests below always run.
SUBSET_ENV = "NIBBLE_PARITY_SUBSET"
_GRID_4BIT = "4-bit zp="  # the groups of the full 4-bit grid ("4-bit zp={zp} acc={acc}")
_QUICK = (  # (group, or _GRID_4BIT: any group of that grid; (N, K, block_size); zero points; accuracy levels; bits)
    (_GRID_4BIT, (2, 93, 32), ZP_KINDS, (0, 1, 4), 4),
    (_GRID_4BIT, (32, 1234, 16), ZP_KINDS, (1, 4), 4),
    (_GRID_4BIT, (288, 93, 128), ZP_KINDS, (1, 4), 4),
    (_GRID_4BIT, (1, 1234, 128), ZP_KINDS, (1, 4), 4),
    ("2-bit", (2, 93, 32), ("uint8",), (1, 4), 2),
    ("2-bit", (1, 16, 16), (None,), (4,), 2),
    ("8-bit", (2, 93, 32), ("uint8",), (1, 4), 8),
    ("fp16", (2, 93, 32), ("float",), (1, 4), 4),
    ("4-bit bias", (2, 93, 32), (None,), (4,), 4),
    ("4-bit g_idx", (2, 93, 32), ("float",), (1,), 4),
    ("A rank 3", (2, 93, 32), ("uint8",), (4,), 4),
    ("bs>=512 (numpy only)", (32, 1234, 512), (None,), (4,), 4),
)
_WIDE_SHAPES = {(1, 16, 16), (2, 93, 32), (288, 93, 128), (1, 1234, 128), (7, 7, 16), (7, 7, 32), (15, 15, 16),
                (15, 15, 32), (32, 1234, 512)}
_WIDE_GRID_SHAPES = {(32, 1234, 16), (32, 1024, 256)}


def in_subset(case: Case, subset: str) -> bool:
    shape = (case.N, case.K, case.block_size)
    if subset == "quick":
        return any((case.group.startswith(group) if group == _GRID_4BIT else case.group == group)
                   and shape == sel_shape and case.zp in zps and case.accuracy_level in accs and case.bits == bits
                   for group, sel_shape, zps, accs, bits in _QUICK)
    if subset == "wide":
        return shape in _WIDE_SHAPES or (shape in _WIDE_GRID_SHAPES and case.group.startswith(_GRID_4BIT))
    raise ValueError(f"{SUBSET_ENV}={subset!r}: expected quick, wide or all")


def _selected(cases: list[Case]) -> list[Case]:
    subset = os.environ.get(SUBSET_ENV, "all") or "all"
    return cases if subset == "all" else [c for c in cases if in_subset(c, subset)]


CASES = _selected(ALL_CASES)

# ---------------------------------------------------------------------------------------------------------------
# Data, models and runs
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CaseData:
    weights: bm.Quantized  # scales / float zero points already in the activation dtype
    g_idx: np.ndarray | None
    bias: np.ndarray | None
    inputs: tuple[np.ndarray, ...]  # one A per run shape
    expected: tuple[np.ndarray, ...]  # float64 reference per A
    magnitudes: tuple[np.ndarray, ...]  # |A|·|dequant(B)|ᵀ + |bias|: the scale of rounding errors per output
    int8_sigmas: tuple[np.ndarray, ...]  # std of the error int8 activations add to each output (see below)
    row_sigmas: tuple[np.ndarray, ...]  # the same for activations quantized per row (nibble.activation_quant=row)


def int8_error_sigma(a: np.ndarray, w: np.ndarray, block_size: int) -> np.ndarray:
    """Standard deviation of the error that quantizing A to int8 (symmetric, per block of block_size along K,
    round to nearest, like ORT's CompInt8) adds to each output: the rounding error of a[k] is ~uniform with
    width s = max|a in its block| / 127, so the output error has variance Σ_k w[n,k]² · s(k)² / 12."""
    K = a.shape[-1]
    pad = -K % block_size
    blocks = np.pad(np.abs(a.astype(np.float64)), [(0, 0)] * (a.ndim - 1) + [(0, pad)])
    step = blocks.reshape(*a.shape[:-1], -1, block_size).max(axis=-1) / 127  # [..., k_blocks]
    step_per_k = np.repeat(step, block_size, axis=-1)[..., :K]
    return np.sqrt((step_per_k**2 / 12) @ (w**2).T)


def int8_row_error_sigma(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """`int8_error_sigma` for A quantized per row, asymmetrically (nibble.activation_quant=row, ORT-arm64's
    KleidiAI numerics): one step per row, s = (max(0, max a) − min(0, min a)) / 255."""
    a64 = a.astype(np.float64)
    step = (np.maximum(a64.max(axis=-1), 0) - np.minimum(a64.min(axis=-1), 0)) / 255  # [...]
    return np.sqrt(step[..., None] ** 2 / 12 * (w**2).sum(axis=-1))


@functools.lru_cache(maxsize=4)  # cases that share weights are adjacent in CASES
def case_data(key: Case) -> CaseData:
    rng = np.random.default_rng(zlib.crc32(repr(key).encode()))
    dtype = np.dtype(key.dtype)
    g_idx = None if key.g_idx is None else bm.act_order_g_idx(key.K, key.block_size, rng,
                                                               pad_to_blocks=key.g_idx == "padded")
    # Distributions of ORT's matmul_4bits_test.cc: N(0, 0.25) weights and activations.
    w_float = rng.normal(0.0, 0.25, size=(key.N, key.K))
    weights = bm.quantize(w_float, key.bits, key.block_size, symmetric=key.zp is None, zp_kind=key.zp, rng=rng,
                          g_idx=g_idx).astype(dtype)
    bias = rng.uniform(-2.0, 2.0, size=key.N).astype(dtype) if key.bias else None
    inputs = tuple(rng.normal(0.0, 0.25, size=shape).astype(dtype) for shape in key.run_shapes)

    w_deq = bm.dequantize(*weights, g_idx, key.K, key.N, key.bits, key.block_size)
    bias_abs = 0.0 if bias is None else np.abs(bias.astype(np.float64))
    expected = tuple(bm.reference(a, *weights, g_idx, bias, key.K, key.N, key.bits, key.block_size) for a in inputs)
    magnitudes = tuple(np.abs(a.astype(np.float64)) @ np.abs(w_deq).T + bias_abs for a in inputs)
    int8_sigmas = tuple(int8_error_sigma(a, w_deq, key.block_size) for a in inputs)
    row_sigmas = tuple(int8_row_error_sigma(a, w_deq) for a in inputs)
    return CaseData(weights, g_idx, bias, inputs, expected, magnitudes, int8_sigmas, row_sigmas)


def build_model(case: Case, domain: str, accuracy_level: int | None | str = "case", **overrides) -> onnx.ModelProto:
    """The case's model in `domain` (accuracy_level defaults to the case's own)."""
    data = case_data(case.weight_key)
    level = case.accuracy_level if accuracy_level == "case" else accuracy_level
    return bm.make_model(domain, case.K, case.N, case.bits, case.block_size, level, case.dtype, *data.weights,
                         g_idx=data.g_idx, bias=data.bias, a_shape=case.symbolic_a_shape,
                         legacy_1d=case.legacy_1d, node_name=f"parity_{domain}", **overrides)


def run_all(session: ort.InferenceSession, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [session.run(None, {"A": a})[0] for a in inputs]


# ---------------------------------------------------------------------------------------------------------------
# Tolerances
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tol:
    """|actual − expected| ≤ max(atol + rtol·|expected|, sigmas·σ_int8) + mag·(|A|·|W|ᵀ + |bias|)."""

    atol: float = 0.0
    rtol: float = 0.0
    sigmas: float = 0.0  # multiple of `int8_error_sigma`
    mag: float = 0.0

    def allowed(self, expected: np.ndarray, magnitude: np.ndarray, int8_sigma: np.ndarray) -> np.ndarray:
        fixed = self.atol + self.rtol * np.abs(expected)
        return np.maximum(fixed, self.sigmas * int8_sigma) + self.mag * magnitude


# ORT's tolerances in matmul_4bits_test.cc: accuracy_level 4 (A quantized to int8), and float16 A.
# ORT's int8 tolerance covers its own shapes (6σ of the int8 rounding error is <= 0.09 for K <= 1234,
# block_size <= 256), not K = 4100 with block_size 2048 (6σ ≈ 0.19): there it is widened to 6σ per int8 side.
# P(|error| > 6σ) ≈ 2e-9 per output.
INT8_SIGMAS = 6.0
FP16_TOL = Tol(atol=0.055, rtol=0.02)
# An f32 dot product (dequantize in f32, accumulate in f32, any order) is within ~1.6e-7 · Σ|a·w| of the exact
# value (measured with sequential f32 sums for K up to 8192; blocked sums do better). 4e-6 per f32 computation
# leaves a 25x margin and is still ~1e-4 of the output's scale; int8 activations err ~1e-3 · Σ|a·w|.
FP32_MAG_PER_SIDE = 4e-6


def compute_path(accuracy_level: int | None, unset_means: int) -> str:
    """'int8' (A quantized per block, ORT's CompInt8) or 'fp32' for an accuracy level; 0 / unset → `unset_means`."""
    level = unset_means if accuracy_level in (None, 0) else accuracy_level
    return "int8" if level == 4 else "fp32"


def our_path(case: Case, unset_means: int = 4) -> str:
    return compute_path(case.accuracy_level, unset_means)  # nibble.accuracy_level_default is "4" by default


def ort_path(case: Case) -> str:
    # ORT treats 0 as fp32. It runs fp32 for acc 4 too with g_idx / float zero points: 'int8' is the safe bound.
    return compute_path(case.accuracy_level, unset_means=1)


def tolerance(paths: list[str], dtype: str) -> Tol:
    """Tolerance for comparing the results of computations that took `paths` (the float64 reference adds none)."""
    if "int8" in paths:
        return Tol(atol=0.1, rtol=0.02, sigmas=INT8_SIGMAS * np.sqrt(paths.count("int8")))
    if dtype == "float16":
        return FP16_TOL
    return Tol(mag=FP32_MAG_PER_SIDE * len(paths))


class Checker:
    """Compares outputs of one case, records the errors in the parity log, and fails at the end with every
    mismatch listed (so one run shows all that is wrong with a case)."""

    def __init__(self, case: Case, data: CaseData, log) -> None:
        self.case, self.data, self.log = case, data, log
        self.failures: list[str] = []
        self.outputs = 0

    def close(self, name: str, actual: Sequence[np.ndarray], expected: Sequence[np.ndarray], tol: Tol,
              sigmas: Sequence[np.ndarray] | None = None) -> None:
        """`sigmas`: the int8 error σ per output that `tol.sigmas` multiplies (default: per-block numerics)."""
        data = self.data
        sigmas = data.int8_sigmas if sigmas is None else sigmas
        for a, act, exp, mag, sigma in zip(data.inputs, actual, expected, data.magnitudes, sigmas):
            self.outputs += 1
            want_shape = a.shape[:-1] + (self.case.N,)
            if act.shape != want_shape or act.dtype != np.dtype(self.case.dtype):
                self.failures.append(f"{name}, A{a.shape}: output {act.dtype}{act.shape}, "
                                     f"expected {self.case.dtype}{want_shape}")
                continue
            act64, exp64 = act.astype(np.float64), exp.astype(np.float64)
            err = np.abs(act64 - exp64)
            allowed = tol.allowed(exp64, mag, sigma)
            ratio = np.where(np.isfinite(err), err / np.maximum(allowed, 1e-30), np.inf)
            worst = np.unravel_index(np.argmax(ratio), ratio.shape)
            self.log.record_error(self.case.group, name, float(np.nanmax(err)), float(ratio[worst]))
            if ratio[worst] > 1:
                self.failures.append(
                    f"{name}, A{a.shape}: {int((ratio > 1).sum())} of {ratio.size} outside tolerance; worst at "
                    f"{tuple(map(int, worst))}: got {act64[worst]:.7g}, want {exp64[worst]:.7g}, "
                    f"|err| {err[worst]:.3g} > allowed {allowed[worst]:.3g}")

    def identical(self, name: str, actual: Sequence[np.ndarray], expected: Sequence[np.ndarray]) -> None:
        for a, act, exp in zip(self.data.inputs, actual, expected):
            if not np.array_equal(act, exp):
                diff = np.abs(act.astype(np.float64) - exp.astype(np.float64)).max()
                self.failures.append(f"{name}, A{a.shape}: not bitwise identical (max |diff| {diff:.3g})")

    def finish(self) -> None:
        self.log.record_case(self.case.group, self.outputs, passed=not self.failures)
        assert not self.failures, f"{self.case.id}:\n  " + "\n  ".join(self.failures)


# ---------------------------------------------------------------------------------------------------------------
# The matrix
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_parity(case: Case, request, ort_session, parity_log) -> None:
    data = case_data(case.weight_key)
    check = Checker(case, data, parity_log)

    ort_out = None
    if ort_is_oracle(case):
        ort_out = run_all(ort_session(build_model(case, "com.microsoft")), data.inputs)
        check.close("ORT vs numpy", ort_out, data.expected, tolerance([ort_path(case)], case.dtype))

    try:
        nibble_session = request.getfixturevalue("nibble_session")
    except pytest.skip.Exception:
        check.finish()  # the reference was still checked against ORT
        raise

    ours = {domain: run_all(nibble_session(build_model(case, domain)), data.inputs) for domain in bm.DOMAINS}
    for domain, out in ours.items():
        check.close(f"ours vs numpy ({domain})", out, data.expected, tolerance([our_path(case)], case.dtype))
        if ort_out is not None:
            paths = [our_path(case), ort_path(case)]
            check.close(f"ours vs ORT ({domain})", out, ort_out, tolerance(paths, case.dtype))
    # Both domains reach the same kernel with the same weights: the results must not differ at all.
    check.identical("ours: nibble vs com.microsoft domain", ours["com.microsoft"], ours["nibble"])
    if case.accuracy_level == 4:
        check_row_numerics(case, data, check, nibble_session, ort_out)
    check.finish()


def ort_quantizes_per_row(case: Case) -> bool:
    """Whether ORT's own kernel computes `case` with activations quantized per row (KleidiAI's qai8dxp kernels,
    aarch64 ORT >= 1.24: 4-bit symmetric weights, float32 A, accuracy_level 4, blocks of a multiple of 32 up to
    256, no g_idx): the numerics nibble.activation_quant=row reproduces."""
    return (platform.machine() in ("aarch64", "arm64") and case.bits == 4 and case.zp is None
            and case.dtype == "float32" and case.accuracy_level == 4 and not case.g_idx
            and case.block_size % 32 == 0 and case.block_size <= 256)


def check_row_numerics(case: Case, data: CaseData, check: Checker, nibble_session, ort_out) -> None:
    """The int8 path with nibble.activation_quant=row (through the com.microsoft model: what replaces ORT's op)
    against numpy within the per-row int8 error (6σ, ORT's atol/rtol as the floor), and against ORT's own output:
    within ORT's own test tolerance where ORT quantizes per row too (the same numerics), else within both
    numerics' error."""
    out = run_all(nibble_session(build_model(case, "com.microsoft"), config={ACT_QUANT_KEY: "row"}), data.inputs)
    row_tol = Tol(atol=0.1, rtol=0.02, sigmas=INT8_SIGMAS)
    check.close("ours row vs numpy", out, data.expected, row_tol, sigmas=data.row_sigmas)
    if ort_out is None:
        return
    if ort_quantizes_per_row(case):
        check.close("ours row vs ORT row", out, ort_out, Tol(atol=0.1, rtol=0.02))
    else:
        both = [np.hypot(r, b) for r, b in zip(data.row_sigmas, data.int8_sigmas)]
        check.close("ours row vs ORT", out, ort_out, row_tol, sigmas=both)


# ---------------------------------------------------------------------------------------------------------------
# Session-level behaviour
# ---------------------------------------------------------------------------------------------------------------

# A mid-size case with everything a kernel can get wrong at once: partial last block, odd k_blocks, zero points.
BEHAVIOUR_CASE = Case("behaviour", N=288, K=1234, block_size=32, zp="uint8", accuracy_level=4)


def assert_matches_reference(case: Case, outputs: Sequence[np.ndarray], paths: Sequence[str]) -> None:
    data = case_data(case.weight_key)
    tol = tolerance(paths, case.dtype)
    for a, out, exp, mag, sigma in zip(data.inputs, outputs, data.expected, data.magnitudes, data.int8_sigmas):
        err = np.abs(out.astype(np.float64) - exp)
        assert (err <= tol.allowed(exp, mag, sigma)).all(), f"A{a.shape}: max |err| {err.max():.3g} ({paths})"


def assert_bitwise_equal(actual: Sequence[np.ndarray], expected: Sequence[np.ndarray], what: str) -> None:
    for act, exp in zip(actual, expected):
        assert np.array_equal(act, exp), f"{what}: max |diff| {np.abs(act - exp).max():.3g}"


def test_override_off_runs_orts_kernel(nibble_session, ort_session) -> None:
    """nibble.override_com_microsoft=0: com.microsoft nodes go to ORT's kernel, the nibble domain still works."""
    off = {OVERRIDE_KEY: "0"}
    # Block size 512: ORT's kernel refuses it at session creation (in its own words); ours computes it.
    large = Case("behaviour", N=32, K=1234, block_size=512, accuracy_level=1)
    with pytest.raises(Exception, match="Only block sizes 16, 32, 64, 128, and 256 are supported"):
        nibble_session(build_model(large, "com.microsoft"), config=off)
    ours = run_all(nibble_session(build_model(large, "com.microsoft")), case_data(large.weight_key).inputs)
    assert_matches_reference(large, ours, ["fp32"])

    # A supported case: override off gives exactly ORT's output; the nibble model in that session is ours.
    inputs = case_data(BEHAVIOUR_CASE.weight_key).inputs
    ort_out = run_all(ort_session(build_model(BEHAVIOUR_CASE, "com.microsoft")), inputs)
    off_out = run_all(nibble_session(build_model(BEHAVIOUR_CASE, "com.microsoft"), config=off), inputs)
    assert_bitwise_equal(off_out, ort_out, "override off vs ORT built-in")
    nibble_out = run_all(nibble_session(build_model(BEHAVIOUR_CASE, "nibble"), config=off), inputs)
    assert_matches_reference(BEHAVIOUR_CASE, nibble_out, ["int8"])


@pytest.mark.parametrize("domain", bm.DOMAINS)
def test_accuracy_level_default(nibble_session, domain: str) -> None:
    """accuracy_level 0 / unset follow nibble.accuracy_level_default: '4' (default) = int8, '1' = fp32."""
    case = BEHAVIOUR_CASE
    inputs = case_data(case.weight_key).inputs

    def run(level: int | None, config=None) -> list[np.ndarray]:
        return run_all(nibble_session(build_model(case, domain, accuracy_level=level), config=config), inputs)

    acc1, acc4 = run(1), run(4)
    assert_matches_reference(case, acc1, ["fp32"])
    for level in (0, None):
        assert_bitwise_equal(run(level), acc4, f"acc {level} with the default default vs acc 4")
        assert_bitwise_equal(run(level, {ACCURACY_DEFAULT_KEY: "4"}), acc4, f"acc {level}, default '4' vs acc 4")
        assert_bitwise_equal(run(level, {ACCURACY_DEFAULT_KEY: "1"}), acc1, f"acc {level}, default '1' vs acc 1")
    # Explicit levels ignore the default.
    assert_bitwise_equal(run(4, {ACCURACY_DEFAULT_KEY: "1"}), acc4, "acc 4 with default '1'")


@pytest.mark.parametrize("domain", bm.DOMAINS)
def test_omitted_bits_means_4(nibble_session, domain: str) -> None:
    """The optional attribute bits defaults to 4 (a custom op gets no schema defaults: the library applies them)."""
    inputs = case_data(BEHAVIOUR_CASE.weight_key).inputs
    explicit = run_all(nibble_session(build_model(BEHAVIOUR_CASE, domain)), inputs)
    omitted = run_all(nibble_session(build_model(BEHAVIOUR_CASE, domain, attrs={"bits": None})), inputs)
    assert_bitwise_equal(omitted, explicit, "bits omitted vs bits=4")


@pytest.mark.parametrize("accuracy_level", (1, 4))
def test_concurrent_runs_match_serial(nibble_session, accuracy_level: int) -> None:
    """Run() from several Python threads on one session (ORT releases the GIL) equals serial runs."""
    case = replace(BEHAVIOUR_CASE, accuracy_level=accuracy_level)
    session = nibble_session(build_model(case, "nibble"))
    rng = np.random.default_rng(7)
    inputs = [rng.normal(0, 0.25, size=(m, case.K)).astype(np.float32) for m in (1, 2, 7, 100) * 6]
    serial = run_all(session, inputs)
    with ThreadPoolExecutor(max_workers=8) as pool:
        concurrent = list(pool.map(lambda a: session.run(None, {"A": a})[0], inputs))
    assert_bitwise_equal(concurrent, serial, "concurrent vs serial")


@pytest.mark.parametrize("accuracy_level", (1, 4))
def test_intra_op_thread_counts_agree(nibble_session, accuracy_level: int) -> None:
    """1 vs 2 intra-op threads: same values up to f32 summation order (A's int8 quantization does not depend on
    the split, so the tight fp32 tolerance applies to both paths)."""
    case = replace(BEHAVIOUR_CASE, accuracy_level=accuracy_level)
    data = case_data(case.weight_key)
    one, two = (run_all(nibble_session(build_model(case, "nibble"), intra_op_threads=t), data.inputs) for t in (1, 2))
    tol = Tol(mag=2 * FP32_MAG_PER_SIDE)
    for a, x, y, mag in zip(data.inputs, one, two, data.magnitudes):
        err = np.abs(x.astype(np.float64) - y)
        assert (err <= tol.allowed(y, mag, 0.0)).all(), f"A{a.shape}: 1 vs 2 threads differ by {err.max():.3g}"


def _bias_add_fused(optimized_model: Path) -> bool:
    """Whether ORT's optimized model lost the Add (MatMulNBitsFusion moved the bias into input 5)."""
    return not any(node.op_type == "Add" for node in onnx.load(str(optimized_model)).graph.node)


@pytest.mark.parametrize("opt_level", (ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
                                       ort.GraphOptimizationLevel.ORT_ENABLE_ALL), ids=("disable_all", "enable_all"))
@pytest.mark.parametrize("bias_as_add", (False, True), ids=("bias_input", "bias_add"))
@pytest.mark.parametrize("domain", bm.DOMAINS)
def test_graph_optimization_levels(nibble_session, ort_session, tmp_path, domain, bias_as_add, opt_level) -> None:
    """Both optimization levels work. At ENABLE_ALL ORT fuses a com.microsoft MatMulNBits + Add(bias) into one
    node with the bias as input 5, which then reaches our kernel through the override."""
    case = replace(BEHAVIOUR_CASE, bias=True)
    data = case_data(case.weight_key)
    model = build_model(case, domain, bias_as_add=bias_as_add)
    fusable = domain == "com.microsoft" and bias_as_add and opt_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    ours_optimized, ort_optimized = tmp_path / "ours.onnx", tmp_path / "ort.onnx"

    session = nibble_session(model, opt_level=opt_level, optimized_model_path=ours_optimized if fusable else None)
    assert_matches_reference(case, run_all(session, data.inputs), [our_path(case)])

    if fusable:
        # The pattern must be one ORT fuses, or this case would not test what it claims.
        ort_session(model, opt_level=opt_level, optimized_model_path=ort_optimized)
        if not _bias_add_fused(ort_optimized):
            # ORT 1.17/1.18 predate the fusion; from 1.20 on (the runtimes CI pins) it must happen.
            assert int(ort.__version__.split(".")[1]) < 19, "ORT no longer fuses MatMulNBits + Add: update this test"
            return
        if not _bias_add_fused(ours_optimized):
            warnings.warn("with nibble's override registered ORT did not fuse MatMulNBits + Add; "
                          "the bias-through-fusion path was not exercised")
