"""scripts/demo.sh refuses bad options before it installs or builds anything (it checks them first)."""

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def demo(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "scripts/demo.sh"), *args], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)


@pytest.mark.parametrize("args, message", [
    (["--lm-head", "bf16"], "--lm-head takes fp32 or quantized, not 'bf16'"),
    (["--lm-head=int2"], "--lm-head takes fp32 or quantized, not 'int2'"),
    (["--lm-head"], "--lm-head needs a value: fp32 or quantized"),
    (["--lm-head", "fp32", "--no-such-option"], "unknown option --no-such-option"),
])
def test_bad_options_fail_before_setup(args, message):
    r = demo(*args)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert message in r.stderr, r.stderr
    assert "==> setup" not in r.stdout, "demo.sh started its setup before refusing the options"
