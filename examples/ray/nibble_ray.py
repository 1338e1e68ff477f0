"""nibble on Ray Serve: an OpenAI-compatible chat deployment whose replicas each supervise one nibble-serve process.

Every replica starts target/release/nibble-serve (examples/server) on a free loopback port of its own node, with as
many ORT threads as the replica's Ray CPU share (`ray_actor_options.num_cpus`), and forwards each HTTP request that
Ray's proxy routes to it: POST /v1/chat/completions (streamed server-sent events are passed on chunk by chunk, as they
come), GET /v1/models, /health, /metrics (that replica's) and the chat page at /. The generation loop, the OpenAI
shapes and the usage metrics are nibble-serve's: this file only places, forwards and supervises. The model's weights
are packed once per replica (one ORT session; nibble as an execution provider on ORT >= 1.24).

Each answer carries the headers `x-nibble-node` (the Ray node id), `x-nibble-replica` (the Serve replica id),
`x-nibble-replica-pid` (the replica's process) and `x-nibble-pid` (its nibble-serve's), so a client can see where it
was served.

Health: Serve calls `check_health` every `health_check_period_s`; it fails when the nibble-serve process has exited
or its /health is not 200 (nibble-serve answers 503 once a model's generation thread has ended), and Serve then
replaces the replica. Serve does so only after 3 failed checks in a row (REPLICA_HEALTH_CHECK_UNHEALTHY_THRESHOLD),
and its routers keep sending the replica requests until then: so when nibble-serve exits without being asked to, the
replica ends its own process at once instead (`_server_exited`), the routers re-route the requests not yet accepted
(ActorDiedError) and the controller starts a replacement. nibble-serve shuts down with the replica: its standard input
is a pipe whose other end only the replica holds (`--stop-on-stdin-eof`), so a replica that ends, even by SIGKILL,
leaves no server. It is started without fork() (`NibbleServeProcess._supervise`): a fork of the replica's process runs
the fork handlers of the gRPC library in Ray's core worker, which can abort in the child before the exec and leave
an alarm armed that kills nibble-serve 3 s after it starts.

Application arguments (`args:` in the Serve config, or `serve run nibble_ray:build model=...`): `model` (a model
directory, default <repo>/target/llama/smollm2-q4), `model_id` (default: the directory's name), `binary` (default
<repo>/target/release/nibble-serve), `parallel` (answers generated at once per replica, default 4), `queue`
(requests waiting inside nibble-serve, default 16; keep parallel + queue >= the deployment's max_ongoing_requests,
so that Ray, not a 503 from nibble-serve, holds back what a replica cannot take; max_ongoing_requests = parallel
keeps requests in Ray's queue until a replica has a free slot, instead of queueing behind one replica's answers
while another replica idles), `usd_per_hour`,
`frontend` (auto, ep or custom-op). Relative paths are taken from the repository root; every node needs the same
checkout (built binary and model) at the same path.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import queue as queue_mod
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import aiohttp
from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BINARY = ROOT / "target" / "release" / "nibble-serve"
DEFAULT_MODEL = ROOT / "target" / "llama" / "smollm2-q4"
START_TIMEOUT_S = 300.0
# Response headers of nibble-serve passed on to the client (hop-by-hop ones, e.g. transfer-encoding, are not).
PASSED_HEADERS = ("content-type", "cache-control", "retry-after")


def _openai_error(status: int, message: str, code: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "server_error", "param": None, "code": code}},
                        status_code=status)


def _resolve(path: str | os.PathLike) -> Path:
    p = Path(path)
    return p if p.is_absolute() else ROOT / p


class NibbleServeProcess:
    """One nibble-serve child process: started, its log drained, its URL known, stopped."""

    def __init__(self, binary: Path, args: list[str], name: str, on_exit=None):
        """`on_exit(self, status)` is called from the supervisor thread when the child exits after it was listening
        and without stop() having asked it to."""
        if not binary.is_file():
            raise RuntimeError(f"{binary} does not exist: build it with "
                               "`cargo build --release -p nibble-ort -p nibble-llama -p nibble-serve`")
        self.cmd = [str(binary), "--host", "127.0.0.1", "--port", "0", *args]
        self.name = name
        self.tail: collections.deque[str] = collections.deque(maxlen=40)  # the last log lines, for error messages
        self.proc: subprocess.Popen | None = None
        self.url: str | None = None
        self.on_exit = on_exit
        self.stopping = False
        started: queue_mod.Queue = queue_mod.Queue()
        self.thread = threading.Thread(target=self._supervise, args=(started,), name=f"nibble-serve-{name}",
                                       daemon=True)
        self.thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                kind, value = started.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue_mod.Empty:
                self.stop()
                raise RuntimeError(f"nibble-serve did not start listening within {START_TIMEOUT_S:.0f} s "
                                   f"({' '.join(self.cmd)}); its log:\n" + "".join(self.tail)) from None
            if kind == "listening":
                self.url = value.rstrip("/")
                return
            raise RuntimeError(f"nibble-serve failed to start ({' '.join(self.cmd)}): {value}; its log:\n"
                               + "".join(self.tail))

    def _supervise(self, started: queue_mod.Queue) -> None:
        # No preexec_fn (nor user, group or session change): Python then starts the child with vfork or
        # posix_spawn, which run no fork handlers. A fork() of a replica runs those of the gRPC library in Ray's
        # core worker, whose event engine can abort in the child before the exec (epoll_wait on a descriptor the
        # fork closed); Abseil's failure handler then arms alarm(3), which survives the exec: nibble-serve dead by
        # SIGALRM 3 s after it started (CI runs, where its replica's answers were cut). The pipe on stdin is only
        # ours (Popen's descriptors are close-on-exec): it closes when this process ends, however, and nibble-serve
        # then shuts down.
        try:
            self.proc = subprocess.Popen([*self.cmd, "--stop-on-stdin-eof"], stdin=subprocess.PIPE,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                         errors="replace")
        except OSError as e:
            started.put(("error", str(e)))
            return
        listening = False
        for line in self.proc.stderr:
            self.tail.append(line)
            sys.stderr.write(f"[nibble-serve {self.name}] {line}")  # into the replica's Ray log
            if not listening:
                try:
                    ev = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(ev, dict) and ev.get("event") == "listening":
                    listening = True
                    started.put(("listening", ev["url"]))
        code = self.proc.wait()
        if not listening:
            started.put(("error", f"exited with status {code} before listening"))
        elif not self.stopping and self.on_exit is not None:
            self.on_exit(self, code)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def exit_code(self) -> int | None:
        return self.proc.poll() if self.proc else None

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (nibble-serve finishes the answers in flight), then SIGKILL after `timeout` seconds."""
        self.stopping = True
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@serve.deployment(
    name="NibbleChat",
    ray_actor_options={"num_cpus": 1},
    max_ongoing_requests=4,  # = parallel (below): Ray, not a replica's queue, holds what no slot can take yet
    health_check_period_s=5,
    health_check_timeout_s=10,
    graceful_shutdown_timeout_s=30,
)
class NibbleChat:
    def __init__(self, model: str | None = None, model_id: str | None = None, binary: str | None = None,
                 parallel: int = 4, queue: int = 16, usd_per_hour: float | None = None,
                 frontend: str = "auto"):
        import ray

        ctx = ray.get_runtime_context()
        cpus = ctx.get_assigned_resources().get("CPU", 0.0)
        self.threads = max(1, int(round(cpus)))  # the replica's CPU share, as ORT intra-op threads
        self.node_id = ctx.get_node_id()
        self.replica_id = serve.get_replica_context().replica_id.unique_id
        model_dir = _resolve(model) if model else DEFAULT_MODEL
        if not (model_dir / "model.onnx").is_file():
            raise RuntimeError(f"model directory {model_dir} has no model.onnx (scripts/convert-smollm2.sh makes "
                               "target/llama/smollm2-q4)")
        parallel = int(parallel)
        queue = int(queue)
        args = ["--model", str(model_dir), "--threads", str(self.threads), "--parallel", str(parallel),
                "--queue", str(queue), "--frontend", frontend]
        if model_id:
            args += ["--model-id", model_id]
        if usd_per_hour is not None:
            args += ["--usd-per-hour", str(usd_per_hour)]
        self.server = NibbleServeProcess(_resolve(binary) if binary else DEFAULT_BINARY, args, self.replica_id,
                                         on_exit=self._server_exited)
        self.session: aiohttp.ClientSession | None = None
        self.headers = {"x-nibble-node": self.node_id, "x-nibble-replica": self.replica_id,
                        "x-nibble-replica-pid": str(os.getpid()), "x-nibble-pid": str(self.server.pid)}
        print(f"replica {self.replica_id} on node {self.node_id}: nibble-serve pid {self.server.pid} at "
              f"{self.server.url}, {self.threads} thread(s) from num_cpus={cpus}", file=sys.stderr, flush=True)

    def _server_exited(self, server: NibbleServeProcess, code: int) -> None:
        """nibble-serve exited unasked (killed, crashed): this replica can answer nothing more. Its process ends now,
        rather than after Serve's 3 failed health checks in a row (~15 s at health_check_period_s=5) during which the
        routers would keep sending it requests to answer 503: its routers see the replica dead and send the requests
        it has not accepted to another replica, and the controller replaces it."""
        how = f"signal {signal.Signals(-code).name}" if -code in signal.valid_signals() else f"status {code}"
        print(f"replica {self.replica_id}: nibble-serve (pid {server.pid}) exited with {how}; ending the replica so "
              "that Serve replaces it; its log:\n" + "".join(server.tail), file=sys.stderr, flush=True)
        os._exit(1)

    def _client(self) -> aiohttp.ClientSession:
        if self.session is None or self.session.closed:
            # No total timeout: a streamed answer may take minutes; a dead server fails the connect at once.
            self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, connect=10),
                                                 connector=aiohttp.TCPConnector(limit=0))
        return self.session

    async def __call__(self, request: Request) -> Response:
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        body = await request.body()
        fwd = {k: v for k, v in request.headers.items() if k.lower() in ("content-type", "accept")}
        try:
            resp = await self._client().request(request.method, self.server.url + path, data=body, headers=fwd)
        except aiohttp.ClientError as e:
            return _openai_error(503, f"replica {self.replica_id}: nibble-serve at {self.server.url} is unreachable "
                                 f"({e}; exit status {self.server.exit_code()})", "replica_unavailable")
        headers = {k: v for k, v in resp.headers.items() if k.lower() in PASSED_HEADERS}
        headers.update(self.headers)
        if resp.headers.get("content-type", "").startswith("text/event-stream"):
            async def chunks():
                done = False
                try:
                    async for chunk in resp.content.iter_any():
                        yield chunk
                    done = True
                finally:
                    # The client left (Ray cancels us): closing the connection makes nibble-serve drop the answer.
                    if done:
                        resp.release()
                    else:
                        resp.close()
            return StreamingResponse(chunks(), status_code=resp.status, headers=headers)
        try:
            data = await resp.read()
        finally:
            resp.release()
        return Response(data, status_code=resp.status, headers=headers)

    async def check_health(self) -> None:
        code = self.server.exit_code()
        if code is not None:
            raise RuntimeError(f"nibble-serve (pid {self.server.pid}) exited with status {code}; its log:\n"
                               + "".join(self.server.tail))
        try:
            async with self._client().get(self.server.url + "/health",
                                          timeout=aiohttp.ClientTimeout(total=5)) as r:
                text = await r.text()
                status = r.status
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            raise RuntimeError(f"nibble-serve (pid {self.server.pid}) /health did not answer: {e!r}") from e
        if status != 200:
            raise RuntimeError(f"nibble-serve (pid {self.server.pid}) /health answered {status}: {text}")

    def __del__(self):
        server = getattr(self, "server", None)
        if server is not None:
            server.stop()


def build(args: dict) -> serve.Application:
    """The application, for `serve run nibble_ray:build key=value ...` and the Serve config's `import_path`."""
    known = {"model", "model_id", "binary", "parallel", "queue", "usd_per_hour", "frontend"}
    unknown = sorted(set(args) - known)
    if unknown:
        raise ValueError(f"nibble_ray: unknown application argument(s) {unknown}; known: {sorted(known)}")
    return NibbleChat.bind(**args)
