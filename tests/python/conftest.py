"""Shared fixtures for the nibble end-to-end tests: loading libnibble_ort.so into ONNX Runtime sessions, ORT's
built-in kernel as an oracle, and the parity summary (target/parity_summary.json + a table at the end of the run).

Environment:
  NIBBLE_LIB                path of the library (default: the installed nibble_ort package's, nibble_ort.get_library_path())
  NIBBLE_ALLOW_MISSING_LIB  "1": tests that need the library skip when it is missing (default: they fail)
  NIBBLE_PARITY_SUMMARY     where the parity summary goes (default <repo>/target/parity_summary.json)
  NIBBLE_FRONTEND           how sessions load the library: "custom-op" (default: register_custom_ops_library) or
                            "ep" (ORT >= 1.24: register_execution_provider_library once, then add_provider_for_devices
                            with the NibbleExecutionProvider device on each SessionOptions)
"""

from __future__ import annotations

import json
import os
import platform
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

import onnx
import onnxruntime as ort
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "models"))

SUMMARY_PATH = Path(os.environ.get("NIBBLE_PARITY_SUMMARY", REPO_ROOT / "target" / "parity_summary.json"))

# Session config keys read by the library (they must be set before register_custom_ops_library).
OVERRIDE_KEY = "nibble.override_com_microsoft"
ACCURACY_DEFAULT_KEY = "nibble.accuracy_level_default"
ACT_QUANT_KEY = "nibble.activation_quant"


FRONTEND_ENV = "NIBBLE_FRONTEND"
FRONTENDS = ("custom-op", "ep")
EP_NAME = "NibbleExecutionProvider"
EP_REGISTRATION_NAME = "nibble"


def frontend() -> str:
    value = os.environ.get(FRONTEND_ENV, "custom-op")
    if value not in FRONTENDS:
        raise ValueError(f"{FRONTEND_ENV}={value!r}: use one of {', '.join(FRONTENDS)}")
    return value


_EP_DEVICES: dict[str, list] = {}


def ep_devices(library: Path) -> list:
    """Registers the library as an execution-provider library (once per process) and returns its devices."""
    key = str(library)
    if key not in _EP_DEVICES:
        # nibble_ort.add_execution_provider (test_package.py) may have registered the same library already.
        if not any(d.ep_name == EP_NAME for d in ort.get_ep_devices()):
            ort.register_execution_provider_library(EP_REGISTRATION_NAME, key)
        devices = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
        assert devices, f"{library} registered no {EP_NAME} device: {[d.ep_name for d in ort.get_ep_devices()]}"
        _EP_DEVICES[key] = devices
    return _EP_DEVICES[key]


def add_library(so: ort.SessionOptions, library: Path, how: str | None = None,
                provider_options: Mapping[str, str] | None = None) -> None:
    """Loads our library into `so` through `how` (default: NIBBLE_FRONTEND)."""
    if (how or frontend()) == "ep":
        so.add_provider_for_devices(ep_devices(library), dict(provider_options or {}))
    else:
        so.register_custom_ops_library(str(library))


def library_path() -> Path:
    """The library of the installed nibble_ort package (what users load: `pip install .` or a wheel), or NIBBLE_LIB
    when set (another build)."""
    if os.environ.get("NIBBLE_LIB"):
        return Path(os.environ["NIBBLE_LIB"])
    try:
        import nibble_ort
    except ImportError as e:
        raise RuntimeError(
            f"the Python tests load the installed nibble_ort package ({e}): `.venv/bin/pip install .` "
            "(scripts/test.sh does), or set NIBBLE_LIB to a libnibble_ort.so") from e
    return Path(nibble_ort.get_library_path())


def session_options(
    library: Path | None = None,
    config: Mapping[str, str] | None = None,
    intra_op_threads: int | None = None,
    opt_level: ort.GraphOptimizationLevel | None = None,
    optimized_model_path: Path | None = None,
) -> ort.SessionOptions:
    """SessionOptions with the config entries set first, then (optionally) our library registered."""
    so = ort.SessionOptions()
    if optimized_model_path is not None:
        so.optimized_model_filepath = str(optimized_model_path)
    for key, value in (config or {}).items():
        so.add_session_config_entry(key, value)
    if intra_op_threads is not None:
        so.intra_op_num_threads = intra_op_threads
    if opt_level is not None:
        so.graph_optimization_level = opt_level
    if library is not None:
        add_library(so, library)
    return so


def create_session(model: onnx.ModelProto, so: ort.SessionOptions) -> ort.InferenceSession:
    """A session on ORT's CPU EP, plus our EP when `so` has it (then the EP list comes from `so`, and Python's
    silent retry on the CPU EP alone after a session error is off: the error must surface)."""
    if getattr(so, "has_providers", lambda: False)():  # (onnxruntime < 1.22 has no providers on options)
        return ort.InferenceSession(model.SerializeToString(), so, enable_fallback=0)
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


