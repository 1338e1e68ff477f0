"""MatMulNBits test models: a numpy blockwise quantizer, a float64 reference and an ONNX model builder.

Semantics (com.microsoft::MatMulNBits, see onnxruntime docs/ContribOperators.md):

    Y = A · dequant(B)ᵀ + bias          dequant(q)[n, k] = (q[n, k] − zp[n, blk(k)]) · scale[n, blk(k)]

    k_blocks  = ceil(K / block_size)    blk(k) = k // block_size, or g_idx[k] when g_idx is given
    blob_size = block_size · bits / 8

    B            uint8 [N, k_blocks, blob_size]  codes 0 .. 2^bits − 1, packed along K, earlier k in the low bits
    scales       T     [N, k_blocks]             (legacy 1-D [N · k_blocks]); may be negative
    zero_points  uint8 [N, ceil(k_blocks · bits / 8)] packed like B (legacy 1-D), or T [N, k_blocks];
                 absent → 2^(bits − 1)
    g_idx        int32 [K] (or [k_blocks · block_size])
    bias         T     [N]

When K is not a multiple of block_size the last block is padded. The pad codes are don't-care: `quantize`
fills them (and the pad bits of packed zero points) with random codes, so a kernel that lets them contribute
fails its tests.

Use as a module (the pytest suite in tests/python does) or from the command line:

    python models/build_matmulnbits.py -K 4096 -N 4096 --block-size 32 --zp uint8 --accuracy-level 4 \\
        --domain nibble -o /tmp/mm.onnx
"""

from __future__ import annotations

import argparse
from typing import Mapping, NamedTuple, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

DOMAINS = ("nibble", "com.microsoft")
OP_TYPE = "MatMulNBits"

# IR 8 pairs with opset 17. IR >= 4 already lets initializers stay out of the graph inputs, and an initializer
# that is not also a graph input is a constant: ORT hands it to the kernel at session creation.
IR_VERSION = 8
OPSET_IMPORTS = {"": 17, "com.microsoft": 1, "nibble": 1}

# The op's input slots, in order. Optional slots that are skipped get an empty name in the node.
INPUT_SLOTS = ("A", "B", "scales", "zero_points", "g_idx", "bias")

_ONNX_FLOAT_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16}


# ---------------------------------------------------------------------------------------------------------------
# Layout arithmetic and bit packing
# ---------------------------------------------------------------------------------------------------------------


