"""nibble-serve (examples/server) through the official `openai` Python client and raw HTTP: answers, streaming,
sampling controls, stop sequences, errors, a full queue, client disconnects and graceful shutdown.

Needs target/release/nibble-serve (cargo build --release -p nibble-serve), the SmolLM2 q4 model directory
(NIBBLE_LLAMA_Q4_DIR, default target/llama/smollm2-q4) and ORT/nibble as nibble-llama finds them."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import openai
import pytest

ROOT = Path(__file__).resolve().parents[2]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
BIN = TARGET / "release" / "nibble-serve"
MODEL_DIR = Path(os.environ.get("NIBBLE_LLAMA_Q4_DIR", TARGET / "llama" / "smollm2-q4"))
FP32_DIR = Path(os.environ.get("NIBBLE_LLAMA_FP32_DIR", TARGET / "llama" / "smollm2-fp32"))
MODEL = "smollm2-q4"
Q = [{"role": "user", "content": "What is the capital of France?"}]


class Server:
    def __init__(self, *args: str, stdin=None):
        assert BIN.is_file(), f"{BIN} missing: cargo build --release -p nibble-serve"
        env = dict(os.environ, ORT_LOG="fatal")
        self.proc = subprocess.Popen(
            [str(BIN), "--port", "0", "--model", str(MODEL_DIR), "--model-id", MODEL, "--threads", "2", *args],
            stdin=stdin, stderr=subprocess.PIPE, text=True, env=env)
        self.log: list[dict] = []
        self.url = None
        deadline = time.time() + 120
        while self.url is None:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError(f"nibble-serve exited ({self.proc.wait()}): {self.log}")
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                ev = {"event": "text", "text": line}
            self.log.append(ev)
            if ev.get("event") == "listening":
                self.url = ev["url"].rstrip("/")
            assert time.time() < deadline, "nibble-serve did not start"
        self.drain = threading.Thread(target=self._drain, daemon=True)
        self.drain.start()
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key="unused", max_retries=0, timeout=120)

    def _drain(self):
        for line in self.proc.stderr:
            try:
                self.log.append(json.loads(line))
            except json.JSONDecodeError:  # not a log line (a panic message, an ORT warning): keep it as text
                self.log.append({"event": "text", "text": line})

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=30) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def post(self, body: dict | bytes) -> tuple[int, dict, dict]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(self.url + "/v1/chat/completions", data=data,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, dict(r.headers), json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), json.loads(e.read())

    def metric(self, name: str, model: str | None = MODEL) -> float:
        """A value of /metrics: the model's, or with model None a server-wide one (no label)."""
        _, text = self.get("/metrics")
        label = "" if model is None else f'{{model="{model}"}}'
        m = re.search(rf'^{name}{label} (\S+)$', text, re.M)
        assert m, f"{name} not in /metrics:\n{text}"
        return float(m.group(1))

    def wait_metric(self, name: str, ok, why: str, timeout: float = 30, model: str | None = MODEL):
        """Polls /metrics until `ok(value of name)` holds."""
        deadline = time.time() + timeout
        while not ok(self.metric(name, model)):
            assert time.time() < deadline, why
            time.sleep(0.05)

    def wait_log(self, ok, why: str, timeout: float = 30):
        """Polls the server's log until a line satisfies `ok` (a dict -> bool)."""
        deadline = time.time() + timeout
        while not any(ok(e) for e in list(self.log)):
            assert time.time() < deadline and self.proc.poll() is None, why
            time.sleep(0.05)

    def wait(self, timeout: float) -> int:
        """The exit status, once the log is read to its end."""
        code = self.proc.wait(timeout=timeout)
        self.drain.join(timeout=10)
        return code

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def server():
    s = Server("--parallel", "2", "--queue", "2")
    yield s
    s.stop()


def test_models_and_health(server):
    ids = [m.id for m in server.client.models.list().data]
    assert ids == [MODEL]
    status, body = server.get("/health")
    assert status == 200 and json.loads(body)["status"] == "ok"


def test_answer_greedy_is_deterministic_and_carries_the_metrics(server):
    a = server.client.chat.completions.create(model=MODEL, messages=Q, temperature=0, max_tokens=24)
    b = server.client.chat.completions.create(model=MODEL, messages=Q, temperature=0, max_tokens=24)
    text = a.choices[0].message.content
    assert "Paris" in text and text == b.choices[0].message.content
    assert a.choices[0].finish_reason in ("stop", "length")
    u = a.usage.model_dump()
    assert u["prompt_tokens"] > 10 and 0 < u["completion_tokens"] <= 24
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    for k in ("ttft_s", "prefill_tok_s", "decode_tok_s", "total_s", "usd_cost", "usd_per_million_output_tokens"):
        assert isinstance(u[k], float) and u[k] > 0, (k, u)


