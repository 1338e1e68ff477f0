"""A small Chrome DevTools Protocol client over --remote-debugging-pipe (Chromium reads commands from fd 3 and
writes answers and events to fd 4, each a JSON message ending in a NUL byte): no websocket library, nothing
downloaded. Drives Debian's chromium-headless-shell (or chromium) for tests/server/test_page.py."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

CANDIDATES = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")


def find_browser() -> str | None:
    env = os.environ.get("NIBBLE_CHROMIUM")
    if env:
        return env
    return next((p for p in map(shutil.which, CANDIDATES) if p), None)


class CdpError(RuntimeError):
    pass


class Browser:
    """One headless browser with one page (a flattened session on its first tab)."""

    def __init__(self, exe: str, width: int = 1280, height: int = 900):
        self.profile = tempfile.TemporaryDirectory(prefix="nibble-cdp-")
        to_browser_r, self._w = os.pipe()
        self._r, from_browser_w = os.pipe()
        # fd 3 = the browser's input, fd 4 = its output
        args = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
                "--remote-debugging-pipe", f"--user-data-dir={self.profile.name}",
                f"--window-size={width},{height}", "about:blank"]

        def child_fds():
            # first out of the way (either end may itself be 3 or 4), then onto 3 and 4
            r, w = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10), fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
            os.dup2(r, 3)
            os.dup2(w, 4)

        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(args, preexec_fn=child_fds, pass_fds=(3, 4), stdout=subprocess.DEVNULL,
                                     stderr=self.log)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buf = b""
        self._next = 0
        self.events: list[dict] = []
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next((t for t in targets if t["type"] == "page"), None)
        if page is None:
            page = {"targetId": self.call("Target.createTarget", url="about:blank")["targetId"]}
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]
        self.page("Page.enable")
        self.page("Runtime.enable")
        self.page("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                  mobile=False)

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.time()
            if left <= 0 or not select.select([self._r], [], [], left)[0]:
                raise CdpError("no answer from the browser in time")
            chunk = os.read(self._r, 1 << 16)
            if not chunk:
                self.log.seek(0)
                err = self.log.read().decode(errors="replace")
                raise CdpError(f"the browser closed its DevTools pipe (exit {self.proc.poll()}): {err[-2000:]}")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, session: str | None = None, timeout: float = 60, **params) -> dict:
        self._next += 1
        mid = self._next
        msg = {"id": mid, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.time() + timeout
        while True:
            m = self._read_message(deadline)
            if m.get("id") == mid:
                if "error" in m:
                    raise CdpError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def page(self, method: str, **params) -> dict:
        return self.call(method, session=self.session, **params)

    def navigate(self, url: str, timeout: float = 30):
        self.page("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete'", timeout)

    def eval(self, expression: str):
        r = self.page("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise CdpError(f"{expression!r}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_for(self, expression: str, timeout: float, every: float = 0.05):
        """Polls `expression` until it is truthy; returns its value."""
        deadline = time.time() + timeout
        while True:
            v = self.eval(expression)
            if v:
                return v
            if time.time() > deadline:
                raise CdpError(f"timed out after {timeout} s waiting for {expression!r}")
            time.sleep(every)

    def click(self, selector: str):
        """A real mouse click (press and release) at the centre of the element."""
        box = self.eval(f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
                        " return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        for kind in ("mousePressed", "mouseReleased"):
            self.page("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)

    def type_text(self, selector: str, text: str):
        """Focuses the element and types `text` as keyboard input."""
        self.click(selector)
        self.page("Input.insertText", text=text)

    def screenshot(self, path: Path):
        data = self.page("Page.captureScreenshot", format="png", captureBeyondViewport=False)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))

    def close(self):
        try:
            self.call("Browser.close", timeout=5)
        except CdpError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._w)
        os.close(self._r)
        self.log.close()
        self.profile.cleanup()