def k_blocks(K: int, block_size: int) -> int:
    """Number of quantization blocks along K: ceil(K / block_size)."""
    return -(-K // block_size)


def blob_size(block_size: int, bits: int) -> int:
    """Bytes of B per block."""
    return block_size * bits // 8


def zp_row_bytes(n_blocks: int, bits: int) -> int:
    """Bytes per row of packed uint8 zero points: ceil(k_blocks · bits / 8)."""
    return -(-n_blocks * bits // 8)


def pack_codes(codes: np.ndarray, bits: int) -> np.ndarray:
    """Pack codes [..., L] (L a multiple of 8 / bits) into bytes [..., L · bits / 8], earlier codes low."""
    per_byte = 8 // bits
    codes = np.asarray(codes, dtype=np.uint8)
    assert codes.shape[-1] % per_byte == 0, "pad the last axis to whole bytes first"
    grouped = codes.reshape(*codes.shape[:-1], -1, per_byte).astype(np.uint32)
    shifts = np.arange(per_byte, dtype=np.uint32) * bits
    return (grouped << shifts).sum(axis=-1).astype(np.uint8)


def unpack_codes(packed: np.ndarray, bits: int) -> np.ndarray:
    """Inverse of `pack_codes`: bytes [..., n] → codes [..., n · 8 / bits]."""
    per_byte = 8 // bits
    packed = np.asarray(packed, dtype=np.uint8)
    shifts = np.arange(per_byte, dtype=np.uint8) * bits
    codes = (packed[..., None] >> shifts) & np.uint8((1 << bits) - 1)
    return codes.reshape(*packed.shape[:-1], -1)


# ---------------------------------------------------------------------------------------------------------------
# Quantizer
# ---------------------------------------------------------------------------------------------------------------


class Quantized(NamedTuple):
    """The constant inputs of a MatMulNBits node (unpack it: `B, scales, zp = quantize(...)`)."""

    B: np.ndarray  # uint8 [N, k_blocks, blob_size]
    scales: np.ndarray  # float32 [N, k_blocks]
    zero_points: np.ndarray | None  # uint8 [N, zp_row_bytes] | float32 [N, k_blocks] | None

    def astype(self, dtype) -> "Quantized":
        """The same weights with scales (and float zero points) cast to the activation type `dtype`."""
        zp = self.zero_points
        if zp is not None and zp.dtype != np.uint8:
            zp = zp.astype(dtype)
        return Quantized(self.B, self.scales.astype(dtype), zp)


def act_order_g_idx(K: int, block_size: int, rng: np.random.Generator, pad_to_blocks: bool = False) -> np.ndarray:
    """An act-order (GPTQ) g_idx: a random permutation of K decides which rows share a block; every block gets
    block_size rows except the last. With `pad_to_blocks` it has k_blocks · block_size entries, the pad rows
    keeping their natural block (the shape ORT's own tests use)."""
    rank = np.empty(K, dtype=np.int64)
    rank[rng.permutation(K)] = np.arange(K)
    g_idx = rank // block_size
    if pad_to_blocks:
        g_idx = np.concatenate([g_idx, np.arange(K, k_blocks(K, block_size) * block_size) // block_size])
    return g_idx.astype(np.int32)


def quantize(
    w: np.ndarray,
    bits: int,
    block_size: int,
    symmetric: bool = True,
    zp_kind: str | None = None,
    rng: np.random.Generator | None = None,
    g_idx: np.ndarray | None = None,
) -> Quantized:
    """Blockwise quantization of w [N, K] (rows = output features) the way ORT's quantizers do it.

    symmetric: scale = m / −2^(bits−1), m the signed value of largest magnitude in the block (ORT's
      `range2scale`), zero point 2^(bits−1). About half the scales come out negative, as with ORT.
    asymmetric: the range [min(w, 0), max(w, 0)] maps onto 0 .. 2^bits − 1; needs zp_kind.
    zp_kind: None (zero points implicit; symmetric only), 'uint8' (packed codes, rounded), or 'float'
      (float32 [N, k_blocks], fractional for asymmetric weights: dequant = (q − zp) · scale).
    g_idx: when given, block b holds the rows k with g_idx[k] == b (act order) instead of k // block_size.

    Pad codes of the last partial block and the pad bits of packed zero points are random (don't-care).
    """
    if zp_kind not in (None, "uint8", "float"):
        raise ValueError(f"zp_kind must be None, 'uint8' or 'float', not {zp_kind!r}")
    if not symmetric and zp_kind is None:
        raise ValueError("asymmetric quantization needs zero points (zp_kind 'uint8' or 'float')")
    rng = np.random.default_rng(0) if rng is None else rng
    w = np.asarray(w, dtype=np.float64)
    N, K = w.shape
    n_blocks = k_blocks(K, block_size)
    qmax = (1 << bits) - 1
    mid = 1 << (bits - 1)
    block_of_row = np.arange(K) // block_size if g_idx is None else np.asarray(g_idx[:K], dtype=np.int64)

    # Per-block range [min(w, 0), max(w, 0)]: zero padding of the last block does not change it, so plain blocks
    # are one reshape; a g_idx regroups the rows first. Blocks no row maps to (a hand-made g_idx) get [0, 0].
    if g_idx is None:
        padded = np.zeros((N, n_blocks * block_size))
        padded[:, :K] = w
        blocks = padded.reshape(N, n_blocks, block_size)
        lo = np.minimum(blocks.min(axis=2), 0.0)
        hi = np.maximum(blocks.max(axis=2), 0.0)
    else:
        lo = np.zeros((N, n_blocks))
        hi = np.zeros((N, n_blocks))
        np.minimum.at(lo.T, block_of_row, w.T)
        np.maximum.at(hi.T, block_of_row, w.T)
    zps = np.full((N, n_blocks), float(mid))
    if symmetric:
        scales = np.where(np.abs(hi) >= np.abs(lo), hi, lo) / -mid
    else:
        scales = (hi - lo) / qmax
        scales[scales == 0] = 1.0
        zero = -lo / scales
        zps = zero if zp_kind == "float" else np.clip(np.round(zero), 0, qmax)
    scales[scales == 0] = 1.0  # an all-zero block
    scales = scales.astype(np.float32)
    if zp_kind == "float":
        zps = zps.astype(np.float32)

    # Codes use exactly the stored (float32) scale and zero point, so dequant(quantize(w)) is what the
    # reference sees.
    s = scales.astype(np.float64)[:, block_of_row]
    z = zps.astype(np.float64)[:, block_of_row]
    codes = np.clip(np.round(w / s + z), 0, qmax).astype(np.uint8)
    pad = rng.integers(0, qmax + 1, size=(N, n_blocks * block_size - K), dtype=np.uint8)
    B = pack_codes(np.concatenate([codes, pad], axis=1), bits).reshape(N, n_blocks, blob_size(block_size, bits))

    if zp_kind == "uint8":
        per_byte = 8 // bits
        zp_pad = rng.integers(0, qmax + 1, size=(N, -n_blocks % per_byte), dtype=np.uint8)
        zero_points = pack_codes(np.concatenate([zps.astype(np.uint8), zp_pad], axis=1), bits)
    elif zp_kind == "float":
        zero_points = zps
    else:
        zero_points = None
    return Quantized(B, scales, zero_points)


# ---------------------------------------------------------------------------------------------------------------
# float64 reference
# ---------------------------------------------------------------------------------------------------------------


def dequantize(B, scales, zp, g_idx, K: int, N: int, bits: int, block_size: int) -> np.ndarray:
    """dequant(B) as float64 [N, K]. Accepts legacy 1-D scales / zero points; zero points are packed codes
    if uint8, per-block values otherwise. Pad codes (k >= K) are dropped."""
    n_blocks = k_blocks(K, block_size)
    codes = unpack_codes(np.asarray(B).reshape(N, -1), bits)[:, :K].astype(np.float64)
    scales = np.asarray(scales, dtype=np.float64).reshape(N, n_blocks)
    if zp is None:
        zp = np.full((N, n_blocks), float(1 << (bits - 1)))
    elif np.asarray(zp).dtype == np.uint8:
        zp = unpack_codes(np.asarray(zp).reshape(N, -1), bits)[:, :n_blocks].astype(np.float64)
    else:
        zp = np.asarray(zp, dtype=np.float64).reshape(N, n_blocks)
    block_of_row = np.arange(K) // block_size if g_idx is None else np.asarray(g_idx)[:K].astype(np.int64)
    return (codes - zp[:, block_of_row]) * scales[:, block_of_row]


def reference(A, B, scales, zp, g_idx, bias, K: int, N: int, bits: int, block_size: int) -> np.ndarray:
    """Y = A · dequant(B)ᵀ + bias in float64, shape A.shape[:-1] + [N]. A may have any rank >= 1."""
    W = dequantize(B, scales, zp, g_idx, K, N, bits, block_size)
    Y = np.asarray(A, dtype=np.float64) @ W.T
    if bias is not None:
        Y = Y + np.asarray(bias, dtype=np.float64)
    return Y


# ---------------------------------------------------------------------------------------------------------------
# ONNX model builder
# ---------------------------------------------------------------------------------------------------------------


def _onnx_float_type(dtype) -> int:
    try:
        return _ONNX_FLOAT_TYPES[np.dtype(dtype)]
    except KeyError:
        raise ValueError(f"activation dtype must be float32 or float16, not {np.dtype(dtype)}") from None


def _value_info(name: str, array: np.ndarray) -> onnx.ValueInfoProto:
    elem = helper.np_dtype_to_tensor_dtype(array.dtype)
    return helper.make_tensor_value_info(name, elem, list(array.shape))


def make_model(
    domain: str,
    K: int,
    N: int,
    bits: int,
    block_size: int,
    accuracy_level: int | None,
    dtype,
    B: np.ndarray,
    scales: np.ndarray,
    zp: np.ndarray | None = None,
    g_idx: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    a_shape: Sequence[int | str] | None = None,
    legacy_1d: bool = False,
    node_name: str = "matmul_nbits",
    attrs: Mapping[str, int | float | str | None] | None = None,
    runtime_inputs: Sequence[str] = (),
    bias_as_add: bool = False,
    check: bool = True,
) -> onnx.ModelProto:
    """A one-node MatMulNBits model (plus an Add when `bias_as_add`).

    The arrays are stored exactly as given (no casting, no validation), so this also builds malformed models.
    domain: 'nibble' or 'com.microsoft'.
    accuracy_level: None omits the attribute.
    dtype: the type of A and Y (float32 or float16). Pass scales / float zp / bias already in that type.
    a_shape: dims of input A, str for a symbolic (dynamic) dim; default ['M', K].
    legacy_1d: store scales and zero points flattened to 1-D.
    attrs: attribute overrides; a value of None removes the attribute (e.g. {'bits': None, 'K': 24}).
    runtime_inputs: slots among B, scales, zero_points, g_idx, bias fed as graph inputs instead of initializers.
    bias_as_add: leave the node's bias slot empty and add `bias` with a following Add node (the pattern ORT's
      MatMulNBitsFusion folds into input 5 at ORT_ENABLE_ALL).
    check: run onnx.checker (switch off for malformed models).
    """
    if legacy_1d:
        scales = scales.reshape(-1)
        zp = None if zp is None else zp.reshape(-1)
    a_shape = ["M", K] if a_shape is None else list(a_shape)
    float_type = _onnx_float_type(dtype)

    node_attrs: dict[str, int] = {"K": K, "N": N, "bits": bits, "block_size": block_size}
    if accuracy_level is not None:
        node_attrs["accuracy_level"] = accuracy_level
    for name, value in (attrs or {}).items():
        if value is None:
            node_attrs.pop(name, None)
        else:
            node_attrs[name] = value

    slot_values = {"B": B, "scales": scales, "zero_points": zp, "g_idx": g_idx, "bias": None if bias_as_add else bias}
    unknown = set(runtime_inputs) - set(slot_values)
    if unknown:
        raise ValueError(f"runtime_inputs must name slots among {sorted(slot_values)}, not {sorted(unknown)}")
    graph_inputs = [helper.make_tensor_value_info("A", float_type, a_shape)]
    initializers = []
    node_inputs = ["A"]
    for slot in INPUT_SLOTS[1:]:
        value = slot_values[slot]
        if value is None:
            node_inputs.append("")
            continue
        node_inputs.append(slot)
        if slot in runtime_inputs:
            graph_inputs.append(_value_info(slot, value))
        else:
            initializers.append(numpy_helper.from_array(np.asarray(value), name=slot))
    while node_inputs[-1] == "":
        node_inputs.pop()  # trailing skipped optional inputs are simply left out

    y_shape = a_shape[:-1] + [N]
    nodes = [helper.make_node(OP_TYPE, node_inputs, ["Y_mm" if bias_as_add else "Y"], name=node_name,
                              domain=domain, **node_attrs)]
    if bias_as_add:
        initializers.append(numpy_helper.from_array(np.asarray(bias), name="bias"))
        nodes.append(helper.make_node("Add", ["Y_mm", "bias"], ["Y"], name=f"{node_name}_bias_add"))

    graph = helper.make_graph(
        nodes,
        f"{node_name}_graph",
        graph_inputs,
        [helper.make_tensor_value_info("Y", float_type, y_shape)],
        initializer=initializers,
    )
    model = helper.make_model(
        graph,
        ir_version=IR_VERSION,
        opset_imports=[helper.make_opsetid(d, v) for d, v in OPSET_IMPORTS.items()],
        producer_name="nibble/models/build_matmulnbits.py",
    )
    if check:
        onnx.checker.check_model(model)
    return model


# ---------------------------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------------------------


def _main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Write a random one-node MatMulNBits model.")
    p.add_argument("-K", type=int, required=True)
    p.add_argument("-N", type=int, required=True)
    p.add_argument("--bits", type=int, default=4, choices=(2, 4, 8))
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--zp", choices=("none", "uint8", "float"), default="none",
                   help="zero points: none = symmetric, uint8/float = asymmetric")
    p.add_argument("--accuracy-level", type=int, default=None, help="omit for no attribute")
    p.add_argument("--dtype", choices=("float32", "float16"), default="float32")
    p.add_argument("--g-idx", action="store_true", help="act-order g_idx")
    p.add_argument("--bias", action="store_true")
    p.add_argument("--domain", choices=DOMAINS, default="nibble")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-o", "--output", required=True)
    args = p.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    zp_kind = None if args.zp == "none" else args.zp
    g_idx = act_order_g_idx(args.K, args.block_size, rng) if args.g_idx else None
    w = rng.normal(0.0, 0.25, size=(args.N, args.K))
    q = quantize(w, args.bits, args.block_size, symmetric=zp_kind is None, zp_kind=zp_kind, rng=rng, g_idx=g_idx)
    q = q.astype(args.dtype)
    bias = rng.uniform(-2, 2, size=args.N).astype(args.dtype) if args.bias else None
    model = make_model(args.domain, args.K, args.N, args.bits, args.block_size, args.accuracy_level, args.dtype,
                       *q, g_idx=g_idx, bias=bias)
    onnx.save(model, args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    _main()