def test_stream_gives_the_same_text_and_usage(server):
    whole = server.client.chat.completions.create(model=MODEL, messages=Q, temperature=0, max_tokens=16)
    chunks = list(server.client.chat.completions.create(
        model=MODEL, messages=Q, temperature=0, max_tokens=16, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) >= 2, "tokens must stream"
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == [whole.choices[0].finish_reason]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_sampling_controls(server):
    msgs = [{"role": "user", "content": "Write a sentence about the sea."}]
    run = lambda seed: server.client.chat.completions.create(  # noqa: E731
        model=MODEL, messages=msgs, temperature=1.0, top_p=0.95, seed=seed, max_tokens=20).choices[0].message.content
    assert run(11) == run(11)
    assert len({run(s) for s in (1, 2, 3)}) > 1, "different seeds should give different answers"
    r = server.client.chat.completions.create(model=MODEL, messages=msgs, temperature=0, max_tokens=3)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 3


def test_stop_sequence_cuts_the_answer(server):
    full = server.client.chat.completions.create(model=MODEL, messages=Q, temperature=0, max_tokens=24)
    text = full.choices[0].message.content
    word = "Paris"
    assert word in text
    cut = server.client.chat.completions.create(model=MODEL, messages=Q, temperature=0, max_tokens=24, stop=[word])
    assert cut.choices[0].message.content == text[:text.index(word)]
    assert cut.choices[0].finish_reason == "stop"
    streamed = "".join(c.choices[0].delta.content or "" for c in server.client.chat.completions.create(
        model=MODEL, messages=Q, temperature=0, max_tokens=24, stop=word, stream=True) if c.choices)
    assert streamed == text[:text.index(word)]


def test_history_is_part_of_the_prompt(server):
    one = server.client.chat.completions.create(model=MODEL, messages=Q, temperature=0, max_tokens=2)
    hist = [*Q, {"role": "assistant", "content": "Paris."}, {"role": "user", "content": "And of Italy?"}]
    two = server.client.chat.completions.create(model=MODEL, messages=hist, temperature=0, max_tokens=2)
    assert two.usage.prompt_tokens > one.usage.prompt_tokens + 5


def test_errors_are_openai_style_and_the_server_keeps_serving(server):
    with pytest.raises(openai.NotFoundError) as e:
        server.client.chat.completions.create(model="nope", messages=Q)
    assert "nope" in str(e.value) and MODEL in str(e.value)
    with pytest.raises(openai.BadRequestError, match="temperature"):
        server.client.chat.completions.create(model=MODEL, messages=Q, temperature=5)
    for body, param in [(b"{not json", "body"), ({"model": MODEL}, "messages"),
                        ({"model": MODEL, "messages": Q, "max_tokens": "many"}, "max_tokens")]:
        status, _, err = server.post(body)
        assert status == 400 and err["error"]["param"] == param and err["error"]["type"] == "invalid_request_error"
    long = [{"role": "user", "content": "word " * 9000}]
    status, _, err = server.post({"model": MODEL, "messages": long, "max_tokens": 1})
    assert status == 400 and err["error"]["code"] == "context_length_exceeded", err
    assert server.get("/nowhere")[0] == 404
    assert server.client.chat.completions.create(model=MODEL, messages=Q, max_tokens=2).choices


def test_full_queue_answers_503_with_retry_after(server):
    results: list[tuple[int, dict]] = []
    lock = threading.Lock()

    def ask():
        status, headers, body = server.post({"model": MODEL, "messages": Q, "max_tokens": 24, "temperature": 0})
        with lock:
            results.append((status, {k.lower(): v for k, v in headers.items()}))

    threads = [threading.Thread(target=ask) for _ in range(10)]  # parallel 2 + queue 2 < 10
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    statuses = sorted(s for s, _ in results)
    assert 200 in statuses and 503 in statuses and set(statuses) <= {200, 503}, statuses
    assert all(h.get("retry-after") == "1" for s, h in results if s == 503)
    assert server.metric("nibble_requests_refused_total") >= statuses.count(503)


def test_client_disconnect_stops_generation(server):
    before = server.metric("nibble_requests_cancelled_total")
    stream = server.client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Tell me a long story."}], max_tokens=500, stream=True,
        temperature=0, seed=1)
    for i, _ in enumerate(stream):
        if i == 3:
            break
    stream.close()
    server.wait_metric("nibble_requests_cancelled_total", lambda v: v > before, "the disconnect was not noticed")
    server.wait_metric("nibble_active_generations", lambda v: v == 0, "the generation was not dropped")


