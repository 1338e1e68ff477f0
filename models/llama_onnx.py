"""Build a Llama decoder ONNX graph (KV cache in/out, one graph for prefill and decode) and write a model directory.

The graph contract (input/output names, shapes, model_config.json) is models/LLAMA_MODEL_DIR.md. This module knows
nothing about where the weights come from: models/gguf_to_onnx.py feeds it a real GGUF, models/synthetic_llama.py
random weights.

Weights (numpy, Hugging Face layout, `y = x @ W.T`; rotate_half RoPE, i.e. Q/K rows NOT llama.cpp-permuted):

    embed [V, H]     norm [H]     lm_head [V, H] (absent = tied to embed)
    layers.{i}.attn_norm [H]  .q [nh*hd, H]  .k [kvh*hd, H]  .v [kvh*hd, H]  .o [H, nh*hd]
    layers.{i}.ffn_norm  [H]  .gate [F, H]   .up [F, H]      .down [H, F]

Graph, per layer (standard ONNX ops, opset 17, plus MatMulNBits / GatherBlockQuantized):

    x ─ RMSNorm ─ q,k,v = Linear ─ RoPE(q,k) ─ present = Concat(past, new) ─ GQA softmax(q·kᵀ/√hd + causal) · v ─ o
    x += o;  x += down(silu(gate(RMSNorm(x))) · up(RMSNorm(x)))
    logits = RMSNorm(x) · embedᵀ (Gemm transB: the tied weight is stored once)

RMSNorm is written as Pow → ReduceMean → Add → Sqrt → Div → Mul, the pattern ORT fuses into
SimplifiedLayerNormalization. Grouped-query attention reshapes q [B, nh, S, hd] to [B, kvh, g·S, hd] so each KV
head is used by its g query heads without copying K/V.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from collections.abc import Mapping
from typing import Callable, Iterable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import build_matmulnbits as mnb

OPSET = 17
FORMAT = "nibble-llama/1"
LAYER_TENSORS = ("attn_norm", "q", "k", "v", "o", "ffn_norm", "gate", "up", "down")
# Above this many bytes of initializers the weights go to model.onnx.data (protobuf caps a file at 2 GiB).
EXTERNAL_DATA_BYTES = 1_800_000_000


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    name: str
    num_layers: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    context_length: int
    rope_theta: float
    rms_norm_eps: float
    tied_embeddings: bool
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    pad_token_id: int | None = None
    add_bos_token: bool = False
    chat_template: str | None = None
    source: str = ""
    synthetic: bool = False  # random weights (models/synthetic_llama.py): the text is noise

    def __post_init__(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} must be even for RoPE")


@dataclasses.dataclass(frozen=True)
class QuantSpec:
    """How linear layers are stored. bits 0 = fp32 MatMul (everything else is ignored then)."""

    bits: int = 4
    block_size: int = 32
    symmetric: bool = True
    accuracy_level: int = 4
    domain: str = "com.microsoft"
    embedding: str = "fp32"  # "fp32" Gather | "gather_block_quantized" (4-bit, same block size and symmetry)
    lm_head: str = "fp32"  # "fp32" Gemm on the (tied) embedding | "matmulnbits"
    # "requantized": linear weights quantized here from fp32; or a note on where pre-quantized weights came from
    # (e.g. "gguf Q4_1 blocks as they are"), recorded in model_config.json
    weights: str = "requantized"
    zero_points: str | None = None  # model_config.json only: None (derived from symmetric), "uint8" or "float"

    def __post_init__(self) -> None:
        if self.bits not in (0, 2, 4, 8):
            raise ValueError(f"bits must be 0 (fp32), 2, 4 or 8, not {self.bits}")
        if self.bits and (self.block_size < 16 or self.block_size & (self.block_size - 1)):
            raise ValueError(f"block_size must be a power of two >= 16, not {self.block_size}")
        if self.domain not in ("com.microsoft", "nibble"):
            raise ValueError(f"domain must be com.microsoft or nibble, not {self.domain!r}")
        if self.embedding not in ("fp32", "gather_block_quantized"):
            raise ValueError(f"embedding must be fp32 or gather_block_quantized, not {self.embedding!r}")
        if self.lm_head not in ("fp32", "matmulnbits"):
            raise ValueError(f"lm_head must be fp32 or matmulnbits, not {self.lm_head!r}")
        if not 0 <= self.accuracy_level <= 4:
            raise ValueError(f"accuracy_level must be 0..4, not {self.accuracy_level}")

    def summary(self) -> dict | None:
        if self.bits == 0:
            return None
        return {
            "op_domain": self.domain,
            "bits": self.bits,
            "block_size": self.block_size,
            "symmetric": self.symmetric,
            "accuracy_level": self.accuracy_level,
            "zero_points": self.zero_points or ("none" if self.symmetric else "uint8"),
            "embedding": self.embedding,
            "lm_head": self.lm_head,
            "weights": self.weights,
        }


FP32 = QuantSpec(bits=0)


def rope_tables(cfg: LlamaConfig) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin [context_length, head_dim] for rotate_half RoPE (both halves carry the same frequencies)."""
    inv_freq = 1.0 / (cfg.rope_theta ** (np.arange(0, cfg.head_dim, 2, dtype=np.float64) / cfg.head_dim))
    angles = np.outer(np.arange(cfg.context_length, dtype=np.float64), inv_freq)
    angles = np.concatenate([angles, angles], axis=1)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class PreQuantized:
    """A linear weight [N, K] already in MatMulNBits form (e.g. a GGUF's own Q4_0 / Q4_1 / Q8_0 blocks), used as
    it is instead of being re-quantized. The graph takes bits and block_size from here, not from the QuantSpec."""

    packed: mnb.Quantized
    N: int
    K: int
    bits: int
    block_size: int

    @property
    def shape(self) -> tuple[int, int]:
        return (self.N, self.K)

    def dequantize(self) -> np.ndarray:
        q = self.packed
        return mnb.dequantize(q.B, q.scales, q.zero_points, None, self.K, self.N, self.bits, self.block_size)


