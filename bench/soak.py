#!/usr/bin/env python3
"""Soak of the chat server (examples/server, nibble-serve): steady loopback load with faults injected every few
seconds, one SIGTERM-and-restart cycle, and checks at the end. Not a test: a benchmark (bench/README.md); the
server tests run a short mode of it (tests/server/test_soak.py).

  .venv/bin/python bench/soak.py --duration 1800 --out bench/results/soak-smollm2      the 30-minute soak
  .venv/bin/python bench/soak.py --duration 40 --out /tmp/soak                          a short one

It starts target/release/nibble-serve (--bin) on the SmolLM2 q4 model directory (--model-dir, as the server tests;
scripts/convert-smollm2.sh makes it) with small limits, so that the faults reach them:
--parallel 2 --queue 4 --max-body-bytes 65536 --header-timeout 3 --body-timeout 3 --max-connections 64.

Load: --clients threads, each sending chat completions one after another (streamed and not, alternately; 8 to
48 tokens) with a short pause between. Faults, one every --fault-every seconds, in a shuffled round of kinds:
  drop         a streamed answer whose client closes the socket after a few chunks (half with a TCP RST)
  slow_reader  a streamed answer read 256 bytes at a time, 0.1 s apart, through a 4 KiB receive buffer
  oversize     a body over --max-body-bytes, declared in Content-Length and not sent / actually sent (413)
  malformed    invalid JSON, invalid UTF-8, a wrong type, an unknown model (400, 404), garbage instead of HTTP
  slow_headers headers sent a line a second, never finished (the server must close the connection)
  idle         a connection that sends nothing (closed after the header timeout)
  slow_body    headers, then part of the body only (408 after the body timeout)
  burst        parallel + queue + 6 non-streamed requests at once (200 or 503 with Retry-After)
At 40% of the run: new requests are held, then SIGTERM; the answers in flight must finish, the server must exit 0
with its final counts in its log, and a new server is started; the load goes on against it.

Every 5 s: the server's RSS (VmRSS of /proc/PID/status) and its /metrics. At the end: the load stops, /metrics is
read once more, and the server is stopped with SIGTERM (its final counts logged). Checks (exit 1 if any fails):
  1. no crash: the server exits only when told to, with status 0, and /health answers 200 throughout;
  2. every request ends as its kind allows (answered, cancelled by the client, refused 4xx/503, or the connection
     closed by the server for slow_headers/idle), none hangs (a client timeout is a failure);
  3. per request: each answer the server accepted (a chat id seen by the client) has exactly one log line from the
     server with that id, `ok` for a complete answer, `cancelled` (or `ok`, when the answer was complete before
     the drop was noticed) for a dropped one; no `failed`, no log line for an id the client never saw;
  4. /metrics of each server life (the stop line's totals; for the last life also /metrics when quiescent):
       nibble_requests_ok_total        == complete answers + dropped answers the server finished
       nibble_requests_cancelled_total == dropped answers - dropped answers the server finished
                                          + non-streamed requests whose client gave up (timeout; these
                                          fail check 2 all the same)
       nibble_requests_failed_total    == 0
       nibble_requests_refused_total   == 503 answers (queue full)
       nibble_requests_invalid_total   == chat requests answered 400, 404, 408 or 413
       nibble_completion_tokens_total  == the completion tokens of the answers counted in ok (usage blocks;
                                          the server's log for dropped answers it finished)
       nibble_connections_total        == connections this driver opened to that server
     and, when quiescent: nibble_connections_open == 1 (the /metrics request), nibble_queue_depth == 0,
     nibble_active_generations == 0;
  5. RSS bounded: the highest RSS in the last third of the run <= (1 + --rss-slack) x the highest in the first
     third after --warmup seconds.
It writes OUT/soak.json (settings, command, CPU, counts, checks, samples), OUT/requests.csv (one row per request),
OUT/soak.svg (RSS and the /metrics counters over time) and OUT/server-life-N.jsonl (each server life's log).
"""

from __future__ import annotations

import argparse
import csv
import http.client
import json
import os
import platform
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
MODEL = "soak"
QUESTIONS = [
    "What is the capital of France?",
    "Explain in three sentences how a bicycle stays upright.",
    "Write a short poem about the sea.",
    "Give me three tips for learning a new language.",
    "Why is the sky blue?",
    "What does a computer's CPU do?",
]
FAULTS = ["drop", "slow_reader", "oversize", "malformed", "slow_headers", "idle", "slow_body", "burst"]
# What each kind of request may end as (anything else, a client timeout included, fails check 2).
ALLOWED = {
    "stream": {"complete", "refused_503"},
    "whole": {"complete", "refused_503"},
    "burst": {"complete", "refused_503"},
    "drop": {"dropped", "complete", "refused_503"},
    "slow_reader": {"complete", "refused_503"},
    "oversize_declared": {"invalid_413"},
    "oversize_sent": {"invalid_413"},
    "bad_json": {"invalid_400"},
    "bad_utf8": {"invalid_400"},
    "wrong_type": {"invalid_400"},
    "unknown_model": {"invalid_404"},
    "bad_http": {"http_400", "closed"},
    "slow_headers": {"closed"},
    "idle": {"closed"},
    "slow_body": {"invalid_408"},
}
# Outcomes that count in /metrics (per server life).
COUNTED_INVALID = {"invalid_400", "invalid_404", "invalid_408", "invalid_413"}


