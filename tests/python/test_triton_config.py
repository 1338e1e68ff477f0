"""examples/triton: the model configuration checked against Triton's own schema (model_config.proto, as generated
in the pinned tritonclient package) and against our install layout. The loading itself, what Triton's onnxruntime
backend does with `op_library_filename` (the v1 C call OrtApi::RegisterCustomOpsLibrary per model instance), is
tests/cpp/test_load.cpp's "Triton-style loading" check; a Triton server itself cannot be fetched here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REPO = ROOT / "examples" / "triton" / "model_repository"


def triton_model_config():
    spec = importlib.util.find_spec("tritonclient")
    assert spec is not None and spec.submodule_search_locations, (
        "tritonclient is not installed (scripts/setup.sh installs it from tests/python/requirements-nodeps.txt)")
    path = Path(next(iter(spec.submodule_search_locations))) / "grpc" / "model_config_pb2.py"
    # By path: tritonclient.grpc's __init__ imports grpc, which is not installed (nor needed for the schema).
    mod_spec = importlib.util.spec_from_file_location("triton_model_config_pb2", path)
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def configs():
    from google.protobuf import text_format

    pb2 = triton_model_config()
    found = sorted(REPO.glob("*/config.pbtxt"))
    assert found, f"no model configurations under {REPO}"
    return [(p, text_format.Parse(p.read_text(encoding="utf-8"), pb2.ModelConfig()), pb2) for p in found]


def test_configs_parse_with_tritons_schema_and_name_their_directory(configs):
    for path, cfg, _ in configs:
        assert cfg.name == path.parent.name, f"{path}: name {cfg.name!r}, Triton wants the directory name"
        assert cfg.backend == "onnxruntime", f"{path}: backend {cfg.backend!r}"
        assert (path.parent / "1").is_dir(), f"{path}: no version directory 1/"


def test_configs_load_the_installed_library_on_cpu(configs):
    install = (ROOT / "scripts" / "install.sh").read_text(encoding="utf-8")
    assert "lib/libnibble_ort.so" in install.replace('"', "").replace("$prefix/", ""), \
        "scripts/install.sh no longer installs lib/libnibble_ort.so: update examples/triton"
    for path, cfg, pb2 in configs:
        libs = list(cfg.model_operations.op_library_filename)
        assert libs == ["/opt/nibble/lib/libnibble_ort.so"], (
            f"{path}: op_library_filename {libs}; the README installs with scripts/install.sh --prefix /opt/nibble")
        kinds = {g.kind for g in cfg.instance_group}
        assert kinds == {pb2.ModelInstanceGroup.KIND_CPU}, f"{path}: instance kinds {kinds}"


def test_schema_check_can_fail():
    """A misspelt field is an error under the same parser (the check above is not vacuous)."""
    from google.protobuf import text_format

    pb2 = triton_model_config()
    with pytest.raises(text_format.ParseError, match="op_library_filenames"):
        text_format.Parse('model_operations { op_library_filenames: "x.so" }', pb2.ModelConfig())