SessionFactory = Callable[..., ort.InferenceSession]


@pytest.fixture(scope="session")
def nibble_lib() -> Path:
    """The library path. Fails when the file is missing, unless NIBBLE_ALLOW_MISSING_LIB=1 (then skips)."""
    path = library_path()
    if not path.is_file():
        message = f"{path} not found: install the package with `.venv/bin/pip install .` (or set NIBBLE_LIB)"
        if os.environ.get("NIBBLE_ALLOW_MISSING_LIB") == "1":
            pytest.skip(message)
        pytest.fail(message)
    return path


@pytest.fixture(scope="session")
def ort_session() -> SessionFactory:
    """Factory for sessions WITHOUT our library: ORT's built-in com.microsoft::MatMulNBits, the oracle."""

    def make(model: onnx.ModelProto, **options) -> ort.InferenceSession:
        return create_session(model, session_options(**options))

    return make


@pytest.fixture(scope="session")
def nibble_session(nibble_lib: Path) -> SessionFactory:
    """Factory for sessions with our library registered (kwargs: those of `session_options`)."""

    def make(model: onnx.ModelProto, **options) -> ort.InferenceSession:
        return create_session(model, session_options(library=nibble_lib, **options))

    return make


# ---------------------------------------------------------------------------------------------------------------
# Parity summary
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class GroupStats:
    cases: int = 0
    outputs: int = 0  # output tensors compared (one per A shape per model)
    failed_cases: int = 0
    # comparison name → worst absolute error and worst error / allowed ratio (> 1 fails)
    max_abs: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    max_ratio: dict[str, float] = field(default_factory=lambda: defaultdict(float))


class ParityLog:
    """Collects, per test group, how many cases ran and the worst error of each comparison."""

    def __init__(self) -> None:
        self.groups: dict[str, GroupStats] = defaultdict(GroupStats)

    def record_case(self, group: str, outputs: int, passed: bool) -> None:
        stats = self.groups[group]
        stats.cases += 1
        stats.outputs += outputs
        stats.failed_cases += not passed

    def record_error(self, group: str, comparison: str, abs_err: float, ratio: float) -> None:
        stats = self.groups[group]
        stats.max_abs[comparison] = max(stats.max_abs[comparison], abs_err)
        stats.max_ratio[comparison] = max(stats.max_ratio[comparison], ratio)

    def to_json(self) -> dict:
        return {
            "onnxruntime": ort.__version__,
            "machine": platform.machine(),
            "library": str(library_path()),
            "library_present": library_path().is_file(),
            "total_cases": sum(s.cases for s in self.groups.values()),
            "groups": {
                name: {
                    "cases": s.cases,
                    "outputs": s.outputs,
                    "failed_cases": s.failed_cases,
                    "max_abs_error": dict(s.max_abs),
                    "max_error_over_tolerance": dict(s.max_ratio),
                }
                for name, s in sorted(self.groups.items())
            },
        }

    def table(self) -> list[str]:
        def worst(d: Mapping[str, float], prefix: str) -> str:
            values = [v for k, v in d.items() if k.startswith(prefix)]
            return f"{max(values):.3g}" if values else "-"

        header = (f"{'group':<34} {'cases':>5} {'fail':>4} {'outputs':>7} "
                  f"{'ours-ORT':>9} {'ours-np':>9} {'ORT-np':>9} {'err/tol':>8}")
        lines = [header, "-" * len(header)]
        for name, s in sorted(self.groups.items()):
            lines.append(
                f"{name:<34} {s.cases:>5} {s.failed_cases:>4} {s.outputs:>7} {worst(s.max_abs, 'ours vs ORT'):>9} "
                f"{worst(s.max_abs, 'ours vs numpy'):>9} {worst(s.max_abs, 'ORT vs numpy'):>9} "
                f"{worst(s.max_ratio, ''):>8}"
            )
        total = sum(s.cases for s in self.groups.values())
        lines.append(f"{total} parity cases; columns are the worst absolute errors, err/tol the worst error over "
                     f"its allowed tolerance (<= 1 passes)")
        return lines


_PARITY_LOG = ParityLog()


@pytest.fixture(scope="session")
def parity_log() -> ParityLog:
    return _PARITY_LOG


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not _PARITY_LOG.groups:
        return
    SUMMARY_PATH.parent.mkdir(parents=True, exist_ok=True)
    SUMMARY_PATH.write_text(json.dumps(_PARITY_LOG.to_json(), indent=2) + "\n")
    terminalreporter.section("MatMulNBits parity summary")
    for line in _PARITY_LOG.table():
        terminalreporter.write_line(line)
    terminalreporter.write_line(f"written to {SUMMARY_PATH}")
