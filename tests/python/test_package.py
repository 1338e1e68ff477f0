"""The Python package nibble_ort as a user installs it (`pip install .` or a wheel): where its files are, its helpers
(settings as keyword arguments, checked), info() / `python -m nibble_ort` / `nibble-info`, and that what the helpers
register computes what registering the library by hand computes.

scripts/test.sh runs this file in .venv (after `pip install .`) and in a fresh venv holding only the x86_64 wheel
and the test requirements (tests/python/test-wheel.sh); the aarch64 wheel is what the aarch64 parity tests load
under qemu (scripts/aarch64/python-aarch64.sh)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import onnxruntime as ort
import pytest

import nibble_ort
from conftest import ACCURACY_DEFAULT_KEY, ACT_QUANT_KEY, EP_NAME, OVERRIDE_KEY, REPO_ROOT, create_session, ep_devices
from test_parity import BEHAVIOUR_CASE, Case, assert_bitwise_equal, build_model, case_data, run_all

ORT_MINOR = int(ort.__version__.split(".")[1])


def test_the_installed_package_is_tested_with_its_own_files() -> None:
    package = Path(nibble_ort.__file__).resolve().parent
    assert REPO_ROOT / "python" not in package.parents, (
        f"nibble_ort imported from {package}, not from an installed package (pip install . / the wheel)")
    lib = Path(nibble_ort.get_library_path()).resolve()
    assert lib == package / "libnibble_ort.so" and lib.is_file()
    assert (Path(nibble_ort.get_include_path()) / "nibble_ort.h").is_file()
    if not os.environ.get("NIBBLE_LIB"):
        from conftest import library_path
        assert library_path().resolve() == lib, "the other Python tests must load this package's library"


def test_info_reports_this_cpu_and_a_family_per_shape() -> None:
    info = nibble_ort.info()
    assert info["version"] == nibble_ort.__version__
    assert info["arch"] == platform.machine()
    assert info["ort"]["custom_op_min"] == "1.17" and info["ort"]["ep_min"] == "1.24"
    ladder = [f["family"] for f in info["ladder"]]
    assert ladder and ladder[-1].startswith("portable_"), ladder
    assert len(info["selection"]) == 30
    for row in info["selection"]:
        assert row["family"] in ladder and row["error"] is None, row
    text = nibble_ort.info_text()
    assert f"nibble {info['version']} ({info['arch']})" in text and "kernel families this CPU can run" in text


def test_python_m_nibble_ort_prints_info(capsys) -> None:
    from nibble_ort.__main__ import main

    assert main(["--json"]) == 0
    assert json.loads(capsys.readouterr().out) == nibble_ort.info()
    assert main([]) == 0
    assert capsys.readouterr().out == nibble_ort.info_text() + f"library: {nibble_ort.get_library_path()}\n"
    assert main(["--library-path"]) == 0 and capsys.readouterr().out.strip() == nibble_ort.get_library_path()
    assert main(["--include-path"]) == 0 and capsys.readouterr().out.strip() == nibble_ort.get_include_path()


# qemu-user cannot start a guest binary from inside the guest (no binfmt_misc here): python-aarch64.sh says so.
@pytest.mark.skipif(os.environ.get("NIBBLE_UNDER_QEMU_USER") == "1", reason="no subprocesses under qemu-user")
def test_nibble_info_script_and_nibble_isa_in_a_new_process() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("NIBBLE_ISA", "NIBBLE_FAMILIES")}
    as_json = subprocess.run([sys.executable, "-m", "nibble_ort", "--json"], env=env, check=True,
                             capture_output=True, text=True).stdout
    assert json.loads(as_json) == nibble_ort.info()
    if sys.prefix != sys.base_prefix:  # a venv (pip install --target installs no scripts next to the interpreter)
        script = Path(sys.executable).parent / "nibble-info"
        assert script.is_file(), f"the package's nibble-info script is not in {script.parent}"
        text = subprocess.run([str(script)], env=env, check=True, capture_output=True, text=True).stdout
        assert text.startswith(nibble_ort.info_text()) and f"library: {nibble_ort.get_library_path()}" in text
    capped = subprocess.run([sys.executable, "-m", "nibble_ort", "--json"], check=True, capture_output=True,
                            text=True, env={**env, "NIBBLE_ISA": "portable"}).stdout
    assert all(f["family"].startswith("portable_") for f in json.loads(capped)["ladder"])


def unset_accuracy_model():
    """A com.microsoft model whose node has accuracy_level 0 (unset: the accuracy default decides), and its inputs."""
    case = Case("behaviour", N=288, K=1234, block_size=32, zp="uint8", accuracy_level=0)
    return build_model(case, "com.microsoft"), case_data(case.weight_key).inputs


def by_hand(model, config=None):
    so = ort.SessionOptions()
    for k, v in (config or {}).items():
        so.add_session_config_entry(k, v)
    so.register_custom_ops_library(nibble_ort.get_library_path())
    return create_session(model, so)


@pytest.mark.parametrize("settings, config", [
    ({}, {}),
    ({"accuracy_level_default": 1}, {ACCURACY_DEFAULT_KEY: "1"}),
    ({"accuracy_level_default": 4, "override_com_microsoft": True}, {}),
    ({"activation_quant": "row"}, {ACT_QUANT_KEY: "row"}),
])
def test_register_custom_ops_computes_what_registering_by_hand_does(settings, config) -> None:
    model, inputs = unset_accuracy_model()
    so = ort.SessionOptions()
    assert nibble_ort.register_custom_ops(so, **settings) is so
    assert_bitwise_equal(run_all(create_session(model, so), inputs), run_all(by_hand(model, config), inputs),
                         f"register_custom_ops({settings})")


def test_override_off_leaves_com_microsoft_to_ort(ort_session) -> None:
    inputs = case_data(BEHAVIOUR_CASE.weight_key).inputs
    ms, nib = build_model(BEHAVIOUR_CASE, "com.microsoft"), build_model(BEHAVIOUR_CASE, "nibble")
    so = nibble_ort.register_custom_ops(ort.SessionOptions(), override_com_microsoft=False)
    assert_bitwise_equal(run_all(create_session(ms, so), inputs), run_all(ort_session(ms), inputs), "ORT's kernel")
    so = nibble_ort.register_custom_ops(ort.SessionOptions(), override_com_microsoft=False)
    assert_bitwise_equal(run_all(create_session(nib, so), inputs), run_all(by_hand(nib), inputs), "nibble domain")


@pytest.mark.parametrize("settings, error, words", [
    ({"accuracy_level": 1}, TypeError, "unknown setting 'accuracy_level'"),
    ({"override": False}, TypeError, "override_com_microsoft"),
    ({"override_com_microsoft": "0"}, TypeError, "True or False"),
    ({"accuracy_level_default": 7}, ValueError, "1, 2, 3 (fp32 path) or 4"),
    ({"accuracy_level_default": "4"}, ValueError, "accuracy_level_default must be"),
    ({"activation_quant": "per_row"}, ValueError, "activation_quant must be 'block' or 'row'"),
])
def test_bad_settings_are_named_before_anything_is_registered(settings, error, words) -> None:
    so = ort.SessionOptions()
    for helper in (nibble_ort.register_custom_ops, nibble_ort.add_execution_provider):
        with pytest.raises(error) as e:
            helper(so, **settings)
        assert words in str(e.value) and "nibble_ort" in str(e.value)
    nibble_ort.register_custom_ops(so)  # nothing was registered or set by the failed calls


def test_registering_twice_is_an_error_naming_nibble() -> None:
    so = nibble_ort.register_custom_ops(ort.SessionOptions())
    with pytest.raises(Exception, match=r"nibble \[MatMulNBits\] libnibble_ort.so is already registered"):
        nibble_ort.register_custom_ops(so)


@pytest.mark.skipif(ORT_MINOR < 24, reason=f"the execution provider needs ORT >= 1.24 (this is {ort.__version__})")
@pytest.mark.parametrize("settings, provider_options", [
    ({}, {}),
    ({"accuracy_level_default": 1, "override_com_microsoft": True}, {"accuracy_level_default": "1"}),
    ({"activation_quant": "row"}, {"activation_quant": "row"}),
])
def test_add_execution_provider_computes_what_the_ep_computes_by_hand(settings, provider_options) -> None:
    model, inputs = unset_accuracy_model()
    so = ort.SessionOptions()
    assert nibble_ort.add_execution_provider(so, **settings) is so
    session = create_session(model, so)
    assert session.get_providers()[0] == EP_NAME
    manual = ort.SessionOptions()
    manual.add_provider_for_devices(ep_devices(Path(nibble_ort.get_library_path())), provider_options)
    assert_bitwise_equal(run_all(session, inputs), run_all(create_session(model, manual), inputs),
                         f"add_execution_provider({settings})")


def test_add_execution_provider_on_an_old_runtime_names_the_version(monkeypatch) -> None:
    monkeypatch.setattr(ort, "__version__", "1.23.2")
    with pytest.raises(RuntimeError, match=r"needs onnxruntime >= 1.24, this is 1.23.2; use nibble_ort.register_custom_ops"):
        nibble_ort.add_execution_provider(ort.SessionOptions())


def test_settings_table_names_the_librarys_keys() -> None:
    assert {k: v[0] for k, v in nibble_ort.SETTINGS.items()} == {
        "override_com_microsoft": OVERRIDE_KEY, "accuracy_level_default": ACCURACY_DEFAULT_KEY,
        "activation_quant": ACT_QUANT_KEY}
