"""One machine: starts a private local Ray cluster, deploys nibble_ray (OpenAI routes at the root), prints the URL and
waits; on SIGINT / SIGTERM shuts the deployment and the cluster down and checks that none of the processes it
started (Ray's, the replicas', their nibble-serve) is left. scripts/ray-serve.sh runs it after setup and build.

  .venv/bin/python examples/ray/run_local.py [--port 8000] [--replicas 1] [--model DIR] [--num-cpus N]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (a walk over /proc's parent links)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(d))
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--model", help="model directory (default target/llama/smollm2-q4)")
    ap.add_argument("--num-cpus", type=int, default=os.cpu_count(), help="CPUs Ray may hand out (default: all)")
    ap.add_argument("--cpus-per-replica", type=float,
                    help="each replica's CPU share = its ORT threads (default: num-cpus / replicas, at least 1)")
    a = ap.parse_args()
    if a.replicas < 1:
        ap.error("--replicas must be at least 1")
    per = a.cpus_per_replica or max(1.0, float(a.num_cpus // a.replicas))
    if per * a.replicas > a.num_cpus:
        print(f"ray-serve: {a.replicas} replicas x {per:g} CPUs exceed the {a.num_cpus} CPUs Ray has: the last "
              "replicas will wait for a CPU (pass --num-cpus or --cpus-per-replica)", file=sys.stderr)

    stop = threading.Event()

    def on_signal(*_):
        stop.set()

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # Workers import nibble_ray from here; a private temp dir keeps this cluster's files apart from any other's.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    import ray
    from ray import serve

    import nibble_ray

    temp = tempfile.mkdtemp(prefix="nibble-ray-")
    t0 = time.monotonic()
    ray.init(num_cpus=a.num_cpus, include_dashboard=False, _temp_dir=temp, log_to_driver=False,
             object_store_memory=150 * 1024 * 1024)
    # After ray.init, which installs its own SIGTERM handler (it would end this process before the shutdown below).
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    code = 0
    try:
        serve.start(proxy_location="EveryNode", http_options={"host": a.host, "port": a.port})
        args = {"model": a.model} if a.model else {}
        app = nibble_ray.NibbleChat.options(num_replicas=a.replicas, ray_actor_options={"num_cpus": per}).bind(**args)
        serve.run(app, name="nibble", route_prefix="/", blocking=False)
        url = f"http://{a.host}:{a.port}"
        with urllib.request.urlopen(url + "/v1/models", timeout=30) as r:
            r.read()
        print(f"ray-serve: {a.replicas} replica(s) x {per:g} CPU(s) ready in {time.monotonic() - t0:.1f} s; "
              f"OpenAI API at {url}/v1 (chat page: {url}/); Ctrl-C stops it", flush=True)
        while not stop.wait(1.0):
            pass
        print("ray-serve: stopping (the deployment, then the Ray cluster)", flush=True)
    except Exception as e:  # noqa: BLE001 - say what failed, then shut down all the same
        print(f"ray-serve: {type(e).__name__}: {e}", file=sys.stderr)
        code = 1
    started = descendants(os.getpid())
    try:
        serve.shutdown()
    except Exception as e:  # noqa: BLE001
        print(f"ray-serve: serve.shutdown failed: {e}", file=sys.stderr)
    ray.shutdown()
    deadline = time.monotonic() + 20
    left = {p for p in started if alive(p)}
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = {p for p in left if alive(p)}
    if left:
        print("ray-serve: processes still running after shutdown, killed: "
              + "; ".join(f"{p} {cmdline(p)[:80]}" for p in sorted(left)), file=sys.stderr)
        for p in left:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        code = code or 1
    else:
        print(f"ray-serve: stopped; none of the {len(started)} processes it started is left", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