def log(msg: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Server:
    """One life of nibble-serve: its process, URL and log (JSON lines of its stderr)."""

    def __init__(self, argv: list[str], life: int):
        self.life = life
        self.proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=dict(os.environ, ORT_LOG="fatal"))
        set_autogroup(self.proc.pid)
        self.log: list[dict] = []
        self.url = None
        deadline = time.time() + 180
        while self.url is None:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError(f"nibble-serve exited ({self.proc.wait()}) before listening: {self.log[-5:]}")
            self._keep(line)
            if self.log[-1].get("event") == "listening":
                self.url = self.log[-1]["url"].rstrip("/")
                self.limits = self.log[-1].get("limits")
            if time.time() > deadline:
                raise RuntimeError("nibble-serve did not start in 180 s")
        host, port = self.url.split("//")[1].split(":")
        self.addr = (host, int(port))
        self.reader = threading.Thread(target=self._drain, daemon=True)
        self.reader.start()
        self.connections = 0  # connections the driver opened to this life
        self.lock = threading.Lock()

    def _keep(self, line: str) -> None:
        try:
            self.log.append(json.loads(line))
        except json.JSONDecodeError:
            self.log.append({"event": "text", "text": line.rstrip()})

    def _drain(self) -> None:
        for line in self.proc.stderr:
            self._keep(line)

    def connected(self) -> None:
        with self.lock:
            self.connections += 1

    def fds(self) -> int | None:
        try:
            return len(os.listdir(f"/proc/{self.proc.pid}/fd"))
        except OSError:
            return None

    def cpu_s(self) -> float | None:
        """CPU seconds the server used so far (user + system): with the wall time, the share of a core it got."""
        try:
            with open(f"/proc/{self.proc.pid}/stat") as fh:
                f = fh.read().rsplit(")", 1)[1].split()
            return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return None

    def rss_kib(self) -> int | None:
        try:
            with open(f"/proc/{self.proc.pid}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except OSError:
            return None
        return None

    def stop(self, timeout: float = 150) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=timeout)
        self.reader.join(timeout=10)
        return code

    def totals(self) -> dict | None:
        for e in reversed(self.log):
            if e.get("event") == "stopped" and "totals" in e:
                return e["totals"]
        return None


def set_autogroup(pid: int, nice: int | None = None) -> None:
    """Lowers the scheduling weight of `pid`'s autogroup (what `nice` does across sessions on Linux)."""
    nice = AUTOGROUP_NICE if nice is None else nice
    if nice is None:
        return
    try:
        with open(f"/proc/{pid}/autogroup", "w") as fh:
            fh.write(str(nice))
    except OSError as e:
        log(f"autogroup of {pid} not set: {e}")


AUTOGROUP_NICE: int | None = None


class Gate:
    """The server the requests go to; closed while it restarts (new requests wait, the ones in flight go on)."""

    def __init__(self):
        self.cond = threading.Condition()
        self.server: Server | None = None
        self.stopping = False

    def get(self) -> Server | None:
        with self.cond:
            while self.server is None and not self.stopping:
                self.cond.wait(0.5)
            return self.server

    def set(self, server: Server | None) -> None:
        with self.cond:
            self.server = server
            self.cond.notify_all()


