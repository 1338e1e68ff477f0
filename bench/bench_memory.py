#!/usr/bin/env python3
"""Weight memory of MatMulNBits models: ORT's built-in op vs nibble's custom-op frontend vs nibble's execution
provider, measured as resident memory (RSS) of a fresh process.

    .venv/bin/python bench/bench_memory.py synthetic [--nodes 26 --k 4096 --n 4096 --block-size 32] [--repeat 3]
    .venv/bin/python bench/bench_memory.py model DIR_OR_MODEL.onnx [--decode-steps 16] [--repeat 3]

Each measurement runs in its own Python process (nothing shared with earlier ones), one intra-op thread:
  before    RSS after importing onnxruntime (and registering the EP library), before the session
  created   RSS after InferenceSession(...) returned          weight memory = created/after-run minus before
  after     RSS after one Run (synthetic), or after a 16-token prefill + 16 greedy decode steps (a model directory of
            the Llama driver, models/LLAMA_MODEL_DIR.md; the KV cache fed back as the driver does)
  peak      VmHWM (the process's peak RSS) at the end
  second    RSS added by a second session of the same model in the same process (sharing)
  create_s  wall time of session creation
Printed as a Markdown table with the medians over --repeat processes; --json writes the raw rows.

The measuring process is this file run with `--child` (an internal flag).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODES = ("ort", "custom-op", "ep")
EP_NAME = "NibbleExecutionProvider"


def rss_mib() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in MiB."""
    vals = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            key, kb = line.split(":")
            vals[key] = int(kb.split()[0]) / 1024
    return vals["VmRSS"], vals["VmHWM"]