def quantize_rows(w: np.ndarray, bits: int, block_size: int, symmetric: bool, rows: int = 4096) -> mnb.Quantized:
    """build_matmulnbits.quantize on slices of `rows` output rows (rows are independent), so a 128k-vocab table
    never needs more than a few hundred MB of float64 temporaries."""
    zp_kind = None if symmetric else "uint8"
    parts = [mnb.quantize(w[r : r + rows], bits, block_size, symmetric=symmetric, zp_kind=zp_kind)
             for r in range(0, w.shape[0], rows)]
    zps = None if symmetric else np.concatenate([p.zero_points for p in parts])
    return mnb.Quantized(np.concatenate([p.B for p in parts]), np.concatenate([p.scales for p in parts]), zps)


class _Graph:
    """Node/initializer bookkeeping with unique names."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.init_bytes = 0
        self._n = 0

    def const(self, name: str, array: np.ndarray) -> str:
        t = numpy_helper.from_array(np.ascontiguousarray(array), name)
        self.inits.append(t)
        self.init_bytes += np.asarray(array).nbytes
        return name

    def op(self, op_type: str, inputs: Iterable[str], n_out: int = 1, name: str | None = None, domain: str = "",
           outputs: list[str] | None = None, **attrs) -> str | list[str]:
        self._n += 1
        name = name or f"{op_type}_{self._n}"
        outs = outputs or [f"{name}/out{i}" if n_out > 1 else f"{name}/out" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=name, domain=domain, **attrs))
        return outs[0] if n_out == 1 else outs


def _i64(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


class _Builder:
    def __init__(self, cfg: LlamaConfig, quant: QuantSpec) -> None:
        self.cfg, self.q, self.g = cfg, quant, _Graph()

    # ---------------------------------------------------------------------------------------------- layers
    def rmsnorm(self, x: str, weight: np.ndarray, name: str) -> str:
        g = self.g
        w = g.const(f"{name}.weight", weight.astype(np.float32))
        sq = g.op("Pow", [x, "const.two"], name=f"{name}/Pow")
        ms = g.op("ReduceMean", [sq], name=f"{name}/ReduceMean", axes=[-1], keepdims=1)
        rs = g.op("Sqrt", [g.op("Add", [ms, "const.eps"], name=f"{name}/Add")], name=f"{name}/Sqrt")
        return g.op("Mul", [g.op("Div", [x, rs], name=f"{name}/Div"), w], name=f"{name}/Mul")

    def linear(self, x: str, w: np.ndarray | PreQuantized, name: str, outputs: list[str] | None = None) -> str:
        """y = x @ w.T for w [N, K]: fp32 MatMul, or MatMulNBits with the quantized (or pre-quantized) weight."""
        g, q = self.g, self.q
        N, K = w.shape
        if q.bits == 0:
            dense = w.dequantize() if isinstance(w, PreQuantized) else w
            return g.op("MatMul", [x, g.const(f"{name}.weight", np.ascontiguousarray(dense.T, dtype=np.float32))],
                        name=name, outputs=outputs)
        if isinstance(w, PreQuantized):
            packed, bits, block_size = w.packed, w.bits, w.block_size
        else:
            packed, bits, block_size = quantize_rows(w, q.bits, q.block_size, q.symmetric), q.bits, q.block_size
        inputs = [x, g.const(f"{name}.qweight", packed.B), g.const(f"{name}.scales", packed.scales)]
        if packed.zero_points is not None:
            inputs.append(g.const(f"{name}.zero_points", packed.zero_points))
        return g.op("MatMulNBits", inputs, name=name, domain=q.domain, K=K, N=N, bits=bits,
                    block_size=block_size, accuracy_level=q.accuracy_level, outputs=outputs)

    def embedding(self, ids: str, embed: np.ndarray) -> str:
        g, q = self.g, self.q
        if q.bits == 0 or q.embedding == "fp32":
            return g.op("Gather", [g.const("embed.weight", embed.astype(np.float32)), ids], name="embed", axis=0)
        # GatherBlockQuantized: data uint8 [V, H/2] (4-bit, low nibble first), scales [V, ceil(H/bs)],
        # zero points packed the same way (absent: symmetric, implicit 8).
        V, H = embed.shape
        packed = quantize_rows(embed, 4, q.block_size, q.symmetric)
        n_blocks = packed.scales.shape[1]
        data = packed.B.reshape(V, -1)[:, : (H + 1) // 2]
        inputs = [g.const("embed.qweight", data), ids, g.const("embed.scales", packed.scales)]
        if packed.zero_points is not None:
            inputs.append(g.const("embed.zero_points", packed.zero_points[:, : (n_blocks + 1) // 2]))
        return g.op("GatherBlockQuantized", inputs, name="embed", domain="com.microsoft", bits=4,
                    block_size=q.block_size, gather_axis=0, quantize_axis=1)

    def lm_head(self, x: str, weights: Mapping[str, np.ndarray]) -> str:
        g, q, cfg = self.g, self.q, self.cfg
        head = weights["lm_head"] if "lm_head" in weights else None
        if q.bits and q.lm_head == "matmulnbits":
            return self.linear(x, weights["embed"] if head is None else head, "lm_head", outputs=["logits"])
        if head is None:
            # Tied: reuse the Gather table with Gemm(transB=1) when the embedding is fp32; else store it.
            if q.bits == 0 or q.embedding == "fp32":
                table = "embed.weight"
            else:
                table = g.const("lm_head.weight", weights["embed"].astype(np.float32))
        else:
            table = g.const("lm_head.weight", head.astype(np.float32))
        flat = g.op("Reshape", [x, g.const("lm_head.flat_shape", _i64([-1, cfg.hidden_size]))], name="lm_head/flat")
        y = g.op("Gemm", [flat, table], name="lm_head", transB=1)
        return g.op("Reshape", [y, "lm_head.out_shape"], name="lm_head/unflat", outputs=["logits"])

    def attention(self, x: str, lw: Mapping[str, np.ndarray], i: int, cos: str, sin: str, mask: str) -> str:
        g, cfg = self.g, self.cfg
        nh, kvh, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        p = f"layers.{i}.attn"

        def heads(t: str, n: int, what: str) -> str:  # [B, S, n*hd] -> [B, n, S, hd]
            r = g.op("Reshape", [t, g.const(f"{p}.{what}_shape", _i64([0, 0, n, hd]))], name=f"{p}/{what}/Reshape")
            return g.op("Transpose", [r], name=f"{p}/{what}/Transpose", perm=[0, 2, 1, 3])

        def rope(t: str, what: str) -> str:  # t * cos + rotate_half(t) * sin
            lo, hi = g.op("Split", [t, "const.rope_split"], n_out=2, name=f"{p}/{what}/rope/Split", axis=-1)
            rot = g.op("Concat", [g.op("Neg", [hi], name=f"{p}/{what}/rope/Neg"), lo], name=f"{p}/{what}/rope/Concat",
                       axis=-1)
            return g.op("Add", [g.op("Mul", [t, cos], name=f"{p}/{what}/rope/MulCos"),
                                g.op("Mul", [rot, sin], name=f"{p}/{what}/rope/MulSin")], name=f"{p}/{what}/rope/Add")

        q = rope(heads(self.linear(x, lw["q"], f"layers.{i}.attn.q_proj"), nh, "q"), "q")
        k = rope(heads(self.linear(x, lw["k"], f"layers.{i}.attn.k_proj"), kvh, "k"), "k")
        v = heads(self.linear(x, lw["v"], f"layers.{i}.attn.v_proj"), kvh, "v")
        k = g.op("Concat", [f"past_key_values.{i}.key", k], name=f"{p}/present_key", axis=2,
                 outputs=[f"present.{i}.key"])
        v = g.op("Concat", [f"past_key_values.{i}.value", v], name=f"{p}/present_value", axis=2,
                 outputs=[f"present.{i}.value"])
        # q [B, nh, S, hd] -> [B, kvh, g*S, hd]: query head h = kv*g + j uses kv head h // g.
        qg = g.op("Reshape", [q, "attn.grouped_q_shape"], name=f"{p}/q/group")
        kt = g.op("Transpose", [k], name=f"{p}/k/T", perm=[0, 1, 3, 2])
        scores = g.op("MatMul", [qg, kt], name=f"{p}/scores")
        scores = g.op("Add", [g.op("Mul", [scores, "const.attn_scale"], name=f"{p}/scale"), mask], name=f"{p}/mask")
        probs = g.op("Softmax", [scores], name=f"{p}/softmax", axis=-1)
        ctx = g.op("MatMul", [probs, v], name=f"{p}/context")  # [B, kvh, g*S, hd]
        ctx = g.op("Reshape", [ctx, g.const(f"{p}.ctx_shape", _i64([0, nh, -1, hd]))], name=f"{p}/ctx/heads")
        ctx = g.op("Transpose", [ctx], name=f"{p}/ctx/Transpose", perm=[0, 2, 1, 3])
        ctx = g.op("Reshape", [ctx, g.const(f"{p}.ctx_flat", _i64([0, 0, nh * hd]))], name=f"{p}/ctx/flat")
        return self.linear(ctx, lw["o"], f"layers.{i}.attn.o_proj")

    def mlp(self, x: str, lw: Mapping[str, np.ndarray], i: int) -> str:
        g = self.g
        p = f"layers.{i}.mlp"
        gate = self.linear(x, lw["gate"], f"{p}.gate_proj")
        up = self.linear(x, lw["up"], f"{p}.up_proj")
        silu = g.op("Mul", [gate, g.op("Sigmoid", [gate], name=f"{p}/Sigmoid")], name=f"{p}/silu")
        return self.linear(g.op("Mul", [silu, up], name=f"{p}/gated"), lw["down"], f"{p}.down_proj")

    # ---------------------------------------------------------------------------------------------- graph
    def build(self, weights: Mapping[str, np.ndarray], progress: Callable[[Iterable[int]], Iterable[int]]):
        g, cfg = self.g, self.cfg
        kvh, hd, group = cfg.num_kv_heads, cfg.head_dim, cfg.num_heads // cfg.num_kv_heads
        g.const("const.two", np.array(2.0, np.float32))
        g.const("const.eps", np.array(cfg.rms_norm_eps, np.float32))
        g.const("const.attn_scale", np.array(1.0 / np.sqrt(hd), np.float32))
        g.const("const.rope_split", _i64([hd // 2, hd // 2]))
        cos_table, sin_table = rope_tables(cfg)
        g.const("rope.cos", cos_table)
        g.const("rope.sin", sin_table)

        # Sequence bookkeeping: S new tokens after P cached ones; positions P .. P+S-1.
        S = g.op("Shape", ["input_ids"], name="seq/S", start=1, end=2)  # [1]
        P = g.op("Shape", ["past_key_values.0.key"], name="seq/P", start=2, end=3)  # [1]
        T = g.op("Add", [P, S], name="seq/T")
        zero, one = g.const("const.i0", _i64(0)), g.const("const.i1", _i64(1))
        p0 = g.op("Squeeze", [P], name="seq/P0")
        t0 = g.op("Squeeze", [T], name="seq/T0")
        pos = g.op("Range", [p0, t0, one], name="seq/positions")  # [S]
        keys = g.op("Range", [zero, t0, one], name="seq/keys")  # [T]
        cos = g.op("Gather", ["rope.cos", pos], name="rope/cos", axis=0)  # [S, hd]
        sin = g.op("Gather", ["rope.sin", pos], name="rope/sin", axis=0)
        # Causal mask [g*S, T]: key j is visible to the query at position pos[s] iff j <= pos[s].
        future = g.op("Greater", [g.op("Unsqueeze", [keys, zero], name="mask/keys_row"),
                                  g.op("Unsqueeze", [pos, one], name="mask/pos_col")], name="mask/future")
        neg = g.const("const.mask_min", np.array(np.finfo(np.float32).min, np.float32))
        fzero = g.const("const.f0", np.array(0.0, np.float32))
        mask = g.op("Where", [future, neg, fzero], name="mask/additive")
        mask = g.op("Tile", [mask, g.const("mask.repeats", _i64([group, 1]))], name="mask/grouped")
        # Shapes that depend on the batch: [B, kvh, g*S, hd] for grouped queries, [B, S, V] for the logits.
        B = g.op("Shape", ["input_ids"], name="seq/B", start=0, end=1)
        gS = g.op("Mul", [S, g.const("const.group", _i64([group]))], name="seq/gS")
        g.op("Concat", [B, g.const("const.kvh", _i64([kvh])), gS, g.const("const.hd", _i64([hd]))],
             name="attn/grouped_q_shape", axis=0, outputs=["attn.grouped_q_shape"])
        g.op("Concat", [B, S, g.const("const.vocab", _i64([cfg.vocab_size]))], name="lm_head/out_shape", axis=0,
             outputs=["lm_head.out_shape"])

        x = self.embedding("input_ids", weights["embed"])
        for i in progress(range(cfg.num_layers)):
            lw = {k: weights[f"layers.{i}.{k}"] for k in LAYER_TENSORS}
            h = self.attention(self.rmsnorm(x, lw["attn_norm"], f"layers.{i}.attn_norm"), lw, i, cos, sin, mask)
            x = g.op("Add", [x, h], name=f"layers.{i}/residual_attn")
            h = self.mlp(self.rmsnorm(x, lw["ffn_norm"], f"layers.{i}.ffn_norm"), lw, i)
            x = g.op("Add", [x, h], name=f"layers.{i}/residual_mlp")
        self.lm_head(self.rmsnorm(x, weights["norm"], "norm"), weights)

        f32 = TensorProto.FLOAT
        past = ["batch", kvh, "past_sequence_length", hd]
        present = ["batch", kvh, "total_sequence_length", hd]
        inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence_length"])]
        outputs = [helper.make_tensor_value_info("logits", f32, ["batch", "sequence_length", cfg.vocab_size])]
        for i in range(cfg.num_layers):
            for kind in ("key", "value"):
                inputs.append(helper.make_tensor_value_info(f"past_key_values.{i}.{kind}", f32, past))
                outputs.append(helper.make_tensor_value_info(f"present.{i}.{kind}", f32, present))
        graph = helper.make_graph(g.nodes, cfg.name.replace(" ", "_") or "llama", inputs, outputs, g.inits)
        opsets = [helper.make_opsetid("", OPSET)]
        # com.microsoft is always imported: ORT's graph optimizer inserts com.microsoft nodes (FusedMatMul for the
        # attention's Transpose + MatMul) and fails the session ("com.microsoft:FusedMatMul(-1) is not a
        # registered function/op") when the model does not import that domain, as a pure nibble graph would not.
        domains = {n.domain for n in g.nodes if n.domain} | {"com.microsoft"}
        opsets += [helper.make_opsetid(d, 1) for d in sorted(domains)]
        model = helper.make_model(graph, opset_imports=opsets, producer_name="nibble models/llama_onnx.py")
        model.ir_version = 8  # ORT 1.20+ reads IR 8..10; 8 keeps older runtimes working
        return model, g.init_bytes


def expected_shapes(cfg: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor the graph needs, with its shape (weights layout in the module docstring)."""
    H, F, V = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    qd, kd = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    want = {"embed": (V, H), "norm": (H,)}
    if not cfg.tied_embeddings:
        want["lm_head"] = (V, H)
    for i in range(cfg.num_layers):
        want.update({f"layers.{i}.attn_norm": (H,), f"layers.{i}.q": (qd, H), f"layers.{i}.k": (kd, H),
                     f"layers.{i}.v": (kd, H), f"layers.{i}.o": (H, qd), f"layers.{i}.ffn_norm": (H,),
                     f"layers.{i}.gate": (F, H), f"layers.{i}.up": (F, H), f"layers.{i}.down": (H, F)})
    return want


