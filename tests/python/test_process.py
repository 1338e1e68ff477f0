"""Process-level behaviour: the INFO log line each node writes, and the NIBBLE_ISA / NIBBLE_FAMILIES overrides.

Both need a fresh process: ORT writes its log to the process's stderr from C++, and the kernel ladder is chosen
once per process. Each test runs a small script in a subprocess with the venv's interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import REPO_ROOT

# Builds a 4-bit model (K=93, N=5, block 32, uint8 zero points) named 'probe_node', runs it with our library at
# INFO severity, and prints OK with the output's shape.
SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np, onnxruntime as ort
    sys.path.insert(0, {models!r})
    import build_matmulnbits as bm
    rng = np.random.default_rng(0)
    B, scales, zp = bm.quantize(rng.normal(0, 0.25, (5, 93)), 4, 32, symmetric=False, zp_kind="uint8", rng=rng)
    model = bm.make_model("nibble", K=93, N=5, bits=4, block_size=32, accuracy_level={acc}, dtype="float32",
                          B=B, scales=scales, zp=zp, node_name="probe_node")
    so = ort.SessionOptions()
    so.log_severity_level = 1
    for key, value in {config!r}.items():
        so.add_session_config_entry(key, value)
    so.register_custom_ops_library({lib!r})
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    y = sess.run(None, {{"A": rng.normal(size=(3, 93)).astype(np.float32)}})[0]
    print("OK", y.shape)
    """
)


