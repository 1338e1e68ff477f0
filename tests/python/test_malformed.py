"""Malformed MatMulNBits models must fail with an ORT error that names the problem, never crash the process.

Each case breaks one thing in an otherwise valid model (N=24, K=93, block_size=32, bits=4, uint8 zero points:
k_blocks=3, blob_size=16, 2 zero-point bytes per row). The error may come at session creation or at the first
Run(); its text must contain the node's name (every node gets a distinctive one), the offending attribute or
input, and the bad value. The library words its errors as `nibble [MatMulNBits] node '<name>': <what> <value> ...`.
After each case a good model runs in the same process, so a library that leaves state broken fails too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

import build_matmulnbits as bm

# Every exception type ORT's Python binding raises (Fail, InvalidArgument, InvalidGraph, RuntimeException...).
ORT_ERRORS = tuple(v for v in vars(ort_state).values() if isinstance(v, type) and issubclass(v, Exception))

N, K, BLOCK_SIZE, BITS = 24, 93, 32, 4
K_BLOCKS = bm.k_blocks(K, BLOCK_SIZE)  # 3
BLOB = bm.blob_size(BLOCK_SIZE, BITS)  # 16
ZP_BYTES = bm.zp_row_bytes(K_BLOCKS, BITS)  # 2

_rng = np.random.default_rng(2024)
GOOD = bm.quantize(_rng.normal(0, 0.25, (N, K)), BITS, BLOCK_SIZE, symmetric=False, zp_kind="uint8", rng=_rng)
GOOD_FLOAT_ZP = bm.quantize(_rng.normal(0, 0.25, (N, K)), BITS, BLOCK_SIZE, symmetric=False, zp_kind="float",
                            rng=_rng)
B, SCALES, ZERO_POINTS = GOOD
A = _rng.normal(0, 0.25, (2, K)).astype(np.float32)


def dims(*values: int) -> str:
    """Regex for a shape however it is printed: [24, 3, 17], (24,3,17), {24 x 3 x 17}..."""
    return r"\D{1,3}".join(str(v) for v in values)


def word(name: str) -> str:
    """Regex for an attribute or input name as a whole word (K must not match inside 'block_size')."""
    return rf"(?<![A-Za-z_]){re.escape(name)}(?![A-Za-z_])"


@dataclass(frozen=True)
class Malformed:
    id: str  # also the node name, after a prefix
    changes: dict[str, Any]  # make_model keyword overrides
    expect: tuple[str, ...]  # regexes the error text must match (besides the node name)
    a: np.ndarray = field(default_factory=lambda: A)


def model_kwargs(**changes) -> dict[str, Any]:
    """make_model arguments for the valid base model, with `changes` applied; onnx.checker is off."""
    kwargs = dict(K=K, N=N, bits=BITS, block_size=BLOCK_SIZE, accuracy_level=4, dtype="float32",
                  B=B, scales=SCALES, zp=ZERO_POINTS, a_shape=["M", "K_in"], check=False)
    kwargs.update(changes)
    return kwargs


# A wrong element type must be named readably (not as ONNX's enum number).
TYPE_NAME = {"int8": r"(?i)(?<![u])int8|\bi8\b", "double": r"(?i)double|float64|\bf64\b"}


def _with(values: np.ndarray, at: tuple[int, int], bad: float) -> np.ndarray:
    out = values.copy()
    out[at] = bad
    return out


def _oob_g_idx(bad_value: int) -> np.ndarray:
    g_idx = (np.arange(K) // BLOCK_SIZE).astype(np.int32)
    g_idx[K // 2] = bad_value
    return g_idx


MALFORMED = [
    # Attributes.
    Malformed("bits_3", dict(attrs={"bits": 3}), (word("bits"), r"\b3\b")),
    Malformed("block_size_24", dict(attrs={"block_size": 24}), (word("block_size"), r"\b24\b")),
    Malformed("block_size_8", dict(attrs={"block_size": 8}), (word("block_size"), r"\b8\b")),
    Malformed("missing_K", dict(attrs={"K": None}), (word("K"),)),
    Malformed("missing_N", dict(attrs={"N": None}), (word("N"),)),
    Malformed("N_zero", dict(attrs={"N": 0}), (word("N"), r"\b0\b")),
    Malformed("K_negative", dict(attrs={"K": -93}), (word("K"), r"-93\b")),
    Malformed("accuracy_level_9", dict(accuracy_level=9), (word("accuracy_level"), r"\b9\b")),
    Malformed("accuracy_level_minus_1", dict(accuracy_level=-1), (word("accuracy_level"), r"-1\b")),
    Malformed("weight_prepacked_1", dict(attrs={"weight_prepacked": 1}), (word("weight_prepacked"), r"\b1\b")),
    # An attribute of the wrong type is not "missing", nor silently replaced by its default.
    Malformed("bits_float", dict(attrs={"bits": 8.0}), (word("bits"), r"\bfloat\b", r"\b8\b")),
    Malformed("block_size_string", dict(attrs={"block_size": "32"}), (word("block_size"), r"\bstring\b")),
    # Dimensions whose products would overflow or allocate beyond any machine: refused before allocating,
    # naming the value (K = N = 2^31 - 1 passes the attribute limit; B's required shape is then named exactly).
    Malformed("K_2_31", dict(attrs={"K": 2**31}), (word("K"), r"\b2147483648\b")),
    Malformed("N_2_40", dict(attrs={"N": 2**40}), (word("N"), r"\b1099511627776\b")),
    Malformed("K_N_2_31_minus_1", dict(attrs={"K": 2**31 - 1, "N": 2**31 - 1}),
              (word("B"), dims(2**31 - 1, 2**26, BLOB))),
    # K does not match A's last dimension (A's shape is dynamic, so only Run() can tell).
    Malformed("A_last_dim_94", {}, (word("K"), r"\b93\b", r"\b94\b"),
              a=np.zeros((2, K + 1), np.float32)),
    # B.
    Malformed("B_shape", dict(B=np.zeros((N, K_BLOCKS, BLOB + 1), np.uint8)),
              (word("B"), dims(N, K_BLOCKS, BLOB + 1))),
    Malformed("B_2d", dict(B=B.reshape(N, -1)), (word("B"), dims(N, K_BLOCKS * BLOB))),
    Malformed("B_int8", dict(B=B.view(np.int8)), (word("B"), TYPE_NAME["int8"])),
    Malformed("B_not_constant", dict(runtime_inputs=("B",)), (word("B"), r"constant|initializer")),
    # scales.
    Malformed("scales_length", dict(scales=np.ones((N, K_BLOCKS + 1), np.float32)),
              (word("scales"), dims(N, K_BLOCKS + 1))),
    Malformed("scales_float64", dict(scales=SCALES.astype(np.float64)), (word("scales"), TYPE_NAME["double"])),
    Malformed("scales_not_constant", dict(runtime_inputs=("scales",)), (word("scales"), r"constant|initializer")),
    # Scales no quantizer makes: NaN, infinite, subnormal (the element is named as [row, block]).
    Malformed("scales_nan", dict(scales=_with(SCALES, (5, 1), np.nan)), (word("scales"), dims(5, 1), r"\bNaN\b")),
    Malformed("scales_inf", dict(scales=_with(SCALES, (5, 1), -np.inf)), (word("scales"), dims(5, 1), r"-inf\b")),
    Malformed("scales_subnormal", dict(scales=_with(SCALES, (5, 1), 1e-40)),
              (word("scales"), dims(5, 1), r"subnormal")),
    # zero_points.
    Malformed("zp_uint8_shape", dict(zp=np.zeros((N, ZP_BYTES + 1), np.uint8)),
              (word("zero_points"), dims(N, ZP_BYTES + 1))),
    Malformed("zp_float_shape", dict(zp=np.zeros((N, K_BLOCKS + 2), np.float32)),
              (word("zero_points"), dims(N, K_BLOCKS + 2))),
    Malformed("zp_float64", dict(zp=GOOD_FLOAT_ZP.zero_points.astype(np.float64)),
              (word("zero_points"), TYPE_NAME["double"])),
    Malformed("zp_float_nan", dict(zp=_with(GOOD_FLOAT_ZP.zero_points, (3, 2), np.nan)),
              (word("zero_points"), dims(3, 2), r"\bNaN\b")),
    # g_idx (K = 93 and k_blocks · block_size = 96 are both valid lengths).
    Malformed("g_idx_length", dict(g_idx=np.zeros(K + 5, np.int32)), (word("g_idx"), rf"\b{K + 5}\b")),
    Malformed("g_idx_too_large", dict(g_idx=_oob_g_idx(K_BLOCKS)), (word("g_idx"), rf"\b{K_BLOCKS}\b")),
    Malformed("g_idx_negative", dict(g_idx=_oob_g_idx(-1)), (word("g_idx"), r"-1\b")),
    # bias.
    Malformed("bias_length", dict(bias=np.ones(N + 1, np.float32)), (word("bias"), rf"\b{N + 1}\b")),
    # A of rank 0.
    Malformed("A_rank_0", dict(a_shape=[]), (word("A"), r"rank|scalar|dimension"), a=np.array(1.0, np.float32)),
]

# A few in the com.microsoft domain, where our library overrides ORT's kernel.
COM_MICROSOFT = ("bits_3", "block_size_24", "B_shape", "accuracy_level_9", "g_idx_too_large", "weight_prepacked_1",
                 "scales_nan", "K_N_2_31_minus_1")
CASES = [("nibble", m) for m in MALFORMED] + [("com.microsoft", m) for m in MALFORMED if m.id in COM_MICROSOFT]


def run_model(session_factory, model, a: np.ndarray, feeds: dict[str, np.ndarray]):
    return session_factory(model).run(None, {"A": a, **feeds})[0]


def assert_good_model_runs(nibble_session) -> None:
    """A valid model still works in this process, and gives the right answer."""
    model = bm.make_model("nibble", **model_kwargs(check=True, accuracy_level=1), node_name="good_after_bad")
    y = run_model(nibble_session, model, A, {})
    np.testing.assert_allclose(y, bm.reference(A, *GOOD, None, None, K, N, BITS, BLOCK_SIZE), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("domain, case", CASES, ids=[f"{d}-{m.id}" for d, m in CASES])
def test_malformed_model_is_rejected(nibble_session, domain: str, case: Malformed) -> None:
    node_name = f"bad_{case.id}_in_{domain.replace('.', '_')}"
    kwargs = model_kwargs(**case.changes)
    feeds = {slot: kwargs[{"zero_points": "zp"}.get(slot, slot)] for slot in kwargs.get("runtime_inputs", ())}
    model = bm.make_model(domain, node_name=node_name, **kwargs)

    with pytest.raises(ORT_ERRORS) as error:
        run_model(nibble_session, model, case.a, feeds)
    message = str(error.value)
    assert node_name in message, f"error does not name the node {node_name!r}: {message}"
    rest = message.replace(node_name, "<node>")  # node names spell the problem out: do not let them match
    for pattern in case.expect:
        assert re.search(pattern, rest), f"error does not match {pattern!r}: {message}"

    assert_good_model_runs(nibble_session)


def test_external_data_outside_the_model_folder_is_refused(nibble_lib, tmp_path) -> None:
    """An initializer whose external data points outside the model's folder ("../weights.bin") is refused when the
    model is loaded, naming the initializer and the path, before any kernel (ORT's own check: nibble never reads
    model files); the same data inside the folder loads and runs."""
    from conftest import session_options
    import onnx
    from onnx import TensorProto

    model = bm.make_model("com.microsoft", node_name="external_scales", **model_kwargs(check=True))
    (tmp_path / "model").mkdir()
    for where, location in (("outside", "../scales.bin"), ("inside", "scales.bin")):
        m = onnx.ModelProto()
        m.CopyFrom(model)
        init = next(i for i in m.graph.initializer if i.name == "scales")
        data = onnx.numpy_helper.to_array(init).tobytes()
        (tmp_path / "model" / location).resolve().write_bytes(data)
        init.ClearField("raw_data")
        init.ClearField("float_data")
        init.data_location = TensorProto.EXTERNAL
        for key, value in (("location", location), ("offset", "0"), ("length", str(len(data)))):
            entry = init.external_data.add()
            entry.key, entry.value = key, value
        path = tmp_path / "model" / f"{where}.onnx"
        onnx.save(m, str(path))
        so = session_options(library=nibble_lib)
        providers = None if getattr(so, "has_providers", lambda: False)() else ["CPUExecutionProvider"]
        if where == "outside":
            with pytest.raises(ORT_ERRORS) as error:
                ort_session = __import__("onnxruntime").InferenceSession(str(path), so, providers=providers)
                ort_session.run(None, {"A": A})
            message = str(error.value)
            assert "scales" in message and "../scales.bin" in message, message
        else:
            sess = __import__("onnxruntime").InferenceSession(str(path), so, providers=providers)
            y = sess.run(None, {"A": A})[0]
            np.testing.assert_allclose(y, bm.reference(A, *GOOD, None, None, K, N, BITS, BLOCK_SIZE), atol=0.1,
                                       rtol=0.02)
