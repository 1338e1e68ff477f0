#!/usr/bin/env python3
"""End-to-end prefill and decode of a long prompt: ORT's built-in MatMulNBits against nibble's, same model, same
process settings, runs interleaved (ORT, nibble, ORT, nibble, ...) so drift on a noisy machine hits both.

    .venv/bin/python bench/e2e_prompt.py --model target/llama/smollm2-q4 --tokens 512 --threads "1 2" --runs 3 \\
        --out bench/results/x86-e2e-512/smollm2-q4

The prompt is the first --tokens tokens of exllamav2's wiki.utf8 (models/perplexity.py's "wiki" text) in the
model's own tokenizer, decoded back to text and given to `nibble-llama --raw` (no chat template), so the prefill
runs exactly that many tokens (checked against the driver's own count). Each run is one `nibble-llama` process
(`--quiet --json`: session creation, one prefill, --max-new-tokens greedy decode steps); `--no-nibble` runs ORT's
kernel. Writes RUN.json per run into --out, and prints (and writes to --out/summary.md) the medians, the spread
(min-max) and nibble / ORT per thread count. A benchmark: never part of the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "models"))
import perplexity as P  # noqa: E402


def cpu_name() -> str:
    try:
        return next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown CPU"


def prompt_text(model: Path, tokens: int) -> str:
    """The wiki text cut so that the model's tokenizer makes exactly `tokens` tokens of it (a decode / encode round
    trip can merge or split a token at the cut: the cut moves until the count holds)."""
    tok = P.load_tokenizer(model)
    ids = P.text_tokens("wiki", tok, tokens + 16)
    for cut in sorted(range(max(1, tokens - 16), min(len(ids), tokens + 16) + 1), key=lambda c: abs(c - tokens)):
        text = tok.decode(ids[:cut])
        if len(tok.encode(text, add_special_tokens=False).ids) == tokens:
            return text
    raise SystemExit(f"e2e_prompt: no cut of the wiki text tokenizes to {tokens} tokens")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, type=Path, help="model directory (com.microsoft MatMulNBits)")
    ap.add_argument("--tokens", type=int, default=512, help="prompt length in tokens (default 512)")
    ap.add_argument("--threads", default="1 2", help="intra-op thread counts (default \"1 2\")")
    ap.add_argument("--runs", type=int, default=3, help="runs per kernel and thread count (default 3)")
    ap.add_argument("--max-new-tokens", type=int, default=32, help="greedy decode steps (default 32)")
    ap.add_argument("--bin", type=Path, default=ROOT / "target/release/nibble-llama")
    ap.add_argument("--lib", type=Path, default=ROOT / "target/release/libnibble_ort.so")
    ap.add_argument("--ort-dylib", type=Path, default=ROOT / ".cache/ort/1.31.1/libonnxruntime.so.1.31.1")
    ap.add_argument("--out", type=Path, required=True, help="directory for the per-run JSON and summary.md")
    args = ap.parse_args()

    text = prompt_text(args.model, args.tokens)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for threads in [int(t) for t in args.threads.split()]:
        for run in range(1, args.runs + 1):
            for kernels in ("ORT", "nibble"):
                path = args.out / f"{kernels.lower()}-t{threads}-r{run}.json"
                cmd = [str(args.bin), "--model", str(args.model), "--lib", str(args.lib), "--ort-dylib",
                       str(args.ort_dylib), "--raw", "--prompt", text, "--threads", str(threads),
                       "--max-new-tokens", str(args.max_new_tokens), "--quiet", "--json", str(path)]
                if kernels == "ORT":
                    cmd.append("--no-nibble")
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode != 0:
                    raise SystemExit(f"e2e_prompt: nibble-llama failed ({r.returncode}):\n{r.stdout}{r.stderr}")
                doc = json.loads(path.read_text())
                rows.append({"threads": threads, "kernels": kernels, "run": run, **doc})
                print(f"[e2e] t{threads} r{run} {kernels:6}: {doc['prompt_tokens']} prompt tokens, prefill "
                      f"{doc['prefill_tok_s']:.1f} tok/s, decode {doc['decode_tok_s']:.2f} tok/s", file=sys.stderr)
    counts = {r["prompt_tokens"] for r in rows}
    if counts != {args.tokens} and counts != {args.tokens + 1}:  # +1: a BOS the model config asks for
        raise SystemExit(f"e2e_prompt: prompt token counts {sorted(counts)}, expected {args.tokens}")

    def cell(values: list[float], digits: int) -> str:
        return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"

    lines = [
        f"Model `{args.model.name}`, {rows[0]['prompt_tokens']} prompt tokens (wiki.utf8, `--raw`), "
        f"{args.max_new_tokens} new tokens, {args.runs} runs per cell interleaved; {cpu_name()}, "
        f"{os.cpu_count()} cores. Cells: median (min-max).",
        "",
        "| threads | kernels | prefill tok/s | decode tok/s | TTFT s | prefill x ORT | decode x ORT |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for threads in sorted({r["threads"] for r in rows}):
        med = {}
        for kernels in ("ORT", "nibble"):
            rs = [r for r in rows if r["threads"] == threads and r["kernels"] == kernels]
            pre, dec, ttft = ([r[k] for r in rs] for k in ("prefill_tok_s", "decode_tok_s", "ttft_s"))
            med[kernels] = (statistics.median(pre), statistics.median(dec))
            ratio = ("", "")
            if kernels == "nibble":
                ratio = (f"**{med['nibble'][0] / med['ORT'][0]:.2f}**", f"**{med['nibble'][1] / med['ORT'][1]:.2f}**")
            lines.append(f"| {threads} | {kernels} | {cell(pre, 1)} | {cell(dec, 2)} | {cell(ttft, 3)} | "
                         f"{ratio[0]} | {ratio[1]} |")
    summary = "\n".join(lines) + "\n"
    (args.out / "summary.md").write_text(summary)
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
