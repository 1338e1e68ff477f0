"""A free TCP port for a Ray Serve proxy that nothing else on the host will take before the proxy binds it.

A port from bind(("127.0.0.1", 0)) comes from the kernel's ephemeral range, and so do the ports of the dozens of
processes a Ray cluster starts (GCS, raylets, workers' gRPC servers): one of them took such a port between the
test's pick and the proxy's bind ("Failed to bind to address '127.0.0.1:41525'", CI of 2026-11-28). Ports are
therefore picked below the ephemeral range (/proc/sys/net/ipv4/ip_local_port_range) and above Ray's worker port
range (10002-19999 by default), where only an explicit bind lands, and checked free by binding them."""

from __future__ import annotations

import random
import socket

RAY_WORKER_PORTS_END = 19999


def ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (32768 if it cannot be read)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(taken: tuple[int, ...] = ()) -> int:
    """A port in (Ray's worker ports, the ephemeral range) that binds now and is not in `taken`."""
    lo, hi = RAY_WORKER_PORTS_END + 1, ephemeral_start() - 1
    if hi - lo < 100:
        raise RuntimeError(f"no room for a fixed port between {lo} and the ephemeral range starting at {hi + 1}")
    rng = random.Random()
    for _ in range(200):
        port = rng.randint(lo, hi)
        if port in taken:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port between {lo} and {hi} after 200 tries")