def run_probe(nibble_lib: Path, acc: int, env: dict[str, str] | None = None,
              config: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    script = SCRIPT.format(models=str(REPO_ROOT / "models"), acc=acc, lib=str(nibble_lib), config=config or {})
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize("acc, path, kernel", [(4, "int8", "matmul_f32_qsi8db_"), (1, "fp32", "matmul_f32_f32_")])
def test_each_node_logs_one_info_line(nibble_lib: Path, acc: int, path: str, kernel: str) -> None:
    r = run_probe(nibble_lib, acc)
    assert r.returncode == 0 and "OK (3, 5)" in r.stdout, r.stderr[-2000:]
    lines = [line for line in r.stderr.splitlines() if "[MatMulNBits] node 'probe_node'" in line]
    assert len(lines) == 1, r.stderr[-2000:]
    line = lines[0]
    assert "[I:onnxruntime" in line, f"not at INFO severity: {line}"
    # The message itself starts with the library's name, so nobody takes it for ORT's own kernel.
    assert "] nibble [MatMulNBits] node 'probe_node'" in line, line
    for part in ("K=93", "N=5", "bits=4", "block_size=32", f"{path} path", kernel, "zero_points=uint8",
                 "family ", f"_{path}_qunbp", "GEMV ", "GEMM ", "layout q"):
        assert part in line, f"{part!r} missing from the log line: {line}"


def probe_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 0 and "OK (3, 5)" in r.stdout, r.stderr[-2000:]
    return next(line for line in r.stderr.splitlines() if "node 'probe_node'" in line)


@pytest.mark.parametrize("key", ["nibble.accuracy_level_default", "custom_op.MatMulNBits.accuracy_level_default"])
def test_accuracy_default_config_both_spellings(nibble_lib: Path, key: str) -> None:
    """The session config key, or the key C++'s RegisterCustomOpsLibrary(path, CustomOpConfigs) writes."""
    assert "accuracy_level=0 -> int8 path" in probe_line(run_probe(nibble_lib, 0))
    assert "accuracy_level=0 -> fp32 path" in probe_line(run_probe(nibble_lib, 0, config={key: "1"}))


def test_bad_config_value_is_refused_at_registration(nibble_lib: Path) -> None:
    r = run_probe(nibble_lib, 0, config={"nibble.accuracy_level_default": "7"})
    assert r.returncode != 0
    assert "nibble.accuracy_level_default" in r.stderr and '"7"' in r.stderr, r.stderr[-2000:]


def test_nibble_isa_portable_is_honoured(nibble_lib: Path) -> None:
    r = run_probe(nibble_lib, 4, env={"NIBBLE_ISA": "portable"})
    assert r.returncode == 0 and "OK (3, 5)" in r.stdout, r.stderr[-2000:]
    line = next(line for line in r.stderr.splitlines() if "node 'probe_node'" in line)
    assert "_portable (M<=" in line and "_portable (M>" in line, line


@pytest.mark.parametrize("value, words", [("bogus", ["NIBBLE_ISA=bogus", "not a known rung"]),
                                          ("sme" if os.uname().machine == "x86_64" else "avx2",
                                           ["does not support"])])
def test_bad_nibble_isa_is_a_clear_session_error(nibble_lib: Path, value: str, words: list[str]) -> None:
    r = run_probe(nibble_lib, 4, env={"NIBBLE_ISA": value})
    assert r.returncode != 0, r.stdout
    assert "[MatMulNBits] node 'probe_node'" in r.stderr, r.stderr[-2000:]
    for w in words:
        assert w in r.stderr, f"{w!r} not in: {r.stderr[-2000:]}"


def test_nibble_families_selects_the_named_family(nibble_lib: Path) -> None:
    """The second int8 family (signed kr=8 codes, f16 scales, u8 GEMV, interleaved GEMM) through the provider."""
    r = run_probe(nibble_lib, 4, env={"NIBBLE_FAMILIES": "portable_int8_qsnbp8x8_sf16_zpc_bsum"})
    line = probe_line(r)
    for part in ("family portable_int8_qsnbp8x8_sf16_zpc_bsum", "GEMV matmul_f32_qsu8db_qnb_portable (M<=3)",
                 "GEMM matmul_f32_qsi8dbp4x8_qnb_portable (M>3)", "layout qsnbp8x8_sf16_zpc_bsum"):
        assert part in line, f"{part!r} missing from the log line: {line}"


@pytest.mark.parametrize("families, words", [("nope", ["NIBBLE_FAMILIES", "unknown family nope"]),
                                             ("portable_int8_qsnbp8x8_sf16_zpc_bsum", ["no kernel family", "int8 family"])])
def test_bad_nibble_families_is_a_clear_session_error(nibble_lib: Path, families: str, words: list[str]) -> None:
    # The second case asks for an fp32 node (accuracy_level 1) with only an int8 family allowed.
    r = run_probe(nibble_lib, 1, env={"NIBBLE_FAMILIES": families})
    assert r.returncode != 0, r.stdout
    assert "[MatMulNBits] node 'probe_node'" in r.stderr, r.stderr[-2000:]
    for w in words:
        assert w in r.stderr, f"{w!r} not in: {r.stderr[-2000:]}"


# A reaches MatMulNBits through a Reshape to a computed shape, so its leading dims are unknown and unnamed; a Concat of the output with
# a graph input then feeds a graph output. ORT stores any unnamed dim our shape inference returns as a fixed value,
# so an unknown dim must come back symbolic, not as a concrete -1 that ORT warns about on every run.
UNNAMED_DIMS_SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np, onnx, onnxruntime as ort
    from onnx import helper, TensorProto
    sys.path.insert(0, {models!r})
    import build_matmulnbits as bm
    rng = np.random.default_rng(0)
    B, scales, _ = bm.quantize(rng.normal(0, 0.25, (5, 64)), 4, 32)
    inits = [onnx.numpy_helper.from_array(B, "B"), onnx.numpy_helper.from_array(scales, "scales"),
             ]
    nodes = [helper.make_node("Shape", ["X"], ["shape"]), helper.make_node("Reshape", ["X", "shape"], ["A"]),
             helper.make_node("MatMulNBits", ["A", "B", "scales"], ["Y"], domain="com.microsoft",
                              K=64, N=5, bits=4, block_size=32, accuracy_level=4, name="mm"),
             helper.make_node("Concat", ["P", "Y"], ["Z"], axis=1)]
    graph = helper.make_graph(nodes, "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["b", "s", 64]),
         helper.make_tensor_value_info("P", TensorProto.FLOAT, ["b", "p", 5])],
        [helper.make_tensor_value_info("Z", TensorProto.FLOAT, ["b", "t", 5])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    so = ort.SessionOptions()
    so.log_severity_level = 2
    so.register_custom_ops_library({lib!r})
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    for s in (1, 3):
        z = sess.run(None, {{"X": rng.normal(size=(2, s, 64)).astype(np.float32),
                            "P": np.zeros((2, 4, 5), np.float32)}})[0]
    print("OK", z.shape)
    """
)


def test_unknown_unnamed_dims_stay_symbolic(nibble_lib: Path) -> None:
    if ort_version() < (1, 24):
        pytest.skip("nibble registers shape inference only on ORT >= 1.24")
    script = UNNAMED_DIMS_SCRIPT.format(models=str(REPO_ROOT / "models"), lib=str(nibble_lib))
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "OK (2, 7, 5)" in r.stdout, r.stderr[-2000:]
    assert "Expected shape from model" not in r.stderr, r.stderr[-2000:]


def ort_version() -> tuple[int, ...]:
    import onnxruntime

    return tuple(int(p) for p in onnxruntime.__version__.split(".")[:2])
