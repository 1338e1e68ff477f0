"""The chat page (GET /) in a real headless browser: Debian's chromium-headless-shell driven through the DevTools
protocol (tests/server/cdp.py; nothing is downloaded). It types a question, clicks Send with the mouse, watches the
three side-by-side answers (fp32, ORT's INT4, nibble's INT4) stream in, checks each shown text against the API's
own answer and the metrics and speed-up against the usage blocks, goes on with a follow-up question (history), and
stops a long answer with the Stop button (the server drops that generation). The screenshot of the side-by-side
is saved to $NIBBLE_PAGE_SCREENSHOT (default target/screenshots/chat-page.png); docs/chat-page.png is one."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

import cdp
from test_server import FP32_DIR, MODEL, TARGET, Server

SHOT = Path(os.environ.get("NIBBLE_PAGE_SCREENSHOT", TARGET / "screenshots" / "chat-page.png"))
QUESTION = "What is the capital of France, and why is it famous?"
MAX_TOKENS = 48


@pytest.fixture(scope="module")
def server():
    s = Server("--compare", "--fp32-model", str(FP32_DIR), "--parallel", "2")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def browser():
    exe = cdp.find_browser()
    assert exe, ("no headless Chromium found (tried $NIBBLE_CHROMIUM and " + ", ".join(cdp.CANDIDATES) +
                 "): scripts/setup.sh installs Debian's chromium-headless-shell")
    b = cdp.Browser(exe)
    yield b
    b.close()


def answers(b: cdp.Browser) -> list[dict]:
    return b.eval("""[...document.querySelectorAll('.answers')].at(-1)
        ? [...[...document.querySelectorAll('.answers')].at(-1).querySelectorAll('.answer')].map(a => ({
            model: a.dataset.model, role: a.dataset.role || null, done: a.dataset.done === '1',
            text: a.querySelector('.text').textContent, status: a.querySelector('.status').textContent,
            metrics: Object.fromEntries([...a.querySelectorAll('.metrics div')].map(
                d => [d.querySelector('span').textContent, d.querySelector('b').textContent]))}))
        : []""")


def api_answer(server: Server, model: str, messages: list[dict]) -> dict:
    status, _, body = server.post({"model": model, "messages": messages, "max_tokens": MAX_TOKENS, "temperature": 0})
    assert status == 200, body
    return body


def ask(b: cdp.Browser, question: str):
    b.type_text("#prompt", question)
    b.click("#send")


def test_side_by_side_streams_and_shows_the_metrics(server, browser):
    b = browser
    b.navigate(server.url + "/")
    assert b.wait_for("document.querySelectorAll('#model option').length === 3", 15)
    assert b.eval("document.getElementById('compare').checked && !document.getElementById('compare').disabled")
    b.eval(f"document.getElementById('max-tokens').value = '{MAX_TOKENS}'")
    ask(b, QUESTION)
    # Poll while it runs: some answer must be seen with text but not yet done (= streamed, not shown at once).
    partial, deadline = {}, time.time() + 240
    while not b.eval("!!document.querySelector('[data-testid=speedup]')"):
        for a in answers(b):
            if a["text"] and not a["done"]:
                partial.setdefault(a["role"], set()).add(a["text"])
        assert time.time() < deadline, answers(b)
        time.sleep(0.03)
    shown = answers(b)
    assert [a["role"] for a in shown] == ["fp32", "ort-int4", "nibble-int4"], shown
    # streamed: some answer was seen as a non-empty strict prefix of its final text
    final = {a["role"]: a["text"] for a in shown}
    assert any(t != final[r] and final[r].startswith(t) for r, ts in partial.items() for t in ts), \
        f"no answer was seen part-way: the text did not stream ({partial})"
    b.screenshot(SHOT)
    assert SHOT.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and SHOT.stat().st_size > 20_000

    messages = [{"role": "user", "content": QUESTION}]
    usage = {}
    for a in shown:
        assert a["done"], a
        # What the page shows is what the API answers (greedy: the same tokens).
        want = api_answer(server, a["model"], messages)
        assert a["text"] == want["choices"][0]["message"]["content"], (a["model"], a["text"], want)
        assert a["text"].strip()
        m = a["metrics"]
        assert m["tokens in / out"] == f'{want["usage"]["prompt_tokens"]} / {want["usage"]["completion_tokens"]}'
        for k in ("TTFT s", "decode tok/s", "prefill tok/s", "total s"):
            assert float(m[k]) > 0, (k, m)
        for k in ("$ / 1M out tokens", "answer cost"):
            assert m[k].startswith("$") and float(m[k][1:]) > 0, (k, m)
        usage[a["role"]] = {k: m[k] for k in ("TTFT s", "decode tok/s")}
    speed = b.eval("document.querySelector('[data-testid=speedup]').textContent")
    # The shown ratio is the ratio of the figures behind the shown ones: each shown number stands for the interval
    # of half its last digit around it, so the ratio's interval from the shown figures must meet the shown ratio's
    # (whatever the machine's speed, no relative tolerance to tune).
    for role, name in (("fp32", "fp32"), ("ort-int4", "ORT's INT4")):
        m = re.search(rf"vs {re.escape(name)}: decode ([0-9.]+)× faster, TTFT ([0-9.]+)× faster", speed)
        assert m, speed
        nib = usage["nibble-int4"]
        dec = ratio_interval(nib["decode tok/s"], usage[role]["decode tok/s"])
        ttft = ratio_interval(usage[role]["TTFT s"], nib["TTFT s"])
        assert overlaps(shown_interval(m.group(1)), dec), (speed, usage)
        assert overlaps(shown_interval(m.group(2)), ttft), (speed, usage)
    assert server.metric("nibble_requests_ok_total", "smollm2-fp32") >= 2


def shown_interval(text: str) -> tuple[float, float]:
    """The values a number shown as `text` can stand for: ± half a unit of its last digit."""
    half = 0.5 * 10.0 ** -(len(text.split(".")[1]) if "." in text else 0)
    return float(text) - half, float(text) + half


def ratio_interval(num: str, den: str) -> tuple[float, float]:
    (a, b), (c, d) = shown_interval(num), shown_interval(den)
    assert c > 0, f"a shown figure of {den} cannot be a divisor"
    return a / d, b / c


def overlaps(x: tuple[float, float], y: tuple[float, float]) -> bool:
    return x[0] <= y[1] * (1 + 1e-9) and y[0] <= x[1] * (1 + 1e-9)


def test_follow_up_keeps_the_history(server, browser):
    b = browser
    log_len = len(server.log)
    ask(b, "And of Italy?")
    b.wait_for("[...document.querySelectorAll('.answers')].length === 2 && "
               "!!document.querySelectorAll('.answers')[1].querySelector('[data-testid=speedup]')", 240)
    # the log line of a request follows its [DONE]: wait for the third
    deadline = time.time() + 10
    while len(requests := [e for e in server.log[log_len:] if e.get("event") == "request"]) < 3:
        assert time.time() < deadline, requests
        time.sleep(0.05)
    assert len(requests) == 3 and all(r["status"] == "ok" for r in requests), requests
    first = [e for e in server.log[:log_len] if e.get("event") == "request" and e["model"] == MODEL][0]
    # the second turn sends question, answer and follow-up: a longer prompt
    assert all(r["prompt_tokens"] > first["prompt_tokens"] + 5 for r in requests), (first, requests)


def test_stop_button_ends_the_answer_and_the_server_drops_it(server, browser):
    b = browser
    b.eval("document.getElementById('new-chat').click()")
    b.eval("document.getElementById('compare').click()")  # one model: nibble's
    assert b.eval("!document.getElementById('compare').checked && document.getElementById('model').value") == MODEL
    b.eval("document.getElementById('max-tokens').value = '2000'")
    before = server.metric("nibble_requests_cancelled_total")
    ask(b, "Write a very long story about a cat who travels the world.")
    b.wait_for("[...document.querySelectorAll('.answer .text')].some(t => t.textContent.length > 20)", 60)
    b.click("#stop")
    b.wait_for("document.querySelector('.answer .status').textContent === 'stopped'", 30)
    assert len(answers(b)) == 1
    server.wait_metric("nibble_requests_cancelled_total", lambda v: v > before,
                       "the server did not notice the page's Stop")
    server.wait_metric("nibble_active_generations", lambda v: v == 0, "the stopped generation was not dropped")
    # the page is ready for the next question
    assert b.eval("!document.getElementById('send').disabled && document.getElementById('stop').disabled")
    assert json.loads(server.get("/health")[1])["status"] == "ok"