def make_synthetic(path: Path, nodes: int, k: int, n: int, block_size: int, seed: int = 0) -> int:
    """`nodes` independent MatMulNBits nodes (4-bit, uint8 zero points, float scales) reading one input X [1, K],
    weights in external data next to `path`. Returns the bytes of 4-bit weights (B only)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    k_blocks = (k + block_size - 1) // block_size
    blob = block_size // 2
    inits, outs, ops = [], [], []
    for i in range(nodes):
        b = rng.integers(0, 256, size=(n, k_blocks, blob), dtype=np.uint8)
        scales = (rng.random(n * k_blocks, dtype=np.float32) * 0.02 + 0.001).astype(np.float32)
        zp = rng.integers(0, 256, size=(n * ((k_blocks + 1) // 2),), dtype=np.uint8)
        inits += [numpy_helper.from_array(b, f"B{i}"), numpy_helper.from_array(scales, f"S{i}"),
                  numpy_helper.from_array(zp, f"Z{i}")]
        ops.append(helper.make_node("MatMulNBits", ["X", f"B{i}", f"S{i}", f"Z{i}"], [f"Y{i}"], domain="com.microsoft",
                                    K=k, N=n, bits=4, block_size=block_size, accuracy_level=4, name=f"mm{i}"))
        outs.append(helper.make_tensor_value_info(f"Y{i}", TensorProto.FLOAT, [1, n]))
    graph = helper.make_graph(ops, "memory", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, k])], outs,
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 9
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=path.name + ".data", size_threshold=1024)
    return nodes * n * k_blocks * blob


def child(args: argparse.Namespace) -> None:
    """One measurement in this (fresh) process; prints one JSON line."""
    import numpy as np
    import onnxruntime as ort

    lib = str(Path(args.lib).resolve())
    devices = None
    if args.mode == "ep":
        ort.register_execution_provider_library("nibble", lib)
        devices = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]

    def options() -> ort.SessionOptions:
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        if args.mode == "custom-op":
            so.register_custom_ops_library(lib)
        elif args.mode == "ep":
            so.add_provider_for_devices(devices, {})
        return so

    def session(model: str) -> ort.InferenceSession:
        so = options()
        if so.has_providers():
            return ort.InferenceSession(model, so, enable_fallback=0)
        return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])

    model = args.model
    before, _ = rss_mib()
    t0 = time.perf_counter()
    s1 = session(model)
    create_s = time.perf_counter() - t0
    created, _ = rss_mib()
    work = llama_work(model, args.decode_steps) if args.decode_steps else single_run
    work(s1)
    after_run, _ = rss_mib()
    s2 = session(model)
    work(s2)
    second, peak = rss_mib()
    del s2
    print(json.dumps({"mode": args.mode, "before": before, "created": created, "after_run": after_run,
                      "second": second - after_run, "peak": peak, "create_s": create_s}))


def single_run(sess) -> None:
    """One Run with every input filled with ones (dynamic dimensions 1)."""
    import numpy as np

    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        dtype = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64}[i.type]
        feeds[i.name] = np.ones(shape, dtype=dtype)
    sess.run(None, feeds)


PROMPT_TOKENS = 16


def llama_work(model: str, steps: int):
    """A Llama driver graph (models/LLAMA_MODEL_DIR.md): prefill of PROMPT_TOKENS tokens, then `steps` greedy
    decode steps feeding the KV cache back, as the driver does."""
    import numpy as np

    cfg = json.loads((Path(model).parent / "model_config.json").read_text())
    layers, kv_heads, head_dim = cfg["num_layers"], cfg["num_kv_heads"], cfg["head_dim"]

    def work(sess) -> None:
        ids = (np.arange(PROMPT_TOKENS, dtype=np.int64) % 1000 + 100)[None, :]
        past = {f"past_key_values.{i}.{kv}": np.zeros((1, kv_heads, 0, head_dim), np.float32)
                for i in range(layers) for kv in ("key", "value")}
        outputs = ["logits"] + [f"present.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
        for _ in range(steps + 1):
            res = sess.run(outputs, {"input_ids": ids, **past})
            ids = np.array([[int(res[0][0, -1].argmax())]], dtype=np.int64)
            past = {name.replace("present", "past_key_values"): v for name, v in zip(outputs[1:], res[1:])}

    return work


def run_modes(model: Path, args: argparse.Namespace, extra: dict) -> list:
    """(mode, medians, raw runs) per mode, each run a fresh process."""
    rows = []
    for mode in args.modes.split(","):
        runs = [measure(model, mode, Path(args.lib), extra["decode_steps"]) for _ in range(args.repeat)]
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0] if k != "mode"}
        rows.append((mode, med, runs))
    return rows


def measure(model: Path, mode: str, lib: Path, decode_steps: int = 0) -> dict:
    cmd = [sys.executable, __file__, "--child", "--mode", mode, "--lib", str(lib), "--model", str(model),
           "--decode-steps", str(decode_steps)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", nargs="?", choices=["synthetic", "model"], default="synthetic")
    ap.add_argument("path", nargs="?", type=Path, help="model: a Llama model directory (or its model.onnx)")
    ap.add_argument("--decode-steps", type=int, default=16, help="model: greedy decode steps after the prefill")
    ap.add_argument("--nodes", type=int, default=26)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--lib", default=os.environ.get("NIBBLE_LIB", REPO / "target/release/libnibble_ort.so"))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    import onnxruntime as ort

    if args.what == "model":
        if args.path is None:
            ap.error("model: give the model directory")
        model = args.path / "model.onnx" if args.path.is_dir() else args.path
        cfg = json.loads((model.parent / "model_config.json").read_text())
        q = cfg.get("quantization") or {}
        title = (f"{cfg.get('name', model.parent.name)} ({model.parent}), int{q.get('bits')} bs{q.get('block_size')} "
                 f"acc{q.get('accuracy_level')} lm_head {q.get('lm_head')}; weights on disk "
                 f"{sum(f.stat().st_size for f in model.parent.iterdir() if f.name.startswith('model.onnx')) / 2**20:.0f} MiB"
                 f"; after = after a {PROMPT_TOKENS}-token prefill + {args.decode_steps} decode steps")
        rows = run_modes(model, args, {"decode_steps": args.decode_steps})
    else:
        with tempfile.TemporaryDirectory() as tmp:
            model = Path(tmp) / "memory.onnx"
            weight_bytes = make_synthetic(model, args.nodes, args.k, args.n, args.block_size)
            title = (f"{args.nodes} x MatMulNBits {args.k}x{args.n} bs{args.block_size} 4-bit "
                     f"(B {weight_bytes / 2**20:.0f} MiB); after = after one Run")
            rows = run_modes(model, args, {"decode_steps": 0})
    print(f"ONNX Runtime {ort.__version__}; {title}; one thread; medians of {args.repeat} processes (MiB, s)\n")
    print("| frontend | weights after session | weights after | peak - before | 2nd session adds | create s |")
    print("|---|---|---|---|---|---|")
    for mode, m, _ in rows:
        print(f"| {mode} | {m['created'] - m['before']:.0f} | {m['after_run'] - m['before']:.0f} | "
              f"{m['peak'] - m['before']:.0f} | {m['second']:.0f} | {m['create_s']:.2f} |")
    if args.json:
        args.json.write_text(json.dumps([{"mode": m, "runs": r} for m, _, r in rows], indent=1))


if __name__ == "__main__":
    main()
