"""bench/soak.py in a short mode (40 s of load, a fault every second, the SIGTERM-and-restart cycle at 40%):
the driver itself is tested, and so is the server under it. The 30-minute run is a benchmark
(bench/results/soak-smollm2/, docs/reliability.md), not a test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from test_server import BIN, MODEL_DIR, ROOT

FAULT_KINDS = {"drop", "slow_reader", "oversize", "malformed", "slow_headers", "idle", "slow_body", "burst"}


def test_short_soak_passes_its_checks(tmp_path: Path):
    assert BIN.is_file(), f"{BIN} missing: cargo build --release -p nibble-serve"
    out = tmp_path / "soak"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "soak.py"), "--duration", "40", "--fault-every", "1",
                        "--sample-every", "2", "--warmup", "4", "--rss-slack", "1.0", "--threads", "2",
                        "--bin", str(BIN), "--model-dir", str(MODEL_DIR), "--out", str(out)],
                       capture_output=True, text=True, timeout=240)
    rec = json.loads((out / "soak.json").read_text())
    assert r.returncode == 0 and rec["passed"], (rec["violations"], r.stderr[-3000:])
    # every fault kind was injected, and the checks had something to check
    assert set(rec["faults_injected"]) == FAULT_KINDS, rec["faults_injected"]
    for outcome in ("complete", "dropped", "refused_503", "invalid_413", "invalid_400", "invalid_404",
                    "invalid_408", "closed"):
        assert rec["outcomes"].get(outcome, 0) > 0, (outcome, rec["outcomes"])
    assert rec["restart"]["exit_code"] == 0 and rec["final_exit_code"] == 0 and len(rec["lives"]) == 2
    eqs = rec["equations"]
    assert eqs and all(e["holds"] for e in eqs)
    assert {e["source"] for e in eqs} == {"stop line", "/metrics when quiescent"}
    assert {e["name"] for e in eqs} >= {"ok", "cancelled", "failed", "refused", "invalid", "completion_tokens",
                                        "connections_total", "nibble_connections_open"}
    assert (out / "soak.svg").read_text().startswith("<svg") and (out / "requests.csv").is_file()