class _Checked(Mapping):
    """The weights, each checked against its expected shape when first read (the source may be lazy: the
    synthetic builder makes each tensor on demand, so a whole 8B model never sits in memory)."""

    def __init__(self, cfg: LlamaConfig, weights: Mapping[str, np.ndarray]) -> None:
        self.want, self.weights = expected_shapes(cfg), weights

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self.weights:
            raise ValueError(f"weight {name} is missing (expected shape {self.want.get(name)})")
        w = self.weights[name]
        if name in self.want and tuple(w.shape) != self.want[name]:
            raise ValueError(f"weight {name} has shape {tuple(w.shape)}, expected {self.want[name]}")
        return w

    def __contains__(self, name) -> bool:
        return name in self.weights

    def __iter__(self):
        return iter(self.want)

    def __len__(self) -> int:
        return len(self.want)


def build_model(cfg: LlamaConfig, weights: Mapping[str, np.ndarray], quant: QuantSpec,
                progress: Callable[[Iterable[int]], Iterable[int]] = lambda r: r) -> tuple[onnx.ModelProto, int]:
    """The ONNX decoder and the number of initializer bytes."""
    return _Builder(cfg, quant).build(_Checked(cfg, weights), progress)


def model_config(cfg: LlamaConfig, quant: QuantSpec) -> dict:
    return {
        "format": FORMAT,
        "name": cfg.name,
        "source": cfg.source,
        "synthetic": cfg.synthetic,
        "num_layers": cfg.num_layers,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_heads": cfg.num_heads,
        "num_kv_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "vocab_size": cfg.vocab_size,
        "context_length": cfg.context_length,
        "rope_theta": cfg.rope_theta,
        "rms_norm_eps": cfg.rms_norm_eps,
        "tied_embeddings": cfg.tied_embeddings,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_ids": list(cfg.eos_token_ids),
        "pad_token_id": cfg.pad_token_id,
        "add_bos_token": cfg.add_bos_token,
        "chat_template": cfg.chat_template,
        "quantization": quant.summary(),
    }


