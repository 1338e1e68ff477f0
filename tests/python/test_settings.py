"""Settings mistakes on the custom-op frontend get messages naming nibble instead of ORT's bare errors or silence:
registering the library twice on one SessionOptions, an unknown nibble.* (or custom_op.MatMulNBits.*) key, and a
nibble key set after the library was registered (ORT >= 1.23 / 1.24 have the config-listing calls these need).

The execution-provider frontend takes its settings as provider options at session creation, so none of this can
happen there; these tests load the library as a custom-op library whatever NIBBLE_FRONTEND says."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from conftest import REPO_ROOT

MINOR = int(ort.__version__.split(".")[1])


def fixture_model() -> Path:
    """A com.microsoft MatMulNBits model from tests/fixtures/make_fixtures.py, and its input shape."""
    root = Path(os.environ.get("NIBBLE_FIXTURES", REPO_ROOT / "target" / "fixtures"))
    for line in (root / "manifest.txt").read_text().splitlines():
        rec = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        if rec.get("kind") == "case" and rec.get("name") == "acc4_zp_k256_n64_bs32":
            return root / rec["com"]
    pytest.fail(f"no acc4_zp_k256_n64_bs32 case in {root}/manifest.txt (run tests/fixtures/make_fixtures.py)")


def run(so: ort.SessionOptions) -> np.ndarray:
    sess = ort.InferenceSession(str(fixture_model()), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {"A": np.ones((1, 256), np.float32)})[0]


def test_registering_twice_names_nibble(nibble_lib: Path) -> None:
    so = ort.SessionOptions()
    so.register_custom_ops_library(str(nibble_lib))
    with pytest.raises(Exception, match=r"nibble \[MatMulNBits\] libnibble_ort.so is already registered"):
        so.register_custom_ops_library(str(nibble_lib))
    assert run(so).shape == (1, 64)  # the first registration still works


def test_a_fresh_options_object_registers_again(nibble_lib: Path) -> None:
    for _ in range(3):
        so = ort.SessionOptions()
        so.register_custom_ops_library(str(nibble_lib))
        assert run(so).shape == (1, 64)


@pytest.mark.skipif(MINOR < 23, reason="listing session config entries needs ORT >= 1.23")
@pytest.mark.parametrize("key", ["nibble.accuracy_level", "nibble.override", "custom_op.MatMulNBits.accuracy"])
def test_unknown_key_is_named(nibble_lib: Path, key: str) -> None:
    so = ort.SessionOptions()
    so.add_session_config_entry(key, "1")
    with pytest.raises(Exception, match=rf"session config {key} is not a nibble setting.*accuracy_level_default"):
        so.register_custom_ops_library(str(nibble_lib))


@pytest.mark.skipif(MINOR < 24, reason="reading the session config at kernel creation needs ORT >= 1.24")
@pytest.mark.parametrize(("key", "value"), [("nibble.accuracy_level_default", "1"),
                                            ("nibble.override_com_microsoft", "0"),
                                            ("nibble.activation_quant", "row"),
                                            ("custom_op.MatMulNBits.accuracy_level_default", "2")])
def test_key_set_after_registration_is_named(nibble_lib: Path, key: str, value: str) -> None:
    so = ort.SessionOptions()
    so.register_custom_ops_library(str(nibble_lib))
    so.add_session_config_entry(key, value)
    shown = key if key.startswith("nibble.") else "nibble.accuracy_level_default"
    with pytest.raises(Exception, match=rf"{shown}=\w+ was set after libnibble_ort.so was registered"):
        run(so)


@pytest.mark.parametrize("key", ["nibble.activation_quant", "custom_op.MatMulNBits.activation_quant"])
def test_bad_activation_quant_is_named(nibble_lib: Path, key: str) -> None:
    so = ort.SessionOptions()
    so.add_session_config_entry(key, "per_row")
    with pytest.raises(Exception, match=r'nibble.activation_quant="per_row" is invalid: use "block" .* or "row"'):
        so.register_custom_ops_library(str(nibble_lib))


def test_keys_set_before_registration_work(nibble_lib: Path) -> None:
    so = ort.SessionOptions()
    so.add_session_config_entry("nibble.accuracy_level_default", "1")
    so.register_custom_ops_library(str(nibble_lib))
    assert run(so).shape == (1, 64)


def test_activation_quant_row_changes_the_int8_numerics(nibble_lib: Path) -> None:
    """nibble.activation_quant=row (or C++ CustomOpConfigs' spelling) quantizes A per row: a different int8
    result from the default per-block one, the same for both spellings."""
    a = np.random.default_rng(5).normal(0, 0.25, size=(3, 256)).astype(np.float32)

    def out(config: dict[str, str]) -> np.ndarray:
        so = ort.SessionOptions()
        for k, v in config.items():
            so.add_session_config_entry(k, v)
        so.register_custom_ops_library(str(nibble_lib))
        sess = ort.InferenceSession(str(fixture_model()), so, providers=["CPUExecutionProvider"])
        return sess.run(None, {"A": a})[0]

    block, row = out({}), out({"nibble.activation_quant": "row"})
    assert np.array_equal(row, out({"custom_op.MatMulNBits.activation_quant": "row"}))
    assert np.array_equal(block, out({"nibble.activation_quant": "block"}))
    assert not np.array_equal(block, row)
    assert np.abs(block - row).max() < 0.05 * np.abs(block).max()
