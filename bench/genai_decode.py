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

--profile: the sessions run with ORT's profiler on (which costs some speed: compare the configurations with each
other, not with a run without it), and a second table gives each configuration's time per decode step by operator
type (median over the runs; the timed generation's decode steps only), the MatMulNBits nodes' share, and
MatMulNBits' time against ORT's both raw and scaled by the other operators' time in the same run (which nibble does
not touch: on a machine whose speed drifts between processes, that factor takes the drift out).
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


def variant(root: Path, frontend: str, lib: Path, threads: int, profile: bool = False) -> Path:
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
    if profile:
        so["enable_profiling"] = str(out / "profile")
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


def op_times(model_dir: Path, tokens: int) -> tuple[float, dict[str, float]]:
    """From the newest profile under `model_dir` (removed afterwards, with any older one): the median decode step
    (µs) of the last generation (its last `tokens` - 1 model runs) and its µs per step by operator type."""
    files = sorted(model_dir.glob("profile*.json"), key=lambda f: f.stat().st_mtime)
    events = json.loads(files[-1].read_text())
    for f in files:
        f.unlink()
    runs = sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
                  key=lambda e: e["ts"])
    steps = runs[-(tokens - 1):]
    t0, t1 = steps[0]["ts"], steps[-1]["ts"] + steps[-1]["dur"]
    per_op: dict[str, float] = {}
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time") and t0 <= e["ts"] <= t1:
            op = e["args"].get("op_name", "?")
            per_op[op] = per_op.get(op, 0.0) + e["dur"] / len(steps)
    return statistics.median(e["dur"] for e in steps), per_op


def profile_table(results: dict[str, list[tuple[float, dict[str, float]]]]) -> list[str]:
    """The --profile table: median µs per decode step, whole and by operator type, per configuration."""
    step = {c: statistics.median(r[0] for r in rs) for c, rs in results.items()}
    ops = sorted({op for rs in results.values() for r in rs for op in r[1]})
    med = {c: {op: statistics.median(r[1].get(op, 0.0) for r in rs) for op in ops} for c, rs in results.items()}
    ops.sort(key=lambda op: -med["ort"][op])
    mm = {c: med[c]["MatMulNBits"] for c in results}
    other = {c: sum(med[c].values()) - mm[c] for c in results}
    row = lambda label, cells: f"| {label} | " + " | ".join(cells) + " |"  # noqa: E731
    return [
        row("µs per decode step (median)", [LABELS[c] for c in results]),
        "|---|" + "---|" * len(results),
        row("model_run (the whole step)", [f"{step[c]:.0f}" for c in results]),
        *(row(op, [f"{med[c][op]:.0f}" for c in results]) for op in ops),
        row("MatMulNBits share of the nodes' time", [f"{mm[c] / (mm[c] + other[c]):.0%}" for c in results]),
        row("MatMulNBits time / ORT's (raw; scaled by the other operators' time)",
            [f"{mm[c] / mm['ort']:.2f}; {mm[c] / mm['ort'] * other['ort'] / other[c]:.2f}" for c in results]),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-root", type=Path, required=True, help="MODEL_DIR printed by scripts/genai-model.sh")
    ap.add_argument("--lib", type=Path, default=REPO_ROOT / "target" / "release" / "libnibble_ort.so")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", type=Path, help="write the Markdown table here")
    ap.add_argument("--profile", action="store_true", help="ORT's profiler on: time per decode step by operator")
    ap.add_argument("--child", nargs=3, metavar=("MODEL", "FRONTEND", "LIB"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.profile and args.tokens < 2:
        ap.error(f"--profile times decode steps: --tokens must be at least 2, not {args.tokens}")
    if args.child:
        child(*args.child, args.tokens)
        return

    import onnxruntime
    import onnxruntime_genai as og

    dirs = {c: variant(args.model_root, c, args.lib, args.threads, args.profile) for c in CONFIGS}
    results: dict[str, list[dict]] = {c: [] for c in CONFIGS}
    profiles: dict[str, list[tuple[float, dict[str, float]]]] = {c: [] for c in CONFIGS}
    for r in range(args.runs):
        for c in CONFIGS:
            out = subprocess.run([sys.executable, __file__, "--tokens", str(args.tokens), "--model-root", "-",
                                  "--child", str(dirs[c]), c, str(args.lib)],
                                 check=True, capture_output=True, text=True).stdout
            results[c].append(json.loads(out.strip().splitlines()[-1]))
            if args.profile:
                profiles[c].append(op_times(dirs[c], args.tokens))
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
    if args.profile:
        lines += ["", "With ORT's profiler on (`--profile`): time per decode step by operator type, the timed "
                  "generations' decode steps, median over the runs.", "", *profile_table(profiles)]
    cmd = (f"$RUN_PYTHON bench/genai_decode.py --model-root $MODEL_DIR --runs {args.runs} --tokens {args.tokens} "
           f"--threads {args.threads}" + (" --profile" if args.profile else "")
           + (f" --out {args.out}" if args.out else ""))
    lines += ["", "Command (after `eval \"$(scripts/genai-model.sh)\"`, with `cargo build --release -p nibble-ort`):",
              "", "```sh", cmd, "```", ""]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