def write_model_dir(out: Path, model: onnx.ModelProto, init_bytes: int, cfg: LlamaConfig, quant: QuantSpec,
                    tokenizer_json: str | None) -> None:
    """model.onnx (+ model.onnx.data when large), tokenizer.json, model_config.json. Writes to temporary names
    first, so an interrupted run never leaves a directory that looks complete."""
    out.mkdir(parents=True, exist_ok=True)
    for stale in ("model.onnx", "model.onnx.data", "model_config.json"):
        (out / stale).unlink(missing_ok=True)
    external = init_bytes > EXTERNAL_DATA_BYTES
    tmp = out / "model.onnx.tmp"
    if external:
        onnx.save_model(model, tmp, save_as_external_data=True, all_tensors_to_one_file=True,
                        location="model.onnx.data", size_threshold=1024)
    else:
        onnx.save_model(model, tmp)
    os.replace(tmp, out / "model.onnx")
    if tokenizer_json is not None:
        (out / "tokenizer.json").write_text(tokenizer_json, encoding="utf-8")
    # model_config.json last: its presence marks a complete directory.
    (out / "model_config.json").write_text(json.dumps(model_config(cfg, quant), indent=2) + "\n", encoding="utf-8")


def add_quant_args(parser) -> None:
    """The quantization options shared by the converter and the synthetic builder."""
    q = parser.add_argument_group("quantization")
    q.add_argument("--bits", type=int, default=4, choices=(0, 2, 4, 8),
                   help="weight bits of the linear layers; 0 = fp32 graph with plain MatMul (default 4)")
    q.add_argument("--block-size", type=int, default=32, help="quantization block size along K (default 32)")
    sym = q.add_mutually_exclusive_group()
    sym.add_argument("--symmetric", dest="symmetric", action="store_true", default=True,
                     help="symmetric quantization, no zero points (default)")
    sym.add_argument("--asymmetric", dest="symmetric", action="store_false",
                     help="asymmetric quantization with uint8 zero points")
    q.add_argument("--accuracy-level", type=int, default=4, choices=(0, 1, 2, 3, 4),
                   help="MatMulNBits accuracy_level: 4 = int8 compute, 1 = fp32 compute (default 4)")
    q.add_argument("--domain", default="com.microsoft", choices=("com.microsoft", "nibble"),
                   help="domain of the MatMulNBits nodes (default com.microsoft: ORT's op, overridden by nibble)")
    q.add_argument("--embedding", default="fp32", choices=("fp32", "q4"),
                   help="token embedding: fp32 Gather, or 4-bit GatherBlockQuantized (default fp32)")
    q.add_argument("--lm-head", default="fp32", choices=("fp32", "quantized"),
                   help="LM head: fp32 Gemm on the tied embedding, or a MatMulNBits like the other layers")


def quant_from_args(args) -> QuantSpec:
    return QuantSpec(bits=args.bits, block_size=args.block_size, symmetric=args.symmetric,
                     accuracy_level=args.accuracy_level, domain=args.domain,
                     embedding="gather_block_quantized" if args.embedding == "q4" else "fp32",
                     lm_head="matmulnbits" if args.lm_head == "quantized" else "fp32")
