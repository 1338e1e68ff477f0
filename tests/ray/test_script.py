"""scripts/ray-serve.sh: starts a local Ray cluster with 2 replicas, prints the URL, answers through the openai
client, and on SIGTERM stops with status 0 leaving none of the processes it started (Ray's, the replicas', their
nibble-serve) behind. Runs after test_cluster.py (file order), so the two clusters never share the machine."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import openai
from ports import free_port

ROOT = Path(__file__).resolve().parents[2]


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


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


def test_ray_serve_script_serves_and_stops_clean():
    port = free_port()
    proc = subprocess.Popen(["bash", "scripts/ray-serve.sh", "--port", str(port), "--replicas", "2"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, ORT_LOG="fatal"))
    out: list[str] = []
    ready = threading.Event()

    def read():
        for line in proc.stdout:
            out.append(line)
            if "OpenAI API at" in line:
                ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.time() + 240
        while not ready.wait(0.5):
            assert proc.poll() is None, f"ray-serve.sh exited with {proc.returncode}:\n{''.join(out)}"
            assert time.time() < deadline, f"ray-serve.sh printed no URL:\n{''.join(out)}"
        url = re.search(r"OpenAI API at (\S+)", "".join(out)).group(1)
        assert url == f"http://127.0.0.1:{port}/v1", url
        started = descendants(proc.pid)
        assert any("nibble-serve" in Path(f"/proc/{p}/cmdline").read_text(errors="replace")
                   for p in started if alive(p)), "no nibble-serve under ray-serve.sh"
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120)
        r = client.chat.completions.create(model="smollm2-q4", temperature=0, max_tokens=12,
                                           messages=[{"role": "user", "content": "What is the capital of France?"}])
        assert "Paris" in r.choices[0].message.content
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=90) == 0, "".join(out)
        reader.join(timeout=10)
        assert "none of the" in "".join(out) and "is left" in "".join(out), "".join(out)
        left = [p for p in started if alive(p)]
        assert not left, f"processes left after ray-serve.sh stopped: {left}"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
