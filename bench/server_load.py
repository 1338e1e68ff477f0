#!/usr/bin/env python3
"""Load test of the chat server (examples/server, nibble-serve) on loopback: C clients, each sending R streamed
chat requests one after another, all clients at once. Reports, per server configuration, p50/p95 of the time to
first token as the client sees it (queue + tokenization + prefill), of the server's own TTFT (prefill only), of
each request's decode tok/s (its tokens while it shares the model with the other answers), and the aggregate
generated tok/s (all tokens / the whole run's wall time). Not a test: a benchmark (bench/README.md).

By default it starts the server itself, once per --kernels entry (nibble, then ORT's own kernels with --no-nibble),
on a free port, and stops it after the run; --url measures a server that is already running instead.

  .venv/bin/python bench/server_load.py                          8 clients x 5 requests, nibble and ORT, 3 runs
  .venv/bin/python bench/server_load.py --clients 4 --requests 10 --max-tokens 128 --server-arg=--parallel=8
  .venv/bin/python bench/server_load.py --url http://127.0.0.1:8080 --model smollm2-q4
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
QUESTIONS = [
    "What is the capital of France, and why is it famous?",
    "Explain in three sentences how a bicycle stays upright.",
    "Write a short poem about the sea.",
    "What are the main differences between a cat and a dog as pets?",
    "Give me three tips for learning a new language.",
    "Why is the sky blue?",
    "Describe a good breakfast.",
    "What does a computer's CPU do?",
]


def percentile(xs: list[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    s = sorted(xs)
    if not s:
        return float("nan")
    k = (len(s) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def one_request(url: str, model: str, question: str, max_tokens: int, seed: int) -> dict:
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": question}], "stream": True,
                       "stream_options": {"include_usage": True}, "max_tokens": max_tokens, "temperature": 0.7,
                       "seed": seed})
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        return {"status": r.status, "error": r.read().decode(errors="replace")[:300]}
    first = None
    usage = None
    buf = b""
    while True:
        chunk = r.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    continue
                j = json.loads(data)
                if "error" in j:
                    return {"status": 500, "error": j["error"]["message"]}
                if j.get("usage"):
                    usage = j["usage"]
                c = j.get("choices") or []
                if first is None and c and c[0].get("delta", {}).get("content"):
                    first = time.perf_counter()
    end = time.perf_counter()
    conn.close()
    if usage is None:
        return {"status": 0, "error": "no usage block"}
    return {"status": 200, "client_ttft_s": (first or end) - t0, "wall_s": end - t0, **usage}


def run_load(url: str, model: str, clients: int, requests: int, max_tokens: int) -> dict:
    results: list[dict] = []
    lock = threading.Lock()

    def client(c: int):
        for i in range(requests):
            q = QUESTIONS[(c + i) % len(QUESTIONS)]
            r = one_request(url, model, q, max_tokens, seed=1000 * c + i)
            with lock:
                results.append(r)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ok = [r for r in results if r["status"] == 200]
    failed = [r for r in results if r["status"] != 200]
    tokens = sum(r["completion_tokens"] for r in ok)
    dec = [r["decode_tok_s"] for r in ok if r.get("decode_tok_s")]
    return {
        "ok": len(ok), "failed": len(failed), "errors": sorted({f"{r['status']}: {r['error']}" for r in failed}),
        "wall_s": wall, "completion_tokens": tokens, "aggregate_tok_s": tokens / wall,
        "client_ttft_p50": percentile([r["client_ttft_s"] for r in ok], 50),
        "client_ttft_p95": percentile([r["client_ttft_s"] for r in ok], 95),
        "server_ttft_p50": percentile([r["ttft_s"] for r in ok], 50),
        "server_ttft_p95": percentile([r["ttft_s"] for r in ok], 95),
        "queue_p50": percentile([r["queue_s"] for r in ok], 50),
        "queue_p95": percentile([r["queue_s"] for r in ok], 95),
        # decode tok/s per request: p5 is the slow tail (low is bad), p50 the typical one
        "decode_p50": percentile(dec, 50),
        "decode_p5": percentile(dec, 5),
    }


class Spawned:
    def __init__(self, args: list[str]):
        exe = TARGET / "release" / "nibble-serve"
        if not exe.is_file():
            sys.exit(f"{exe} missing: cargo build --release -p nibble-ort -p nibble-llama -p nibble-serve")
        self.proc = subprocess.Popen([str(exe), "--port", "0", *args], stderr=subprocess.PIPE, text=True,
                                     env=dict(os.environ, ORT_LOG="fatal"))
        self.models: list[str] = []
        self.url = None
        while self.url is None:
            line = self.proc.stderr.readline()
            if not line:
                sys.exit(f"nibble-serve exited with {self.proc.wait()} before listening")
            ev = json.loads(line)
            if ev.get("event") == "model_loaded":
                self.models.append(ev["model"])
                self.description = ev["description"]
            if ev.get("event") == "listening":
                self.url = ev["url"].rstrip("/")
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()  # keep the log pipe from filling

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=5, help="requests per client, one after another")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3, help="runs per configuration (medians reported)")
    ap.add_argument("--kernels", default="nibble,ort", help="spawned servers: nibble and/or ort (--no-nibble)")
    ap.add_argument("--server-arg", action="append", default=[], help="extra nibble-serve option (repeatable)")
    ap.add_argument("--url", help="measure this running server instead of spawning one")
    ap.add_argument("--model", help="model id (default: the server's first)")
    ap.add_argument("--json", type=Path, help="write every run's figures here")
    a = ap.parse_args()
    for name in ("clients", "requests", "max_tokens", "repeat"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")

    configs = []
    if a.url:
        configs.append(("server at " + a.url, None))
    else:
        for k in a.kernels.split(","):
            if k not in ("nibble", "ort"):
                ap.error(f"--kernels: unknown {k!r} (nibble, ort)")
            configs.append((k, [*(["--no-nibble"] if k == "ort" else []), *a.server_arg]))

    rows, dump = [], []
    for label, server_args in configs:
        runs = []
        for i in range(a.repeat):
            srv = Spawned(server_args) if server_args is not None else None
            url = srv.url if srv else a.url.rstrip("/")
            model = a.model or (srv.models[0] if srv else
                                json.loads(urllib.request.urlopen(url + "/v1/models").read())["data"][0]["id"])
            try:
                run_load(url, model, 1, 1, 8)  # warm-up: first-run allocations out of the figures
                r = run_load(url, model, a.clients, a.requests, a.max_tokens)
            finally:
                if srv:
                    srv.stop()
            r.update(label=label, run=i + 1, model=model, description=srv.description if srv else "")
            print(f"[{label} run {i + 1}] {r['ok']} ok, {r['failed']} failed, {r['aggregate_tok_s']:.1f} tok/s "
                  f"aggregate, TTFT p50 {r['client_ttft_p50']:.3f} s", file=sys.stderr)
            if r["failed"]:
                print(f"  errors: {r['errors']}", file=sys.stderr)
            runs.append(r)
            dump.append(r)
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0] if isinstance(runs[0][k], (int, float))}
        rows.append((label, runs[0]["description"], med))
    if a.json:
        a.json.write_text(json.dumps(dump, indent=1))

    print(f"{a.clients} clients x {a.requests} requests, streamed, up to {a.max_tokens} new tokens, temperature "
          f"0.7 (seeded), medians of {a.repeat} runs\n")
    print("| kernels | requests ok / failed | TTFT p50 / p95 (client) | TTFT p50 / p95 (server: prefill) | "
          "queue p50 / p95 | decode tok/s per request p50 / p5 | aggregate tok/s | wall time |")
    print("|---|---|---|---|---|---|---|---|")
    for label, desc, m in rows:
        print(f"| {label}{' — ' + desc if desc else ''} | {m['ok']:.0f} / {m['failed']:.0f} | "
              f"{m['client_ttft_p50']:.3f} / {m['client_ttft_p95']:.3f} s | "
              f"{m['server_ttft_p50']:.3f} / {m['server_ttft_p95']:.3f} s | "
              f"{m['queue_p50']:.3f} / {m['queue_p95']:.3f} s | {m['decode_p50']:.1f} / {m['decode_p5']:.1f} | "
              f"{m['aggregate_tok_s']:.1f} | {m['wall_s']:.1f} s |")


if __name__ == "__main__":
    main()
