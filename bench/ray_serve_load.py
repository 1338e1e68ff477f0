#!/usr/bin/env python3
"""What the Ray Serve layer (examples/ray) costs: the same load as bench/server_load.py against nibble-serve alone,
against Ray Serve with 1 replica (all CPUs), and with 2 replicas (1 CPU each), on one machine, the same total
number of answers generating at once in every configuration (--slots). Not a test: a benchmark (bench/README.md).

--repeat rounds; in each, every configuration in turn (so that a change in the machine's other load hits all of them
alike): C clients x R streamed requests, then one client alone (requests one after another: what one request and
one token cost through the proxy when nothing else runs), and the resident memory of the processes (nibble-serve,
the replica, Ray's own). Medians over the rounds with their min-max spreads.

  .venv/bin/python bench/ray_serve_load.py                 8 clients x 3 requests, 64 tokens, 8 slots, 3 runs
  .venv/bin/python bench/ray_serve_load.py --alone-threads 2,1 --json out.json   (also nibble-serve with 1 thread)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "examples" / "ray"))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "examples" / "ray"),
                                                         os.environ.get("PYTHONPATH")]))
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import server_load  # noqa: E402  bench/server_load.py: the load generator and the spawned nibble-serve

MODEL = "smollm2-q4"


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat[stat.rindex(")") + 2:].split()[1]), []).append(int(d))
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.add(c)
            todo.append(c)
    return out


def replica_pids(url: str, n: int) -> dict[str, tuple[int, int]]:
    """replica id -> (replica pid, nibble-serve pid), from the headers of fresh-connection requests."""
    seen: dict[str, tuple[int, int]] = {}
    deadline = time.time() + 60
    while len(seen) < n and time.time() < deadline:
        req = urllib.request.Request(url + "/v1/models", headers={"Connection": "close"})
        with urllib.request.urlopen(req, timeout=30) as r:
            h = r.headers
            seen[h["x-nibble-replica"]] = (int(h["x-nibble-replica-pid"]), int(h["x-nibble-pid"]))
    return seen


def single_client(url: str, n: int, max_tokens: int) -> dict:
    """One client, n requests one after another: client TTFT minus server TTFT (the per-request cost outside the
    generator: HTTP, chat template, proxy hops), and per token (client-side decode time minus the server's, over
    the tokens after the first)."""
    per_req, per_tok, ttft = [], [], []
    for i in range(n):
        r = server_load.one_request(url, MODEL, server_load.QUESTIONS[i % len(server_load.QUESTIONS)], max_tokens,
                                    seed=i)
        assert r["status"] == 200, r
        ttft.append(r["client_ttft_s"])
        per_req.append(r["client_ttft_s"] - r["ttft_s"])
        if r["completion_tokens"] > 1:
            per_tok.append(((r["wall_s"] - r["client_ttft_s"]) - r["decode_s"]) / (r["completion_tokens"] - 1))
    return {"ttft_1": statistics.median(ttft), "overhead_req_ms": 1000 * statistics.median(per_req),
            "overhead_tok_ms": 1000 * statistics.median(per_tok)}


def measure(label: str, url: str, a, memory, out: dict) -> None:
    """One round of one configuration: a warm-up, one run of the load, the one-client run, the memory."""
    r = out.setdefault(label, {"label": label, "runs": [], "single": [], "memory": []})
    # Warm-up: as many concurrent short requests as there are slots, so that every replica has run (its first
    # requests pay ORT's first-run allocations) before anything is measured.
    server_load.run_load(url, MODEL, a.slots, 1, 8)
    run = server_load.run_load(url, MODEL, a.clients, a.requests, a.max_tokens)
    print(f"[{label} round {len(r['runs']) + 1}] {run['ok']} ok, {run['failed']} failed, "
          f"{run['aggregate_tok_s']:.1f} tok/s, TTFT p50 {run['client_ttft_p50']:.3f} s p95 "
          f"{run['client_ttft_p95']:.3f} s", file=sys.stderr, flush=True)
    one = single_client(url, a.single, a.max_tokens)
    print(f"[{label} round {len(r['runs']) + 1}, 1 client] {one}", file=sys.stderr, flush=True)
    r["runs"].append(run)
    r["single"].append(one)
    r["memory"].append(memory())


def stat(runs: list[dict], key: str, fmt: str) -> str:
    xs = [r[key] for r in runs]
    return f"{statistics.median(xs):{fmt}} ({min(xs):{fmt}}–{max(xs):{fmt}})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--single", type=int, default=6, help="requests of the one-client run")
    ap.add_argument("--slots", type=int, default=8, help="answers generating at once, in total (--parallel)")
    ap.add_argument("--alone-threads", default=str(os.cpu_count()),
                    help="nibble-serve alone with these thread counts (comma-separated; default: all CPUs)")
    ap.add_argument("--port", type=int, default=18401)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    a.alone_threads = [int(t) for t in a.alone_threads.split(",")]
    cpus = os.cpu_count()
    out: dict[str, dict] = {}

    import ray
    from ray import serve

    import nibble_ray

    # One Ray cluster for the whole run (idle while nibble-serve alone is measured); the configurations take turns,
    # round after round, so that a change in the machine's other load hits them all alike.
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, object_store_memory=150 * 1024 * 1024)
    try:
        serve.start(proxy_location="EveryNode", http_options={"host": "127.0.0.1", "port": a.port})
        url = f"http://127.0.0.1:{a.port}"
        for _ in range(a.repeat):
            # nibble-serve alone, with each --alone-threads count
            for threads in a.alone_threads:
                srv = server_load.Spawned(["--model-id", MODEL, "--parallel", str(a.slots), "--threads", str(threads)])
                try:
                    measure(f"nibble-serve alone ({threads} thread{'s' if threads > 1 else ''}, --parallel {a.slots})",
                            srv.url, a, lambda: {"nibble-serve": rss_mib(srv.proc.pid)}, out)
                finally:
                    srv.stop()
            # Ray Serve: 1 replica x all CPUs, 2 replicas x half
            for n in (1, 2):
                per = cpus // n
                # max_ongoing_requests = parallel: Ray sends a replica no more than it generates at once, and holds
                # the rest for whichever replica frees a slot first (no queue inside one replica while another idles)
                app = nibble_ray.NibbleChat.options(num_replicas=n, ray_actor_options={"num_cpus": per},
                                                    max_ongoing_requests=a.slots // n).bind(
                    model_id=MODEL, parallel=a.slots // n, queue=16)
                serve.run(app, name="nibble", route_prefix="/")
                pids = replica_pids(url, n)
                assert len(pids) == n, pids

                def memory(pids=pids):
                    m = {}
                    for k, (rp, sp) in enumerate(pids.values()):
                        m[f"replica {k + 1}: Python"] = rss_mib(rp)
                        m[f"replica {k + 1}: nibble-serve"] = rss_mib(sp)
                    ours = {p for rp, sp in pids.values() for p in (rp, sp)}
                    m["Ray's own processes"] = sum(rss_mib(p) for p in descendants(os.getpid()) - ours
                                                   if Path(f"/proc/{p}").exists())
                    return m

                measure(f"Ray Serve, {n} replica{'s' if n > 1 else ''} x {per} CPU (--parallel {a.slots // n} = "
                        f"max_ongoing_requests each)",
                        url, a, memory, out)
                serve.delete("nibble")
    finally:
        serve.shutdown()
        ray.shutdown()
    results = list(out.values())

    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    print(f"\n{a.clients} clients x {a.requests} streamed requests, up to {a.max_tokens} new tokens, temperature 0.7 "
          f"(seeded); median (min–max) of {a.repeat} rounds\n")
    print("| configuration | requests ok / failed | aggregate tok/s | TTFT p50 (client) | TTFT p95 (client) | "
          "decode tok/s per request p50 |")
    print("|---|---|---|---|---|---|")
    for r in results:
        rs = r["runs"]
        print(f"| {r['label']} | {sum(x['ok'] for x in rs)} / {sum(x['failed'] for x in rs)} | "
              f"{stat(rs, 'aggregate_tok_s', '.1f')} | {stat(rs, 'client_ttft_p50', '.3f')} s | "
              f"{stat(rs, 'client_ttft_p95', '.3f')} s | {stat(rs, 'decode_p50', '.1f')} |")
    print(f"\nOne client alone, {a.single} requests one after another (median (min–max) of the rounds' medians;"
          " memory: median):\n")
    print("| configuration | TTFT (client) | client TTFT − server TTFT per request | per token, client − server |"
          " resident memory |")
    print("|---|---|---|---|---|")
    for r in results:
        s = r["single"]
        mem = ", ".join(f"{k} {statistics.median(m[k] for m in r['memory']):.0f} MiB" for k in r["memory"][0])
        print(f"| {r['label']} | {stat(s, 'ttft_1', '.3f')} s | {stat(s, 'overhead_req_ms', '.1f')} ms | "
              f"{stat(s, 'overhead_tok_ms', '.2f')} ms | {mem} |")


if __name__ == "__main__":
    main()
