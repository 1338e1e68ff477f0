#!/usr/bin/env python3
"""Token embedding lookup: fp32 Gather vs com.microsoft::GatherBlockQuantized (4-bit, block 32) in ONNX Runtime.

    .venv/bin/python bench/bench_embedding.py [--repeat 200]

For each (vocab, hidden) of SmolLM2-135M, Llama-3.2-1B and Llama-3-8B and each number of tokens (1 = decode,
512 = prefill) it prints the median time per call and the table's bytes. Random weights; one thread.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
import llama_onnx  # noqa: E402

SHAPES = {"smollm2-135m": (49152, 576), "llama3.2-1b": (128256, 2048), "llama3-8b": (128256, 4096)}


def model(kind: str, table: np.ndarray, block_size: int = 32):
    V, H = table.shape
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [1, "s"])
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "s", H])
    if kind == "gather":
        inits = [numpy_helper.from_array(table, "table")]
        node = helper.make_node("Gather", ["table", "ids"], ["y"], axis=0)
    else:
        q = llama_onnx.quantize_rows(table, 4, block_size, symmetric=True)
        inits = [numpy_helper.from_array(q.B.reshape(V, -1)[:, : H // 2], "data"),
                 numpy_helper.from_array(q.scales, "scales")]
        node = helper.make_node("GatherBlockQuantized", ["data", "ids", "scales"], ["y"], domain="com.microsoft",
                                bits=4, block_size=block_size, gather_axis=0, quantize_axis=1)
    g = helper.make_graph([node], "emb", [ids], [out], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]), \
        sum(t.raw_data.__len__() for t in inits)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'model':14} {'op':22} {'table MB':>9} {'tokens':>6} {'median us':>10}")
    for name, (V, H) in SHAPES.items():
        table = (rng.standard_normal((V, H), dtype=np.float32) * 0.05).astype(np.float32)
        for kind in ("gather", "gather_block_quantized"):
            sess, nbytes = model(kind, table)
            for s in (1, 512):
                ids = rng.integers(0, V, size=(1, s), dtype=np.int64)
                sess.run(None, {"ids": ids})
                times = []
                for _ in range(args.repeat if s == 1 else max(args.repeat // 10, 5)):
                    t = time.perf_counter()
                    sess.run(None, {"ids": ids})
                    times.append(time.perf_counter() - t)
                print(f"{name:14} {kind:22} {nbytes / 1e6:9.1f} {s:6d} {np.median(times) * 1e6:10.1f}")
        del table


if __name__ == "__main__":
    main()