def test_client_leaving_while_queued_is_dropped_before_it_runs():
    s = Server("--parallel", "1")
    try:
        long = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me a long story."}],
                "max_tokens": 120, "temperature": 0}
        first = threading.Thread(target=s.post, args=(long,))
        first.start()
        s.wait_metric("nibble_active_generations", lambda v: v >= 1, "the long answer did not start")
        stream = s.client.chat.completions.create(model=MODEL, messages=Q, max_tokens=8, stream=True)
        next(iter(stream))  # the role chunk: the request is accepted and queued behind the long answer
        assert s.metric("nibble_queue_depth") == 1
        stream.close()
        s.wait_metric("nibble_requests_cancelled_total", lambda v: v >= 1, "leaving while queued was not noticed")
        first.join()
        assert s.metric("nibble_requests_ok_total") == 1, "the long answer only: the queued one never ran"
        s.wait_metric("nibble_active_generations", lambda v: v == 0, "a generation is still active")
        s.wait_metric("nibble_queue_depth", lambda v: v == 0, "a request is still queued")
    finally:
        s.stop()


def test_harmless_openai_arguments_and_wrong_methods(server):
    r = server.client.chat.completions.create(model=MODEL, messages=Q, max_tokens=2, frequency_penalty=0,
                                              presence_penalty=0, logprobs=False)
    assert r.choices
    with pytest.raises(openai.BadRequestError, match="frequency_penalty"):
        server.client.chat.completions.create(model=MODEL, messages=Q, max_tokens=2, frequency_penalty=1)
    status, body = server.get("/v1/chat/completions")
    assert status == 405 and json.loads(body)["error"]["param"] == "method", body


def test_sigterm_lets_the_answer_in_flight_finish():
    s = Server("--parallel", "1")
    try:
        got: list[str] = []
        stream = s.client.chat.completions.create(model=MODEL, messages=Q, temperature=0, max_tokens=40, stream=True)
        first = next(iter(stream))
        s.proc.send_signal(signal.SIGTERM)
        for c in stream:
            if c.choices and c.choices[0].delta.content:
                got.append(c.choices[0].delta.content)
        assert first.choices and got, "the stream must go on after SIGTERM"
        assert s.wait(timeout=60) == 0
        events = [e.get("event") for e in s.log]
        assert "shutting_down" in events and events[-1] == "stopped", events
        assert [e.get("cause") for e in s.log if e.get("event") == "shutting_down"] == ["SIGTERM"]
        assert any(e.get("event") == "request" and e.get("status") == "ok" for e in s.log)
    finally:
        s.stop()


def test_a_second_sigterm_ends_the_process_at_once():
    s = Server("--parallel", "1")
    try:
        stream = s.client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Write a very long story."}], max_tokens=4000,
            temperature=0.8, seed=3, stream=True)
        next(iter(stream))
        s.proc.send_signal(signal.SIGTERM)
        s.wait_log(lambda e: e.get("event") == "shutting_down", "the first SIGTERM did not start the shutdown")
        s.proc.send_signal(signal.SIGTERM)
        assert s.wait(timeout=10) == 130
        assert any("second signal" in str(e.get("note", "")) for e in s.log), s.log[-3:]
    finally:
        s.stop()


def test_stop_on_stdin_eof_shuts_down_when_the_pipe_closes():
    """--stop-on-stdin-eof (examples/ray's replicas hold the pipe): input is read and ignored, and its end starts
    the same graceful shutdown as SIGTERM; without the flag a closed stdin changes nothing."""
    s = Server("--parallel", "1", "--stop-on-stdin-eof", stdin=subprocess.PIPE)
    plain = Server("--parallel", "1", stdin=subprocess.PIPE)
    try:
        s.proc.stdin.write("anything\n")
        s.proc.stdin.flush()
        plain.proc.stdin.close()
        stream = s.client.chat.completions.create(model=MODEL, messages=Q, temperature=0, max_tokens=24, stream=True)
        first = next(iter(stream))
        assert s.proc.poll() is None, "input on stdin must not stop the server"
        s.proc.stdin.close()
        got = [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content]
        assert first.choices and got, "the answer in flight must finish"
        assert s.wait(timeout=60) == 0
        shut = [e for e in s.log if e.get("event") == "shutting_down"]
        assert [e.get("cause") for e in shut] == ["standard input closed"], s.log[-4:]
        assert plain.proc.poll() is None and plain.client.models.list().data, "without the flag stdin is not watched"
    finally:
        s.stop()
        plain.stop()


