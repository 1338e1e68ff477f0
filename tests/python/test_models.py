"""models/: the Llama graph builder, the GGUF layout fixes, the synthetic builder and the rewrite tool, on tiny
random models (the real SmolLM2 graph is checked in test_llama.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "models"))
import build_matmulnbits as mnb  # noqa: E402
import gguf_to_onnx  # noqa: E402
import llama_onnx  # noqa: E402
import rewrite_matmulnbits  # noqa: E402
import synthetic_llama  # noqa: E402

TINY = llama_onnx.LlamaConfig(name="tiny", num_layers=2, hidden_size=96, intermediate_size=160, num_heads=6,
                              num_kv_heads=2, head_dim=16, vocab_size=300, context_length=64, rope_theta=10000.0,
                              rms_norm_eps=1e-5, tied_embeddings=True)


def tiny_weights(cfg: llama_onnx.LlamaConfig = TINY, seed: int = 0) -> dict[str, np.ndarray]:
    w = dict(synthetic_llama.RandomWeights(llama_onnx.expected_shapes(cfg), seed))
    rng = np.random.default_rng(seed)
    for name in w:  # non-trivial norms and a larger embedding scale, so mistakes show
        if w[name].ndim == 1:
            w[name] = (1 + 0.3 * rng.standard_normal(w[name].shape)).astype(np.float32)
    w["embed"] = w["embed"] * np.float32(20)
    for i in range(cfg.num_layers):  # sharp attention (std 0.02 leaves softmax almost uniform)
        for name in ("q", "k"):
            w[f"layers.{i}.{name}"] = w[f"layers.{i}.{name}"] * np.float32(8)
    return w


def session(model: onnx.ModelProto, lib: Path | None = None, extra_outputs: list[str] = ()) -> ort.InferenceSession:
    if extra_outputs:
        model = onnx.ModelProto.FromString(model.SerializeToString())
        model.graph.output.extend(onnx.ValueInfoProto(name=n) for n in extra_outputs)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if lib is not None:
        so.register_custom_ops_library(str(lib))
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def feeds(cfg: llama_onnx.LlamaConfig, ids: list[int], past: dict | None = None) -> dict[str, np.ndarray]:
    f = {"input_ids": np.array([ids], np.int64)}
    for i in range(cfg.num_layers):
        for kind in ("key", "value"):
            name = f"past_key_values.{i}.{kind}"
            f[name] = past[f"present.{i}.{kind}"] if past else np.zeros((1, cfg.num_kv_heads, 0, cfg.head_dim),
                                                                         np.float32)
    return f


def numpy_forward(cfg: llama_onnx.LlamaConfig, w: dict[str, np.ndarray], ids: list[int],
                  head: np.ndarray | None = None) -> np.ndarray:
    """float64 logits [S, V] with rotate_half RoPE and GQA by repeating KV heads (written apart from the graph).
    The input lookup uses w["embed"]; the LM head is `head` (default: tied to w["embed"])."""
    x = w["embed"].astype(np.float64)[ids]
    S, hd, g = len(ids), cfg.head_dim, cfg.num_heads // cfg.num_kv_heads

    def norm(t, weight):
        return t / np.sqrt((t * t).mean(-1, keepdims=True) + cfg.rms_norm_eps) * weight

    inv = cfg.rope_theta ** (-np.arange(0, hd, 2) / hd)
    ang = np.arange(S)[:, None] * inv[None, :]
    cos, sin = np.cos(ang), np.sin(ang)

    def rope(t):  # [h, S, hd]
        a, b = t[..., : hd // 2], t[..., hd // 2 :]
        return np.concatenate([a * cos - b * sin, b * cos + a * sin], -1)

    for i in range(cfg.num_layers):
        L = {k: w[f"layers.{i}.{k}"].astype(np.float64) for k in llama_onnx.LAYER_TENSORS}
        h = norm(x, L["attn_norm"])
        q = rope((h @ L["q"].T).reshape(S, cfg.num_heads, hd).transpose(1, 0, 2))
        k = rope((h @ L["k"].T).reshape(S, cfg.num_kv_heads, hd).transpose(1, 0, 2))
        v = (h @ L["v"].T).reshape(S, cfg.num_kv_heads, hd).transpose(1, 0, 2)
        k, v = np.repeat(k, g, axis=0), np.repeat(v, g, axis=0)
        s = q @ k.transpose(0, 2, 1) / np.sqrt(hd) + np.triu(np.full((S, S), -np.inf), 1)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        x = x + (p @ v).transpose(1, 0, 2).reshape(S, -1) @ L["o"].T
        h = norm(x, L["ffn_norm"])
        gate, up = h @ L["gate"].T, h @ L["up"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ L["down"].T
    return norm(x, w["norm"]) @ (w["embed"] if head is None else head).astype(np.float64).T


def test_fp32_graph_matches_numpy_prefill_and_decode() -> None:
    w = tiny_weights()
    model, _ = llama_onnx.build_model(TINY, w, llama_onnx.FP32)
    sess = session(model)
    ids = [5, 17, 250, 3, 99, 42, 7]
    want = numpy_forward(TINY, w, ids)
    prefill = sess.run(None, feeds(TINY, ids))
    names = [o.name for o in sess.get_outputs()]
    out = dict(zip(names, prefill))
    np.testing.assert_allclose(out["logits"][0], want, rtol=0, atol=2e-4 * np.abs(want).max())
    # the same tokens one at a time through the KV cache
    past = None
    for t, tok in enumerate(ids):
        step = dict(zip(names, sess.run(None, feeds(TINY, [tok], past))))
        np.testing.assert_allclose(step["logits"][0, 0], want[t], rtol=0, atol=2e-4 * np.abs(want).max())
        past = step
    assert step["present.1.key"].shape == (1, TINY.num_kv_heads, len(ids), TINY.head_dim)
    # prefill 4 then 3 at once (S > 1 with a cache)
    first = dict(zip(names, sess.run(None, feeds(TINY, ids[:4]))))
    rest = sess.run(None, feeds(TINY, ids[4:], first))[0][0]
    np.testing.assert_allclose(rest, want[4:], rtol=0, atol=2e-4 * np.abs(want).max())


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("block_size", [32, 64])
def test_quantized_graph_uses_the_quantized_weights(nibble_lib: Path, symmetric: bool, block_size: int) -> None:
    """MatMulNBits at accuracy_level 1 (fp32 compute) equals the numpy forward on dequantized weights, on ORT's
    kernel and on nibble's; the 4-bit GatherBlockQuantized embedding equals the dequantized table rows."""
    w = tiny_weights(seed=1)
    spec = llama_onnx.QuantSpec(bits=4, block_size=block_size, symmetric=symmetric, accuracy_level=1,
                                embedding="gather_block_quantized")
    model, _ = llama_onnx.build_model(TINY, w, spec)
    deq = dict(w)
    for name in w:
        if w[name].ndim == 2 and name != "embed":
            N, K = w[name].shape
            q = llama_onnx.quantize_rows(w[name], 4, block_size, symmetric)
            deq[name] = mnb.dequantize(q.B, q.scales, q.zero_points, None, K, N, 4, block_size)
    q = llama_onnx.quantize_rows(w["embed"], 4, block_size, symmetric)
    table = mnb.dequantize(q.B, q.scales, q.zero_points, None, TINY.hidden_size, TINY.vocab_size, 4, block_size)
    ids = [1, 299, 64, 8, 150]
    for lib in (None, nibble_lib):
        sess = session(model, lib, extra_outputs=["embed/out"])
        logits, emb = [sess.run(["logits", "embed/out"], feeds(TINY, ids))[i][0] for i in (0, 1)]
        np.testing.assert_allclose(emb, table[ids], rtol=0, atol=1e-6 * np.abs(table).max())
        # the input lookup uses the 4-bit table; the LM head stays the fp32 (tied) table
        want = numpy_forward(TINY, {**deq, "embed": table}, ids, head=w["embed"])
        np.testing.assert_allclose(logits, want, rtol=0, atol=3e-4 * np.abs(want).max())