class Soak:
    def __init__(self, args):
        self.args = args
        self.gate = Gate()
        self.records: list[dict] = []
        self.lock = threading.Lock()
        self.lives: list[Server] = []
        self.samples: list[dict] = []
        self.violations: list[str] = []
        self.t0 = time.time()
        self.threads: list[threading.Thread] = []
        self.unplanned_exits = 0
        self.health_failures = 0

    # ---- the server

    def server_argv(self) -> list[str]:
        a = self.args
        return [str(a.bin), "--port", "0", "--model", str(a.model_dir), "--model-id", MODEL, "--threads",
                str(a.threads), "--parallel", str(a.parallel), "--queue", str(a.queue), "--max-body-bytes",
                str(a.max_body_bytes), "--header-timeout", str(a.header_timeout), "--body-timeout",
                str(a.body_timeout), "--max-connections", str(a.max_connections), "--default-max-tokens", "64"]

    def start_server(self) -> Server:
        s = Server(self.server_argv(), len(self.lives))
        self.lives.append(s)
        log(f"server life {s.life}: pid {s.proc.pid}, {s.url}, limits {s.limits}")
        return s

    # ---- bookkeeping

    def record(self, kind: str, server: Server, t: float, outcome: str, **kw) -> None:
        r = {"kind": kind, "life": server.life, "t": round(t - self.t0, 3), "wall_s": round(time.time() - t, 3),
             "outcome": outcome, **kw}
        with self.lock:
            self.records.append(r)

    def spawn(self, fn, *a) -> None:
        th = threading.Thread(target=fn, args=a, daemon=True)
        th.start()
        with self.lock:
            self.threads = [t for t in self.threads if t.is_alive()]
            self.threads.append(th)

    # ---- requests

    def body(self, stream: bool, max_tokens: int | str, **extra) -> bytes:
        b = {"model": MODEL, "messages": [{"role": "user", "content": random.choice(QUESTIONS)}],
             "max_tokens": max_tokens, "temperature": 0.7, "seed": random.randrange(1 << 30), "stream": stream}
        if stream:
            b["stream_options"] = {"include_usage": True}
        b.update(extra)
        return json.dumps(b).encode()

    def connect(self, server: Server, rcvbuf: int | None = None) -> http.client.HTTPConnection:
        conn = http.client.HTTPConnection(*server.addr, timeout=self.args.client_timeout)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.settimeout(self.args.client_timeout)
        sock.connect(server.addr)
        server.connected()
        conn.sock = sock
        return conn

    def chat(self, kind: str, stream: bool, max_tokens: int, drop_after: int | None = None, slow: bool = False,
             server: Server | None = None) -> None:
        server = server or self.gate.get()
        if server is None:
            return
        t = time.time()
        chat_id = None
        try:
            conn = self.connect(server, rcvbuf=4096 if slow else None)
            conn.request("POST", "/v1/chat/completions", self.body(stream, max_tokens),
                         {"Content-Type": "application/json"})
            r = conn.getresponse()
            if r.status != 200:
                data = r.read()
                conn.close()
                if r.status == 503 and r.getheader("Retry-After") == "1":
                    return self.record(kind, server, t, "refused_503")
                return self.record(kind, server, t, f"status_{r.status}", error=data[:200].decode(errors="replace"))
            if not stream:
                j = json.loads(r.read())
                conn.close()
                return self.record(kind, server, t, "complete", id=j["id"],
                                   completion_tokens=j["usage"]["completion_tokens"])
            buf, chunks, usage, done = b"", 0, None, False
            while not done:
                data = r.read1(256) if slow else r.read1(65536)
                if slow:
                    time.sleep(0.1)
                if not data:
                    break
                buf += data
                while b"\n\n" in buf:
                    event, buf = buf.split(b"\n\n", 1)
                    for line in event.split(b"\n"):
                        if not line.startswith(b"data:"):
                            continue
                        payload = line[5:].strip()
                        if payload == b"[DONE]":
                            done = True
                            continue
                        j = json.loads(payload)
                        if "error" in j:
                            conn.close()
                            return self.record(kind, server, t, "stream_error", id=chat_id, error=str(j["error"]))
                        chat_id = chat_id or j.get("id")
                        if j.get("usage"):
                            usage = j["usage"]
                        if j.get("choices") and j["choices"][0].get("delta", {}).get("content"):
                            chunks += 1
                if drop_after is not None and chunks >= drop_after and not done:
                    if random.random() < 0.5:  # half of the drops reset the connection instead of closing it
                        conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    conn.sock.close()
                    conn.close()
                    return self.record(kind, server, t, "dropped", id=chat_id, chunks=chunks)
            conn.close()
            if not done or usage is None:
                return self.record(kind, server, t, "incomplete", id=chat_id, chunks=chunks)
            self.record(kind, server, t, "complete", id=chat_id, completion_tokens=usage["completion_tokens"])
        except (OSError, http.client.HTTPException, ValueError) as e:
            self.record(kind, server, t, "timeout" if isinstance(e, TimeoutError) else "error", id=chat_id,
                        error=f"{type(e).__name__}: {e}")

    def raw(self, kind: str, payload: bytes, dribble: list[bytes] | None = None,
            server: Server | None = None) -> None:
        """Sends `payload` on a fresh connection, then each of `dribble` a second apart until the server answers
        or closes, and reads what comes back: the status (`invalid_<code>`, or `http_<code>` for bad_http) or
        `closed` when the server closes the connection without answering."""
        server = server or self.gate.get()
        if server is None:
            return
        t = time.time()
        data = b""
        try:
            sock = socket.create_connection(server.addr, timeout=self.args.client_timeout)
            server.connected()
            try:
                sock.sendall(payload)  # an oversize body may be cut short by the server's answer: read it then
            except OSError:
                pass
            closed = False
            for piece in dribble or []:
                sock.settimeout(1.0)
                try:
                    more = sock.recv(65536)
                    data += more
                    closed = not more
                    break  # an answer, or the connection closed
                except TimeoutError:
                    pass
                except ConnectionResetError:
                    closed = True
                    break
                try:
                    sock.sendall(piece)
                except OSError:
                    closed = True
                    break
            sock.settimeout(self.args.client_timeout)
            while not closed:
                try:
                    more = sock.recv(65536)
                except ConnectionResetError:
                    more = b""
                if not more:
                    break
                data += more
                head, sep, rest = data.partition(b"\r\n\r\n")
                m = re.search(rb"content-length:\s*(\d+)", head, re.I)
                if sep and m and len(rest) >= int(m.group(1)):
                    break
            sock.close()
            if not data:
                return self.record(kind, server, t, "closed")
            status = int(data.split(b" ", 2)[1])
            prefix = "http" if kind == "bad_http" else "invalid"
            self.record(kind, server, t, f"{prefix}_{status}")
        except (OSError, ValueError, IndexError) as e:
            self.record(kind, server, t, "timeout" if isinstance(e, TimeoutError) else "error",
                        error=f"{type(e).__name__}: {e}", got=data[:100].decode(errors="replace"))

    def post_head(self, server: Server, length: int, extra: str = "") -> bytes:
        return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {server.addr[0]}:{server.addr[1]}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {length}\r\n{extra}\r\n").encode()

    # ---- load and faults

    def client(self, c: int, until: float) -> None:
        i = 0
        while time.time() < until:
            stream = (c + i) % 2 == 0
            self.chat("stream" if stream else "whole", stream, random.randint(8, 48))
            i += 1
            time.sleep(random.uniform(0.1, 0.5))

    def fault(self, kind: str) -> None:
        server = self.gate.get()
        if server is None:
            return
        a = self.args
        if kind == "drop":
            self.spawn(self.chat, "drop", True, 300, random.randint(1, 4), False, server)
        elif kind == "slow_reader":
            self.spawn(self.chat, "slow_reader", True, 48, None, True, server)
        elif kind == "oversize":
            self.spawn(self.raw, "oversize_declared", self.post_head(server, a.max_body_bytes + 1), None, server)
            big = b'{"model": "soak", "messages": [{"role": "user", "content": "' + b"x" * (a.max_body_bytes + 4096)
            big += b'"}]}'
            self.spawn(self.raw, "oversize_sent", self.post_head(server, len(big)) + big, None, server)
        elif kind == "malformed":
            for k, b in [("bad_json", b"{not json"), ("bad_utf8", b'{"model": "soak", "messages": "\xff\xfe"}'),
                         ("wrong_type", self.body(False, "many")),
                         ("unknown_model", self.body(False, 8, model="nope"))]:
                self.spawn(self.raw, k, self.post_head(server, len(b)) + b, None, server)
            self.spawn(self.raw, "bad_http", b"GARBAGE / NOT-HTTP\r\n\r\n", None, server)
        elif kind == "slow_headers":
            head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: {server.addr[0]}\r\n".encode()
            dribble = [f"X-Slow-{i}: {i}\r\n".encode() for i in range(int(a.header_timeout) + 20)]
            self.spawn(self.raw, "slow_headers", head, dribble, server)
        elif kind == "idle":
            self.spawn(self.raw, "idle", b"", None, server)
        elif kind == "slow_body":
            b = self.body(False, 8)
            self.spawn(self.raw, "slow_body", self.post_head(server, len(b)) + b[:len(b) // 3], None, server)
        elif kind == "burst":
            n = a.parallel + a.queue + 6
            barrier = threading.Barrier(n)

            def one():
                barrier.wait()
                self.chat("burst", False, 8, None, False, server)

            for _ in range(n):
                self.spawn(one)

    def sampler(self, until_evt: threading.Event) -> None:
        while not until_evt.wait(self.args.sample_every):
            server = self.gate.server
            if server is None:
                continue
            rss, fds = server.rss_kib(), server.fds()
            metrics, health = None, None
            try:
                metrics = self.scrape(server)
                health = self.get(server, "/health")[0]
            except (OSError, http.client.HTTPException) as e:
                log(f"sample failed: {e}")
            if health is not None and health != 200:
                self.health_failures += 1
            if server.proc.poll() is not None and not getattr(server, "told_to_stop", False):
                self.unplanned_exits += 1
                self.violations.append(f"life {server.life}: nibble-serve exited ({server.proc.returncode}) "
                                       f"without being told to; log tail {server.log[-3:]}")
                self.gate.set(self.start_server())
            self.samples.append({"t": round(time.time() - self.t0, 2), "life": server.life, "rss_kib": rss,
                                 "fds": fds, "cpu_s": server.cpu_s(), "loadavg_1m": os.getloadavg()[0],
                                 "health": health,
                                 "metrics": metrics})

    def get(self, server: Server, path: str) -> tuple[int, str]:
        conn = http.client.HTTPConnection(*server.addr, timeout=30)
        conn.connect()
        server.connected()
        conn.request("GET", path)
        r = conn.getresponse()
        body = r.read().decode()
        conn.close()
        return r.status, body

    def scrape(self, server: Server) -> dict:
        status, text = self.get(server, "/metrics")
        assert status == 200, status
        out = {}
        for line in text.splitlines():
            m = re.match(r'^(nibble_\w+)(?:\{model="([^"]*)"\})? (\S+)$', line)
            if m and (m.group(2) in (None, MODEL)):
                out[m.group(1)] = float(m.group(3))
        return out

    def restart(self) -> None:
        old = self.gate.server
        self.gate.set(None)  # new requests wait from here
        time.sleep(1.0)  # connections made just before are accepted by now
        log(f"SIGTERM to life {old.life} (pid {old.proc.pid})")
        old.told_to_stop = True
        t = time.time()
        code = old.stop()
        self.restart_info = {"t": round(t - self.t0, 2), "exit_code": code, "stop_s": round(time.time() - t, 2)}
        # requests sent before the SIGTERM that ended after it: the answers the graceful shutdown let finish
        with self.lock:
            over = [r for r in self.records if r["life"] == old.life and r["t"] < t - self.t0 < r["t"] + r["wall_s"]]
        self.restart_info["in_flight_at_sigterm"] = dict(Counter(f"{r['kind']}/{r['outcome']}" for r in over))
        if code != 0:
            self.violations.append(f"life {old.life}: exit status {code} after SIGTERM (expected 0)")
        if old.totals() is None:
            self.violations.append(f"life {old.life}: no final totals in the log after SIGTERM")
        t = time.time()
        self.gate.set(self.start_server())
        self.restart_info["start_s"] = round(time.time() - t, 2)
        log(f"restarted: {self.restart_info}")

    def run(self) -> int:
        a = self.args
        self.gate.set(self.start_server())
        end = self.t0 + a.duration
        restart_at = self.t0 + a.duration * a.restart_at
        stop_sampling = threading.Event()
        sampler = threading.Thread(target=self.sampler, args=(stop_sampling,), daemon=True)
        sampler.start()
        clients = [threading.Thread(target=self.client, args=(c, end), daemon=True) for c in range(a.clients)]
        for th in clients:
            th.start()
        self.fault_counts: Counter = Counter()
        rnd: list[str] = []
        restarted = False
        next_fault = time.time() + a.fault_every
        while time.time() < end:
            time.sleep(0.05)
            if not restarted and time.time() >= restart_at:
                restarted = True
                self.restart()
                next_fault = time.time() + a.fault_every
            if time.time() >= next_fault and time.time() < end - a.fault_every:
                if not rnd:
                    rnd = random.sample(FAULTS, len(FAULTS))
                kind = rnd.pop()
                self.fault_counts[kind] += 1
                self.fault(kind)
                next_fault += a.fault_every
        log("load ends; waiting for the requests in flight")
        for th in clients:
            th.join(timeout=a.client_timeout + 30)
        for th in list(self.threads):
            th.join(timeout=a.client_timeout + 30)
        hung = sum(1 for th in clients + self.threads if th.is_alive())
        if hung:
            self.violations.append(f"{hung} client threads still running {a.client_timeout + 30} s after the end")
        stop_sampling.set()
        sampler.join(timeout=60)
        last = self.gate.server
        deadline = time.time() + 30  # dropped answers end at the server's next token: give it a moment
        while True:
            self.quiescent = self.scrape(last)
            q = self.quiescent
            if (q["nibble_connections_open"], q["nibble_queue_depth"], q["nibble_active_generations"]) == (1, 0, 0) \
                    or time.time() > deadline:
                break
            time.sleep(0.5)
        self.gate.set(None)
        last.told_to_stop = True
        code = last.stop()
        self.final_exit = code
        if code != 0:
            self.violations.append(f"life {last.life}: exit status {code} after the final SIGTERM (expected 0)")
        return self.check()

    # ---- checks

    def check(self) -> int:
        a = self.args
        v = self.violations
        if self.health_failures:
            v.append(f"/health answered non-200 {self.health_failures} times")
        # 2. outcomes allowed per kind
        bad = [r for r in self.records if r["outcome"] not in ALLOWED[r["kind"]]]
        for r in bad[:20]:
            v.append(f"request {r['kind']} ended as {r['outcome']}: {r}")
        if len(bad) > 20:
            v.append(f"... and {len(bad) - 20} more requests ended as their kind does not allow")
        for r in self.records:
            if r["kind"] in ("slow_headers", "idle") and r["outcome"] == "closed" and \
                    r["wall_s"] > a.header_timeout + 3:
                v.append(f"{r['kind']} connection closed after {r['wall_s']} s (header timeout {a.header_timeout})")
        self.equations = []
        for s in self.lives:
            recs = [r for r in self.records if r["life"] == s.life]
            events = {}
            for e in s.log:
                if e.get("event") == "request":
                    if e["id"] in events:
                        v.append(f"life {s.life}: two log lines for {e['id']}")
                    events[e["id"]] = e
            # 3. per request
            seen = set()
            finished_dropped = []
            for r in recs:
                if r.get("id") is None:
                    continue
                seen.add(r["id"])
                e = events.get(r["id"])
                if e is None:
                    v.append(f"life {s.life}: no server log line for {r['kind']} {r['id']} ({r['outcome']})")
                    continue
                want = {"complete": {"ok"}, "dropped": {"cancelled", "ok"}}.get(r["outcome"], set())
                if e["status"] not in want:
                    v.append(f"life {s.life}: {r['kind']} {r['id']}: client {r['outcome']}, server {e['status']}")
                if r["outcome"] == "dropped" and e["status"] == "ok":
                    finished_dropped.append(e)
            # A non-streamed request whose client gave up (its timeout) has no id on the client's side; the
            # server must have counted it cancelled: match those by number (the timeout itself fails check 2).
            abandoned = [r for r in recs if r.get("id") is None and r["outcome"] in ("timeout", "error")
                         and r["kind"] in ("whole", "burst")]
            unseen = [e for i, e in events.items() if i not in seen]
            if len(unseen) != len(abandoned) or any(e["status"] != "cancelled" for e in unseen):
                for e in unseen:
                    v.append(f"life {s.life}: server logged {e['id']} ({e['status']}) that no client saw")
                if abandoned:
                    v.append(f"life {s.life}: {len(abandoned)} non-streamed requests abandoned by their client, "
                             f"{len(unseen)} server log lines for ids no client saw")
            s.abandoned = len(abandoned)
            # 4. /metrics
            n = Counter(r["outcome"] for r in recs)
            dropped = sum(1 for r in recs if r["outcome"] == "dropped")
            expect = {
                "ok": n["complete"] + len(finished_dropped),
                "cancelled": dropped - len(finished_dropped) + len(abandoned),
                "failed": 0,
                "refused": n["refused_503"],
                "invalid": sum(n[k] for k in COUNTED_INVALID),
                "completion_tokens": sum(r.get("completion_tokens", 0) for r in recs if r["outcome"] == "complete")
                + sum(e["completion_tokens"] for e in finished_dropped),
                "connections_total": s.connections,
            }
            totals = s.totals()
            sources = []
            if totals:
                m = totals["models"][MODEL]
                sources.append(("stop line", {**m, "invalid": totals["invalid"],
                                              "connections_total": totals["connections_total"]}))
            if s is self.lives[-1]:
                q = self.quiescent
                sources.append(("/metrics when quiescent", {
                    "ok": q["nibble_requests_ok_total"], "cancelled": q["nibble_requests_cancelled_total"],
                    "failed": q["nibble_requests_failed_total"], "refused": q["nibble_requests_refused_total"],
                    "invalid": q["nibble_requests_invalid_total"],
                    "completion_tokens": q["nibble_completion_tokens_total"],
                    "connections_total": q["nibble_connections_total"]}))
                for k, want in [("nibble_connections_open", 1), ("nibble_queue_depth", 0),
                                ("nibble_active_generations", 0)]:
                    ok = q[k] == want
                    self.equations.append({"life": s.life, "source": "/metrics when quiescent", "name": k,
                                           "server": q[k], "client": want, "holds": ok})
                    if not ok:
                        v.append(f"life {s.life}: {k} = {q[k]} when quiescent, expected {want}")
            for src, got in sources:
                for k, want in expect.items():
                    ok = float(got[k]) == float(want)
                    self.equations.append({"life": s.life, "source": src, "name": k, "server": got[k],
                                           "client": want, "holds": ok})
                    if not ok:
                        v.append(f"life {s.life}: {src}: {k} = {got[k]}, client tally {want}")
            s.finished_dropped = len(finished_dropped)
        # 5. RSS
        rss = [(x["t"], x["rss_kib"]) for x in self.samples if x["rss_kib"]]
        third = a.duration / 3
        first = [r for t, r in rss if a.warmup <= t < third]
        last = [r for t, r in rss if t >= 2 * third]
        self.rss = {"first_kib": rss[0][1] if rss else None, "end_kib": rss[-1][1] if rss else None,
                    "max_kib": max((r for _, r in rss), default=None),
                    "max_first_third_kib": max(first, default=None), "max_last_third_kib": max(last, default=None)}
        if first and last:
            limit = max(first) * (1 + a.rss_slack)
            self.rss["limit_kib"] = round(limit)
            if max(last) > limit:
                v.append(f"RSS grew: max {max(last)} KiB in the last third > {limit:.0f} KiB "
                         f"(max of the first third after warm-up x {1 + a.rss_slack})")
        else:
            v.append("too few RSS samples for the RSS check")
        return 1 if v else 0

    # ---- output

    def write(self, out: Path, code: int) -> None:
        out.mkdir(parents=True, exist_ok=True)
        cpu = ""
        try:
            cpu = next(x for x in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
                       if x.startswith("Model name")).split(":", 1)[1].strip()
        except (StopIteration, OSError):
            pass
        kinds = Counter((r["kind"], r["outcome"]) for r in self.records)
        summary = {
            "passed": code == 0,
            "violations": self.violations,
            "command": " ".join([".venv/bin/python", "bench/soak.py", *sys.argv[1:]]),
            "server_argv": self.server_argv()[1:],
            "cpu": cpu,
            "nproc": os.cpu_count(),
            "loadavg_end": os.getloadavg(),
            "loadavg_1m_mean": round(sum(x["loadavg_1m"] for x in self.samples) / max(1, len(self.samples)), 2),
            "fds_max": max((x["fds"] for x in self.samples if x["fds"]), default=None),
            "kernel": platform.release(),
            "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.t0)),
            "duration_s": round(time.time() - self.t0, 1),
            "faults_injected": dict(self.fault_counts),
            "requests": len(self.records),
            "outcomes": dict(Counter(r["outcome"] for r in self.records)),
            "by_kind": {f"{k}/{o}": c for (k, o), c in sorted(kinds.items())},
            "dropped_but_finished": [getattr(s, "finished_dropped", None) for s in self.lives],
            "abandoned_by_client": [getattr(s, "abandoned", None) for s in self.lives],
            "restart": getattr(self, "restart_info", None),
            "final_exit_code": getattr(self, "final_exit", None),
            "lives": [{"life": s.life, "pid": s.proc.pid, "connections": s.connections, "totals": s.totals(),
                       "limits": s.limits} for s in self.lives],
            "equations": self.equations,
            "rss": self.rss,
        }
        for s in self.lives:
            with open(out / f"server-life-{s.life}.jsonl", "w") as fh:
                fh.writelines(json.dumps(e) + "\n" for e in s.log)
        (out / "soak.json").write_text(json.dumps({**summary, "samples": self.samples}, indent=1) + "\n")
        with open(out / "requests.csv", "w", newline="") as fh:
            w = csv.DictWriter(fh, ["t", "life", "kind", "outcome", "wall_s", "id", "completion_tokens", "chunks",
                                    "error"], extrasaction="ignore")
            w.writeheader()
            w.writerows(sorted(self.records, key=lambda r: r["t"]))
        (out / "soak.svg").write_text(svg(self.samples, getattr(self, "restart_info", None), a_title(summary)))
        log(f"wrote {out}/soak.json, requests.csv, soak.svg")
        print(json.dumps({k: summary[k] for k in ("passed", "violations", "duration_s", "faults_injected",
                                                  "outcomes", "rss", "restart")}, indent=1))


def a_title(s: dict) -> str:
    return f"nibble-serve soak, {s['started_utc']}, {s['duration_s'] / 60:.0f} min, {s['cpu']}"


def svg(samples: list[dict], restart: dict | None, title: str) -> str:
    """Two panels drawn by hand (no plotting library needed): RSS in MiB, and the /metrics counters, over minutes."""
    W, H, L, R, PH = 900, 560, 70, 150, 200
    tops = [40, 40 + PH + 60]
    xs = [s["t"] for s in samples] or [0, 1]
    tmax = max(xs) or 1
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" '
           f'font-size="12"><rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>']

    def panel(top, series, ylabel):
        vals = [y for _, pts, _ in series for _, y in pts if y is not None]
        ymax = max(vals, default=1) * 1.1 or 1
        ymin = 0
        X = lambda t: L + (W - L - R) * t / tmax  # noqa: E731
        Y = lambda y: top + PH - PH * (y - ymin) / (ymax - ymin)  # noqa: E731
        out.append(f'<rect x="{L}" y="{top}" width="{W - L - R}" height="{PH}" fill="none" stroke="#888"/>')
        for i in range(6):
            yv = ymin + (ymax - ymin) * i / 5
            out.append(f'<text x="{L - 6}" y="{Y(yv) + 4:.1f}" text-anchor="end">{yv:.0f}</text>')
            out.append(f'<line x1="{L}" x2="{W - R}" y1="{Y(yv):.1f}" y2="{Y(yv):.1f}" stroke="#eee"/>')
        for i in range(int(tmax // 60) + 1):
            if i % max(1, int(tmax // 60) // 10) == 0:
                out.append(f'<text x="{X(i * 60):.1f}" y="{top + PH + 16}" text-anchor="middle">{i}</text>')
        out.append(f'<text x="{(L + W - R) / 2}" y="{top + PH + 32}" text-anchor="middle">minutes</text>')
        out.append(f'<text x="16" y="{top + PH / 2}" transform="rotate(-90 16 {top + PH / 2})" '
                   f'text-anchor="middle">{ylabel}</text>')
        if restart:
            out.append(f'<line x1="{X(restart["t"]):.1f}" x2="{X(restart["t"]):.1f}" y1="{top}" y2="{top + PH}" '
                       f'stroke="red" stroke-dasharray="4 3"/>')
            out.append(f'<text x="{X(restart["t"]) + 3:.1f}" y="{top + 12}" fill="red">SIGTERM + restart</text>')
        for k, (name, pts, color) in enumerate(series):
            segs, cur = [], []
            for t, y in pts:
                if y is None:
                    if cur:
                        segs.append(cur)
                    cur = []
                else:
                    cur.append(f"{X(t):.1f},{Y(y):.1f}")
            if cur:
                segs.append(cur)
            for seg in segs:
                out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{" ".join(seg)}"/>')
            out.append(f'<rect x="{W - R + 10}" y="{top + 10 + 18 * k}" width="12" height="3" fill="{color}"/>')
            out.append(f'<text x="{W - R + 26}" y="{top + 15 + 18 * k}">{name}</text>')

    def broken(key):
        pts, life = [], None
        for s in samples:
            if life is not None and s["life"] != life:
                pts.append((s["t"], None))
            life = s["life"]
            m = s.get("metrics") or {}
            pts.append((s["t"], m.get(key)))
        return pts

    rss = []
    life = None
    for s in samples:
        if life is not None and s["life"] != life:
            rss.append((s["t"], None))
        life = s["life"]
        rss.append((s["t"], s["rss_kib"] / 1024 if s["rss_kib"] else None))
    panel(tops[0], [("RSS (MiB)", rss, "#1f77b4")], "RSS, MiB")
    panel(tops[1], [("ok", broken("nibble_requests_ok_total"), "#2ca02c"),
                    ("cancelled", broken("nibble_requests_cancelled_total"), "#ff7f0e"),
                    ("refused (503)", broken("nibble_requests_refused_total"), "#d62728"),
                    ("invalid (4xx)", broken("nibble_requests_invalid_total"), "#9467bd"),
                    ("connections/10", [(t, None if y is None else y / 10)
                                        for t, y in broken("nibble_connections_total")], "#7f7f7f")],
          "/metrics counters")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=1800, help="seconds of load (default 1800)")
    ap.add_argument("--out", type=Path, required=True, help="directory for soak.json, requests.csv, soak.svg")
    ap.add_argument("--bin", type=Path, default=TARGET / "release" / "nibble-serve")
    ap.add_argument("--model-dir", type=Path,
                    default=Path(os.environ.get("NIBBLE_LLAMA_Q4_DIR", TARGET / "llama" / "smollm2-q4")))
    ap.add_argument("--threads", type=int, default=1, help="the server's ORT intra-op threads (default 1)")
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--queue", type=int, default=4)
    ap.add_argument("--clients", type=int, default=4, help="steady clients (default 4)")
    ap.add_argument("--fault-every", type=float, default=4.0, help="seconds between faults (default 4)")
    ap.add_argument("--restart-at", type=float, default=0.4, help="when to SIGTERM and restart, as a fraction")
    ap.add_argument("--max-body-bytes", type=int, default=65536)
    ap.add_argument("--header-timeout", type=float, default=3.0)
    ap.add_argument("--body-timeout", type=float, default=3.0)
    ap.add_argument("--max-connections", type=int, default=64)
    ap.add_argument("--client-timeout", type=float, default=120.0, help="a request taking longer fails")
    ap.add_argument("--sample-every", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=120.0, help="seconds left out of the RSS baseline")
    ap.add_argument("--rss-slack", type=float, default=0.05, help="allowed RSS growth (default 0.05: 5%%)")
    ap.add_argument("--autogroup-nice", type=int, help="write this to /proc/PID/autogroup of the driver and "
                    "the server (19: lowest weight; the soak shares its machine)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if not args.bin.is_file():
        sys.exit(f"soak.py: {args.bin} missing: cargo build --release -p nibble-serve")
    if not (args.model_dir / "model_config.json").is_file():
        sys.exit(f"soak.py: {args.model_dir} is not a model directory: scripts/convert-smollm2.sh")
    random.seed(args.seed)
    global AUTOGROUP_NICE
    AUTOGROUP_NICE = args.autogroup_nice
    set_autogroup(os.getpid())
    soak = Soak(args)
    try:
        code = soak.run()
    finally:
        for s in soak.lives:
            if s.proc.poll() is None:
                s.proc.kill()
    soak.write(args.out, code)
    return code


if __name__ == "__main__":
    sys.exit(main())
