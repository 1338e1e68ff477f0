#!/usr/bin/env python3
"""Decode speed under onnxruntime-genai: ORT's own MatMulNBits against nibble's, through both frontends, on the model
scripts/genai-model.sh builds (onnxruntime-genai's builder, SmolLM2-135M-Instruct int4, accuracy_level 4).

    eval "$(scripts/genai-model.sh)"     # sets RUN_PYTHON and MODEL_DIR
    $RUN_PYTHON bench/genai_decode.py --model-root $MODEL_DIR [--lib target/release/libnibble_ort.so] \\
        [--runs 5] [--tokens 128] [--threads 2] [--out bench/results/genai-decode-smollm2.md]

Each configuration is a fresh process (one model, one way of loading nibble, as a user runs it): it loads the model,
warms up once, then times `runs` generations of exactly `tokens` greedy tokens (EOS held off) after a fixed prompt
and reports the median decode rate (tokens after the first / time after the first), the best run (on a machine shared
with other jobs the least disturbed one) and time to first token. The configurations run interleaved, run by run,
so that load from other jobs hits them alike.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PROMPT = "Once upon a time, there was a little girl named Lily. She"
CONFIGS = ("ort", "custom-op", "ep")
LABELS = {"ort": "ORT's own MatMulNBits (no nibble)", "custom-op": "nibble, custom-op library (genai_config)",
          "ep": "nibble, plugin EP (og.register_execution_provider_library)"}


def variant(root: Path, frontend: str, lib: Path, threads: int) -> Path:
    """The model directory for one configuration (files hard-linked from int4/; see tests/genai for why)."""
    src = root / "int4"
    out = root / "bench" / frontend
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for f in src.iterdir():
        if f.name != "genai_config.json":
            try:
                os.link(f, out / f.name)
            except OSError:
                shutil.copy(f, out / f.name)
    config = json.loads((src / "genai_config.json").read_text())
    so = config["model"]["decoder"]["session_options"]
    so["intra_op_num_threads"] = threads
    if frontend == "custom-op":
        shutil.copy(lib, out / lib.name)
        so["custom_ops_library"] = lib.name
    elif frontend == "ep":
        so["provider_options"] = [{"NibbleExecutionProvider": {}}]
    (out / "genai_config.json").write_text(json.dumps(config, indent=2))
    return out


def child(model: str, frontend: str, lib: str, tokens: int) -> None:
    """One timed generation after a warm-up; prints JSON."""
    import numpy as np
    import onnxruntime_genai as og

    if frontend == "ep":
        og.register_execution_provider_library("nibble", lib)
    t0 = time.perf_counter()
    m = og.Model(model)
    load_s = time.perf_counter() - t0
    ids = np.asarray(og.Tokenizer(m).encode(PROMPT), dtype=np.int32)

    def run() -> tuple[float, float]:
        p = og.GeneratorParams(m)
        p.set_search_options(do_sample=False, max_length=len(ids) + tokens, min_length=len(ids) + tokens)
        g = og.Generator(m, p)
        t = time.perf_counter()
        g.append_tokens(ids)
        g.generate_next_token()
        first = time.perf_counter()
        n = 1
        while not g.is_done():
            g.generate_next_token()
            n += 1
        end = time.perf_counter()
        return first - t, (n - 1) / (end - first)

    run()  # warm-up
    ttft, tok_s = run()
    print(json.dumps({"load_s": load_s, "ttft_s": ttft, "decode_tok_s": tok_s}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-root", type=Path, required=True, help="MODEL_DIR printed by scripts/genai-model.sh")
    ap.add_argument("--lib", type=Path, default=REPO_ROOT / "target" / "release" / "libnibble_ort.so")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", type=Path, help="write the Markdown table here")
    ap.add_argument("--child", nargs=3, metavar=("MODEL", "FRONTEND", "LIB"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child, args.tokens)
        return

    import onnxruntime
    import onnxruntime_genai as og

    dirs = {c: variant(args.model_root, c, args.lib, args.threads) for c in CONFIGS}
    results: dict[str, list[dict]] = {c: [] for c in CONFIGS}
    for r in range(args.runs):
        for c in CONFIGS:
            out = subprocess.run([sys.executable, __file__, "--tokens", str(args.tokens), "--model-root", "-",
                                  "--child", str(dirs[c]), c, str(args.lib)],
                                 check=True, capture_output=True, text=True).stdout
            results[c].append(json.loads(out.strip().splitlines()[-1]))
            print(f"run {r + 1}/{args.runs} {c}: {results[c][-1]}", file=sys.stderr)
    shutil.rmtree(args.model_root / "bench", ignore_errors=True)

    cpu = "unknown CPU"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    med = {c: {k: statistics.median(x[k] for x in results[c]) for k in results[c][0]} for c in CONFIGS}
    base = med["ort"]["decode_tok_s"]
    best = {c: max(x["decode_tok_s"] for x in results[c]) for c in CONFIGS}
    lines = [
        f"# Decode speed under onnxruntime-genai: SmolLM2-135M-Instruct, the builder's int4 CPU model",
        "",
        f"{cpu}, {os.cpu_count()} cores ({platform.machine()}), {args.threads} intra-op threads; onnxruntime-genai "
        f"{og.__version__} on onnxruntime {onnxruntime.__version__}; model: `python -m onnxruntime_genai.models."
        f"builder -p int4 -e cpu` on SmolLM2-135M-Instruct (151 MatMulNBits, block 32, symmetric, accuracy_level "
        f"4), made by `scripts/genai-model.sh`. Greedy, {args.tokens} tokens after a {len(PROMPT.split())}-word "
        f"prompt, median of {args.runs} runs (each a fresh process, after one warm-up generation; the "
        f"configurations interleaved run by run).",
        "",
        "| MatMulNBits kernel | decode tok/s, median | vs ORT | best run | vs ORT | all runs (tok/s) | time to first "
        "token (median) | model load |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in CONFIGS:
        m = med[c]
        runs = ", ".join(f"{x['decode_tok_s']:.1f}" for x in results[c])
        lines.append(f"| {LABELS[c]} | {m['decode_tok_s']:.1f} | {m['decode_tok_s'] / base:.2f}x | {best[c]:.1f} | "
                     f"{best[c] / best['ort']:.2f}x | {runs} | {m['ttft_s'] * 1000:.0f} ms | {m['load_s']:.2f} s |")
    cmd = (f"$RUN_PYTHON bench/genai_decode.py --model-root $MODEL_DIR --runs {args.runs} --tokens {args.tokens} "
           f"--threads {args.threads}" + (f" --out {args.out}" if args.out else ""))
    lines += ["", "Command (after `eval \"$(scripts/genai-model.sh)\"`, with `cargo build --release -p nibble-ort`):",
              "", "```sh", cmd, "```", ""]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