def test_unpermute_inverts_llama_cpp_permute() -> None:
    """llama.cpp's converter stores Q/K rows as reshape(n_head, 2, hd/2, in).swapaxes(1, 2) of the HF rows."""
    rng = np.random.default_rng(0)
    for n_head, hd, k in ((9, 64, 576), (3, 64, 576), (2, 8, 5)):
        hf = rng.standard_normal((n_head * hd, k)).astype(np.float32)
        permuted = hf.reshape(n_head, 2, hd // 2, k).swapaxes(1, 2).reshape(n_head * hd, k)
        np.testing.assert_array_equal(gguf_to_onnx.unpermute(permuted, n_head), hf)


def write_tiny(tmp: Path, spec: llama_onnx.QuantSpec, seed: int = 2) -> Path:
    model, nbytes = llama_onnx.build_model(TINY, tiny_weights(seed=seed), spec)
    llama_onnx.write_model_dir(tmp, model, nbytes, TINY, spec, tokenizer_json=None)
    return tmp


def run_dir(d: Path, lib: Path | None, ids: list[int]) -> np.ndarray:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if lib is not None:
        so.register_custom_ops_library(str(lib))
    sess = ort.InferenceSession(str(d / "model.onnx"), so, providers=["CPUExecutionProvider"])
    return sess.run(["logits"], feeds(TINY, ids))[0][0]


def test_rewrite_domain_round_trip(tmp_path: Path, nibble_lib: Path) -> None:
    src = write_tiny(tmp_path / "ms", llama_onnx.QuantSpec(bits=4, block_size=32, accuracy_level=4))
    rewrite_matmulnbits.main(["domain", "--to", "nibble", str(src), str(tmp_path / "nb")])
    rewrite_matmulnbits.main(["domain", "--to", "com.microsoft", str(tmp_path / "nb"), str(tmp_path / "back")])
    nb = onnx.load(tmp_path / "nb" / "model.onnx")
    assert {n.domain for n in nb.graph.node if n.op_type == "MatMulNBits"} == {"nibble"}
    assert {o.domain for o in nb.opset_import} == {"", "nibble", "com.microsoft"}  # see set_domain
    assert (tmp_path / "back" / "model.onnx").read_bytes() == (src / "model.onnx").read_bytes()
    import json

    assert json.loads((tmp_path / "nb" / "model_config.json").read_text())["quantization"]["op_domain"] == "nibble"
    ids = [3, 1, 4, 1, 5, 9]
    np.testing.assert_array_equal(run_dir(tmp_path / "nb", nibble_lib, ids), run_dir(src, nibble_lib, ids))
    with pytest.raises(Exception, match="nibble"):  # ORT alone has no nibble domain
        run_dir(tmp_path / "nb", None, ids)


@pytest.mark.parametrize("symmetric", [True, False])
def test_ort_quantizer_rewrite(tmp_path: Path, nibble_lib: Path, symmetric: bool) -> None:
    """fp32 MatMul -> MatMulNBits by onnxruntime's MatMulNBitsQuantizer: every linear layer converted (the
    attention MatMuls and the tied Gemm head are not), and the result equals our own quantizer's graph."""
    src = write_tiny(tmp_path / "fp32", llama_onnx.FP32)
    flag = "--symmetric" if symmetric else "--asymmetric"
    rewrite_matmulnbits.main(["quantize", "--bits", "4", "--block-size", "32", flag, "--accuracy-level", "1",
                              str(src), str(tmp_path / "q")])
    theirs = onnx.load(tmp_path / "q" / "model.onnx")
    nodes = [n for n in theirs.graph.node if n.op_type == "MatMulNBits"]
    assert len(nodes) == 7 * TINY.num_layers
    assert not [n for n in theirs.graph.node if n.op_type == "MatMul" and "attn/" not in n.name]
    ours = write_tiny(tmp_path / "ours", llama_onnx.QuantSpec(bits=4, block_size=32, symmetric=symmetric,
                                                              accuracy_level=1))
    ids = [7, 7, 7, 200, 11]
    a, b = run_dir(tmp_path / "q", nibble_lib, ids), run_dir(ours, nibble_lib, ids)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-3 * np.abs(b).max())
    np.testing.assert_allclose(run_dir(tmp_path / "q", None, ids), a, rtol=0, atol=1e-4 * np.abs(a).max())