def raw_exchange(s: Server, data: bytes, wait: float = 10) -> tuple[bytes, float]:
    """Sends `data` on a new connection and reads until the server closes it (or `wait` s pass): what came back,
    and after how many seconds."""
    host, port = s.url.split("//")[1].split(":")
    t = time.time()
    with socket.create_connection((host, int(port)), timeout=wait) as sock:
        if data:
            sock.sendall(data)
        got = b""
        try:
            while more := sock.recv(65536):
                got += more
        except (TimeoutError, ConnectionResetError):
            pass
    return got, time.time() - t


def post_head(length: int) -> bytes:
    return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def test_limit_flags_refuse_bad_values_naming_flag_and_value():
    for flag, value in [("--max-connections", "0"), ("--max-body-bytes", "0"), ("--header-timeout", "-1"),
                        ("--body-timeout", "soon"), ("--header-timeout", "0")]:
        r = subprocess.run([str(BIN), "--model", str(MODEL_DIR), f"{flag}={value}"], capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 2 and f"'{value}'" in r.stderr and flag in r.stderr, (flag, value, r.stderr)


def test_body_size_header_and_body_timeouts_take_effect():
    s = Server("--parallel", "1", "--max-body-bytes", "1024", "--header-timeout", "1", "--body-timeout", "1")
    try:
        limits = next(e for e in s.log if e.get("event") == "listening")["limits"]
        assert limits == {"max_connections": 512, "max_body_bytes": 1024, "header_timeout_s": 1.0,
                          "body_timeout_s": 1.0}, limits
        small = {"model": MODEL, "messages": Q, "max_tokens": 2}
        assert s.post(small)[0] == 200
        # over 1 KiB: sent, or only declared (refused at once, before any body byte: not the body timeout's 408)
        big = {"model": MODEL, "messages": [{"role": "user", "content": "x" * 1100}], "max_tokens": 2}
        status, _, err = s.post(big)
        assert status == 413 and err["error"]["param"] == "body", (status, err)
        got, took = raw_exchange(s, post_head(2000))
        assert got.startswith(b"HTTP/1.1 413") and took < 0.9, (got[:200], took)
        # no length declared (chunked): refused once the bytes read pass 1 KiB
        chunk = b"x" * 600
        chunked = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Transfer-Encoding: chunked\r\n\r\n" + (b"258\r\n" + chunk + b"\r\n") * 3 + b"0\r\n\r\n")
        got, took = raw_exchange(s, chunked)
        assert got.startswith(b"HTTP/1.1 413"), (got[:200], took)
        # headers not finished within 1 s: the connection is closed without an answer; likewise an idle one
        got, took = raw_exchange(s, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        assert got == b"" and 0.9 < took < 5, (got, took)
        got, took = raw_exchange(s, b"")
        assert got == b"" and 0.9 < took < 5, (got, took)
        # headers in, a third of the body: 408 after 1 s
        body = json.dumps(small).encode()
        got, took = raw_exchange(s, post_head(len(body)) + body[:len(body) // 3])
        assert got.startswith(b"HTTP/1.1 408") and b"--body-timeout" in got and 0.9 < took < 5, (got[:300], took)
        assert s.metric("nibble_requests_invalid_total", model=None) == 4  # 413, 413, 413, 408
        assert s.metric("nibble_requests_ok_total") == 1
    finally:
        s.stop()


def test_connection_limit_makes_the_next_connection_wait():
    s = Server("--parallel", "1", "--max-connections", "4")
    host, port = s.url.split("//")[1].split(":")
    held = [socket.create_connection((host, int(port)), timeout=10) for _ in range(4)]
    try:
        fifth = socket.create_connection((host, int(port)), timeout=10)  # the kernel's backlog takes it
        fifth.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        fifth.settimeout(1.5)
        with pytest.raises(TimeoutError):
            fifth.recv(100)  # not served while 4 are open
        held.pop().close()
        fifth.settimeout(10)
        assert fifth.recv(100).startswith(b"HTTP/1.1 200"), "served once one of the 4 closed"
        fifth.close()
        for c in held:
            c.close()
        held.clear()
        s.wait_metric("nibble_connections_open", lambda v: v == 1, "connections not closed", model=None)
        assert s.metric("nibble_connections_total", model=None) >= 6
    finally:
        for c in held:
            c.close()
        s.stop()
