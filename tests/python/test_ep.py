"""nibble as a plugin execution provider (ORT >= 1.24): what the EP frontend does beyond the custom-op one.

The parity, malformed-model and concurrency suites run through the EP too (scripts/test.sh runs them again with
NIBBLE_FRONTEND=ep, on ORT 1.31.1 and 1.24.4); this file checks the EP itself, with either NIBBLE_FRONTEND:
  - it lists one CPU device and claims MatMulNBits in both domains, computing exactly what the custom-op frontend
    computes (same kernels, same packed weights);
  - its provider options (and the custom-op frontend's session keys) choose the domains and the accuracy default,
    and a bad value fails session creation naming the key;
  - with prepacking it frees the weight initializers (ORT's behaviour, measured as resident memory in fresh
    processes by bench/bench_memory.py): less weight memory than ORT's built-in op and than the custom-op frontend;
    a second session of the same model shares the packed weights;
  - with session.disable_prepacking=1 it still runs (packing at kernel creation).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import nibble_ort
import numpy as np
import onnxruntime as ort
import pytest

import build_matmulnbits as bm
from conftest import ACCURACY_DEFAULT_KEY, ACT_QUANT_KEY, EP_NAME, OVERRIDE_KEY, REPO_ROOT, add_library, create_session, ep_devices
from test_parity import BEHAVIOUR_CASE, Case, assert_bitwise_equal, build_model, case_data, run_all

if tuple(int(x) for x in ort.__version__.split(".")[:2]) < (1, 24):
    pytest.skip(f"the execution provider needs ONNX Runtime >= 1.24 (this is {ort.__version__})",
                allow_module_level=True)


def session(model, lib: Path, how: str, config=None, provider_options=None) -> ort.InferenceSession:
    so = ort.SessionOptions()
    for k, v in (config or {}).items():
        so.add_session_config_entry(k, v)
    add_library(so, lib, how, provider_options)
    return create_session(model, so)


def test_one_cpu_device(nibble_lib: Path) -> None:
    devices = ep_devices(nibble_lib)
    assert len(devices) == 1
    d = devices[0]
    assert (d.ep_name, d.ep_vendor, d.device.type) == (EP_NAME, "nibble", ort.OrtHardwareDeviceType.CPU)


@pytest.mark.parametrize("domain", bm.DOMAINS)
@pytest.mark.parametrize("accuracy_level", (1, 4))
def test_ep_computes_what_the_custom_op_computes(nibble_lib: Path, ort_session, domain: str,
                                                 accuracy_level: int) -> None:
    """Both frontends run the same kernel on the same packed weights: bitwise equal outputs. At accuracy_level 4
    ORT's own kernel differs from ours (other int8 rounding), so equality also shows the EP did not leave the node
    to ORT."""
    case = Case("behaviour", N=288, K=1234, block_size=32, zp="uint8", accuracy_level=accuracy_level)
    inputs = case_data(case.weight_key).inputs
    model = build_model(case, domain)
    ep = session(model, nibble_lib, "ep")
    assert ep.get_providers()[0] == EP_NAME
    ep_out = run_all(ep, inputs)
    assert_bitwise_equal(ep_out, run_all(session(model, nibble_lib, "custom-op"), inputs), "EP vs custom-op")
    if accuracy_level == 4 and domain == "com.microsoft":
        ort_out = run_all(ort_session(model), inputs)
        assert any(not np.array_equal(a, b) for a, b in zip(ep_out, ort_out)), "EP output is ORT's own"


def test_provider_option_override_off(nibble_lib: Path, ort_session) -> None:
    """override_com_microsoft=0 as a provider option: com.microsoft nodes stay on ORT's kernel (bitwise ORT's
    output), the nibble domain still runs on the EP."""
    inputs = case_data(BEHAVIOUR_CASE.weight_key).inputs
    ms = build_model(BEHAVIOUR_CASE, "com.microsoft")
    off = {"override_com_microsoft": "0"}
    assert_bitwise_equal(run_all(session(ms, nibble_lib, "ep", provider_options=off), inputs),
                         run_all(ort_session(ms), inputs), "override off vs ORT built-in")
    nib = build_model(BEHAVIOUR_CASE, "nibble")
    assert_bitwise_equal(run_all(session(nib, nibble_lib, "ep", provider_options=off), inputs),
                         run_all(session(nib, nibble_lib, "custom-op"), inputs), "nibble domain, override off")


@pytest.mark.parametrize("how", ("provider option", "session key"))
def test_accuracy_default_setting(nibble_lib: Path, how: str) -> None:
    """accuracy_level_default=1 (provider option, or the custom-op frontend's session key) puts unset levels on
    the fp32 path: bitwise the custom-op frontend's accuracy_level=1 output."""
    inputs = case_data(BEHAVIOUR_CASE.weight_key).inputs
    unset = build_model(BEHAVIOUR_CASE, "nibble", accuracy_level=0)
    if how == "provider option":
        s = session(unset, nibble_lib, "ep", provider_options={"accuracy_level_default": "1"})
    else:
        s = session(unset, nibble_lib, "ep", config={ACCURACY_DEFAULT_KEY: "1"})
    acc1 = session(build_model(BEHAVIOUR_CASE, "nibble", accuracy_level=1), nibble_lib, "custom-op")
    assert_bitwise_equal(run_all(s, inputs), run_all(acc1, inputs), f"default 1 via {how}")


@pytest.mark.parametrize("options, config, words", [
    ({"accuracy_level_default": "9"}, {}, ["accuracy_level_default", '"9"']),
    ({"override_com_microsoft": "maybe"}, {}, ["override_com_microsoft", "maybe"]),
    ({}, {OVERRIDE_KEY: "2"}, [OVERRIDE_KEY, '"2"']),
    ({"activation_quant": "per_row"}, {}, ["activation_quant", '"per_row"', '"block"', '"row"']),
])
def test_bad_setting_fails_session_creation_naming_it(nibble_lib: Path, options, config, words) -> None:
    model = build_model(BEHAVIOUR_CASE, "nibble")
    with pytest.raises(Exception) as err:
        session(model, nibble_lib, "ep", config=config, provider_options=options)
    for w in words:
        assert w in str(err.value), str(err.value)


@pytest.mark.parametrize("how", ("provider option", "session key"))
def test_activation_quant_row_setting(nibble_lib: Path, how: str) -> None:
    """activation_quant=row (provider option, or the session key) runs the int8 path in the row numerics:
    bitwise the custom-op frontend's row output, and not the default (block) output."""
    inputs = case_data(BEHAVIOUR_CASE.weight_key).inputs
    model = build_model(BEHAVIOUR_CASE, "com.microsoft")
    if how == "provider option":
        s = session(model, nibble_lib, "ep", provider_options={"activation_quant": "row"})
    else:
        s = session(model, nibble_lib, "ep", config={ACT_QUANT_KEY: "row"})
    row = run_all(s, inputs)
    custom_row = session(model, nibble_lib, "custom-op", config={ACT_QUANT_KEY: "row"})
    assert_bitwise_equal(row, run_all(custom_row, inputs), f"row via {how} vs custom-op row")
    block = run_all(session(model, nibble_lib, "ep"), inputs)
    assert any(not np.array_equal(a, b) for a, b in zip(row, block)), "row numerics gave the block output"


def test_disable_prepacking_packs_at_creation(nibble_lib: Path) -> None:
    """session.disable_prepacking=1: ORT never calls PrePackWeight; the EP packs at kernel creation instead."""
    inputs = case_data(BEHAVIOUR_CASE.weight_key).inputs
    model = build_model(BEHAVIOUR_CASE, "com.microsoft")
    s = session(model, nibble_lib, "ep", config={"session.disable_prepacking": "1"})
    assert_bitwise_equal(run_all(s, inputs), run_all(session(model, nibble_lib, "custom-op"), inputs),
                         "EP without prepacking vs custom-op")


def _bench_memory():
    spec = importlib.util.spec_from_file_location("bench_memory", REPO_ROOT / "bench" / "bench_memory.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_memory"] = mod
    spec.loader.exec_module(mod)
    return mod


def packed_bytes_4bit(k: int, n: int, block_size: int) -> int:
    """Bytes nibble packs one 4-bit node with uint8 zero points into, on this CPU: the codes, and per column and
    block the scale (f16 or f32, as the int8 family selected here stores them: `_sf16_` / `_sf32_` in its name) and
    the 4-byte zero-point correction."""
    row = next(r for r in nibble_ort.info()["selection"]
               if r["path"] == "int8" and r["bits"] == 4 and r["block_size"] == block_size)
    family = row["family"]
    scale_bytes = 2 if "_sf16_" in family else 4 if "_sf32_" in family else None
    assert scale_bytes, f"cannot tell the scale type of family {family!r}"
    return k * n // 2 + n * (k // block_size) * (scale_bytes + 4)


def test_weights_are_freed_and_shared(nibble_lib: Path, tmp_path: Path) -> None:
    """8 MatMulNBits nodes, 4096x4096 bs32 4-bit (64 MiB of B; 88 MiB packed with f16 scales, 96 with f32), each measured in a fresh process:
    ORT frees the initializers the EP took over, so its weight memory stays below ORT's built-in op's and well
    below the custom-op frontend's (which keeps them); a second session of the model shares the packed weights."""
    bench = _bench_memory()
    model = tmp_path / "memory.onnx"
    bench.make_synthetic(model, nodes=8, k=4096, n=4096, block_size=32)
    m = {mode: bench.measure(model, mode, nibble_lib) for mode in bench.MODES}
    weights = {mode: r["after_run"] - r["before"] for mode, r in m.items()}
    packed_mib = 8 * packed_bytes_4bit(k=4096, n=4096, block_size=32) / 2**20
    report = f"weight MiB {weights}, packed {packed_mib:.0f}; second session adds " \
             f"{ {k: round(r['second']) for k, r in m.items()} }"
    assert weights["ep"] < weights["ort"], report
    assert weights["ep"] < 0.75 * weights["custom-op"], report
    # Beyond the packed weights: ORT's session (~10-15 MiB here, thread pools and arenas, also in the built-in
    # op's figure) and allocator slack from the transient per-node copies.
    assert weights["ep"] < 1.2 * packed_mib + 16, report
    assert m["ep"]["second"] < 0.05 * packed_mib + 2, report