def test_synthetic_llama_1b_dims(tmp_path: Path) -> None:
    out = tmp_path / "s1b"
    r = subprocess.run([sys.executable, str(REPO_ROOT / "models" / "synthetic_llama.py"), "--preset", "llama3.2-1b",
                        "--layers", "1", "--context-length", "128", "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    import json

    cfg = json.loads((out / "model_config.json").read_text())
    assert (cfg["num_layers"], cfg["hidden_size"], cfg["intermediate_size"], cfg["num_kv_heads"],
            cfg["vocab_size"], cfg["synthetic"]) == (1, 2048, 8192, 8, 128256, True)
    sess = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    f = {"input_ids": np.array([[1, 2, 3]], np.int64), "past_key_values.0.key": np.zeros((1, 8, 0, 64), np.float32),
         "past_key_values.0.value": np.zeros((1, 8, 0, 64), np.float32)}
    logits = sess.run(["logits"], f)[0]
    assert logits.shape == (1, 3, 128256) and np.isfinite(logits).all()


class _FakeTensor:
    def __init__(self, data: np.ndarray, qtype, n: int, k: int) -> None:
        self.data, self.tensor_type, self.shape = data, qtype, np.array([k, n])


class _FakeGGUF:
    def __init__(self, tensors: dict) -> None:
        self.tensors = tensors


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1", "Q8_0"])
def test_gguf_native_blocks_are_bit_exact(kind: str) -> None:
    """--gguf-native keeps GGUF blocks as MatMulNBits weights: dequantizing them gives gguf's own dequantization
    (to float32 rounding of Q4_1's float zero point), rows reordered as asked; blocks with d = 0 included."""
    from gguf import GGMLQuantizationType, quants

    qtype = GGMLQuantizationType[kind]
    rng = np.random.default_rng(3)
    w = rng.standard_normal((12, 96)).astype(np.float32)
    w[0, :32] = 0.37  # a constant block: Q4_1 stores d = 0, m = 0.37
    w[1, 32:64] = 0.0
    data = quants.quantize(w, qtype)
    want = quants.dequantize(data, qtype).astype(np.float64)
    order = rng.permutation(12)
    got = gguf_to_onnx.native_blocks(_FakeGGUF({"t": _FakeTensor(data, qtype, 12, 96)}), "t", order)
    assert (got.bits, got.block_size, got.shape) == ((8 if kind == "Q8_0" else 4), 32, (12, 96))
    np.testing.assert_allclose(got.dequantize(), want[order], rtol=0, atol=1e-6 * np.abs(want).max())
    assert (got.packed.zero_points is not None) == (kind == "Q4_1")


def test_gguf_native_smollm2_graph_matches_fp32(tmp_path: Path, nibble_lib: Path) -> None:
    """SmolLM2's Q4_1 weights kept as they are: the 4-bit graph at accuracy_level 1 computes what the fp32 graph
    (the dequantized GGUF) computes, on ORT's kernel and on nibble's."""
    for name, extra in (("fp32", ["--bits", "0"]), ("native", ["--gguf-native", "--accuracy-level", "1"])):
        gguf_to_onnx.main(["--out", str(tmp_path / name), *extra])
    import json

    cfg = json.loads((tmp_path / "native" / "model_config.json").read_text())
    assert cfg["quantization"]["zero_points"] == "float" and "Q4_1" in cfg["quantization"]["weights"]
    ids = [504, 2365, 6354, 16438, 27003, 690, 260, 23790]
    feeds_ = {"input_ids": np.array([ids], np.int64)}
    for i in range(cfg["num_layers"]):
        for kind in ("key", "value"):
            feeds_[f"past_key_values.{i}.{kind}"] = np.zeros((1, 3, 0, 64), np.float32)
    out = {}
    for name, lib in (("fp32", None), ("native", None), ("native", nibble_lib)):
        so = ort.SessionOptions()
        so.log_severity_level = 3
        if lib is not None:
            so.register_custom_ops_library(str(lib))
        s = ort.InferenceSession(str(tmp_path / name / "model.onnx"), so, providers=["CPUExecutionProvider"])
        out[(name, lib is not None)] = s.run(["logits"], feeds_)[0][0]
    ref = out[("fp32", False)]
    for key in (("native", False), ("native", True)):
        np.testing.assert_allclose(out[key], ref, rtol=0, atol=1e-5 * np.abs(ref).max(), err_msg=str(key))
