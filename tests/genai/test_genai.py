"""nibble under onnxruntime-genai, on onnxruntime-genai's own model: SmolLM2-135M-Instruct made by its model builder
(`python -m onnxruntime_genai.models.builder -p int4 -e cpu`: 151 com.microsoft MatMulNBits, block 32, symmetric,
accuracy_level 4), through both of nibble's frontends as a genai user configures them:

  custom-op  genai_config.json decoder.session_options.custom_ops_library = "libnibble_ort.so" (a copy in the model
             directory: genai loads custom-op libraries only from the model's directory, the working directory or
             a registered EP's directory)
  ep         og.register_execution_provider_library("nibble", path) once per process, and
             decoder.session_options.provider_options = [{"NibbleExecutionProvider": {"accuracy_level_default": "4"}}]
             in genai_config.json

What is asserted, per frontend, on 3 prompts x 24 greedy tokens (genai's own greedy search):
  - nibble ran: its per-node INFO line ("nibble [MatMulNBits] node '...' ... -> int8 path") for all 151
    MatMulNBits nodes of the graph when genai creates the session, the frontend's own session config in ORT's
    session-options trace (custom op: nibble.registered; EP: ep.nibbleexecutionprovider.*), and logits that differ
    from ORT's own int8 kernel's (two int8 kernels round differently; equal logits would mean ORT's kernel ran);
    the ORT baseline and the reference sessions log no nibble line;
  - accuracy, by KL, not token equality (two correct int8 kernels flip greedy near-ties): nibble's generated
    sequence is fed back (teacher forcing) to nibble and to the accuracy_level=1 copy of the same file (fp32
    compute, same 4-bit weights, ORT's own kernel), and KL(reference || nibble) of the next-token distributions
    is taken at each of the 24 positions: mean per prompt <= MEAN_KL_MAX, every position <= STEP_KL_MAX, and the
    mean within KL_VS_ORT x ORT's own int8 kernel's mean KL on the same positions (+ KL_SLACK);
  - the teacher-forced argmax of nibble's logits reproduces genai's greedy tokens (the forced pass is the path
    that was generated).
And once: a deliberately broken model (the two 4-bit codes of every byte of B swapped in the o_proj layers, the
classic packing bug) run on nibble through the same measurement FAILS the bounds (mean KL > 4 x MEAN_KL_MAX), so
the bounds catch a wrong kernel.

Environment: NIBBLE_GENAI_MODEL_DIR (scripts/genai-model.sh prints it: int4/ and int4-acc1/ inside), NIBBLE_LIB
(default target/release/libnibble_ort.so). The figures go to target/genai-kl.json and are printed with -s.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime_genai as og
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
EP_NAME = "NibbleExecutionProvider"
PROMPTS = (
    "The capital of France is",
    "Once upon a time, there was a little girl named Lily. She",
    "def fibonacci(n):",
)
STEPS = 24
THREADS = 2
# Bounds on KL(accuracy_level=1 reference || candidate), nats. Measured here (AMD EPYC, AVX2 family, ORT 1.32.0,
# genai 0.18.0), both frontends alike: nibble 0.0035 / 0.0116 / 0.0108 mean per prompt, worst position 0.088;
# ORT's own int8 kernel 0.0034 / 0.0129 / 0.0075, worst 0.057. The broken model (nibbles swapped in o_proj):
# 3.4 / 6.7 / 9.1 mean.
MEAN_KL_MAX = 0.05
STEP_KL_MAX = 0.5
KL_VS_ORT = 2.0
KL_SLACK = 0.005
NODE_LINE = re.compile(r"nibble \[MatMulNBits\] node '([^']+)': .* -> (int8|fp32) path")
RESULTS: dict = {}


# ------------------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="session")
def model_root() -> Path:
    env = os.environ.get("NIBBLE_GENAI_MODEL_DIR")
    root = Path(env) if env else None
    if root is None or not (root / "int4" / "genai_config.json").is_file() or not (root / "int4-acc1").is_dir():
        pytest.fail(f"NIBBLE_GENAI_MODEL_DIR={env!r} is not a model directory of scripts/genai-model.sh "
                    "(run it: it prints MODEL_DIR=...)")
    return root


@pytest.fixture(scope="session")
def library() -> Path:
    path = Path(os.environ.get("NIBBLE_LIB", REPO_ROOT / "target" / "release" / "libnibble_ort.so"))
    if not path.is_file():
        pytest.fail(f"{path} not found: cargo build --release -p nibble-ort (or set NIBBLE_LIB)")
    return path


@pytest.fixture(scope="session")
def matmul_nodes(model_root: Path) -> list[str]:
    graph = onnx.load(model_root / "int4" / "model.onnx", load_external_data=False).graph
    names = [n.name for n in graph.node if n.op_type == "MatMulNBits" and n.domain == "com.microsoft"]
    assert len(names) == 151, f"the builder's SmolLM2 int4 graph has 151 MatMulNBits nodes, this one {len(names)}"
    return names


def link(src: Path, dst: Path) -> None:
    """A hard link (a copy across file systems): ORT refuses external data whose resolved path leaves the model's
    directory, and genai a custom-op library outside it, so no symbolic links."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy(src, dst)


@pytest.fixture(scope="session")
def variants(model_root: Path, library: Path):
    """variant(base, frontend, broken=None): a model directory beside `base` (under the model root's variants/) with
    its files hard-linked and a genai_config.json for `frontend` ("ort": no nibble, "custom-op", "ep"); `broken`
    (a function of the output path) writes a replacement model.onnx.data."""
    registered = []
    root = model_root / "variants"
    shutil.rmtree(root, ignore_errors=True)

    def make(base: str, frontend: str, broken=None) -> Path:
        src = model_root / base
        out = root / f"{base}-{frontend}{'-broken' if broken else ''}"
        out.mkdir(parents=True)
        for f in src.iterdir():
            if f.name != "genai_config.json" and not (broken and f.name == "model.onnx.data"):
                link(f, out / f.name)
        if broken:
            broken(out / "model.onnx.data")
        config = json.loads((src / "genai_config.json").read_text())
        so = config["model"]["decoder"]["session_options"]
        so["intra_op_num_threads"] = THREADS
        so["log_severity_level"] = 1  # INFO: nibble's per-node line and ORT's session-options trace
        if frontend == "custom-op":
            shutil.copy(library, out / library.name)
            so["custom_ops_library"] = library.name
        elif frontend == "ep":
            if not registered:
                og.register_execution_provider_library("nibble", str(library))
                registered.append(True)
            # a nibble setting as a provider option (4 is its default): ORT lists it in the session's options
            so["provider_options"] = [{EP_NAME: {"accuracy_level_default": "4"}}]
        else:
            assert frontend == "ort", frontend
        (out / "genai_config.json").write_text(json.dumps(config, indent=2))
        return out

    return make


def load(path: Path, capfd) -> tuple[og.Model, str]:
    """The model (genai creates the ORT session here) and what ORT logged meanwhile."""
    capfd.readouterr()
    model = og.Model(str(path))
    return model, capfd.readouterr().err


# ------------------------------------------------------------------------------------------------------ measuring
def encode(model: og.Model, text: str) -> np.ndarray:
    return np.asarray(og.Tokenizer(model).encode(text), dtype=np.int32)


def greedy(model: og.Model, prompt: np.ndarray, steps: int) -> list[int]:
    """genai's own greedy search, exactly `steps` new tokens (EOS held off by min_length)."""
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=len(prompt) + steps, min_length=len(prompt) + steps)
    gen = og.Generator(model, params)
    gen.append_tokens(prompt)
    out = []
    while not gen.is_done():
        gen.generate_next_token()
        out.append(int(gen.get_next_tokens()[0]))
    assert len(out) == steps
    return out


def forced_logprobs(model: og.Model, prompt: np.ndarray, tokens: list[int]) -> np.ndarray:
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + len(tokens) + 1)
    gen = og.Generator(model, params)
    gen.append_tokens(prompt)
    rows = []
    for i in range(len(tokens)):
        rows.append(np.asarray(gen.get_logits(), dtype=np.float64).reshape(-1))
        if i + 1 < len(tokens):
            gen.append_tokens(np.asarray([tokens[i]], dtype=np.int32))
    logits = np.stack(rows)
    logits -= logits.max(axis=1, keepdims=True)
    return logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))


def kl(ref: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """KL(ref || cand) per position, nats."""
    return (np.exp(ref) * (ref - cand)).sum(axis=1)


def assert_nibble_ran(log: str, nodes: list[str], frontend: str) -> None:
    logged = {m.group(1) for m in NODE_LINE.finditer(log)}
    missing = [n for n in nodes if n not in logged]
    assert not missing, f"{frontend}: nibble logged no kernel for {len(missing)} of {len(nodes)} MatMulNBits " \
                        f"nodes (first: {missing[:3]}); log tail:\n{log[-2000:]}"
    marker = "nibble.registered: 1" if frontend == "custom-op" else "ep.nibbleexecutionprovider.accuracy_level_default: 4"
    assert marker in log, f"{frontend}: ORT's session options show no {marker!r}"


# ------------------------------------------------------------------------------------------------------ the tests
@pytest.fixture(scope="module")
def state() -> dict:
    return {}


def baseline_logprobs(state: dict, which: str, prompt: str, tokens: list[int]) -> np.ndarray:
    """forced_logprobs of the reference ("ref") or ORT's own int8 kernel ("ort"), memoized per sequence: both
    frontends generate the same tokens, so these passes run once."""
    key = (which, prompt, tuple(tokens))
    memo = state.setdefault("memo", {})
    if key not in memo:
        memo[key] = forced_logprobs(state[which], state["prompt_ids"][prompt], tokens)
    return memo[key]


def test_reference_and_ort_baseline(state, variants, capfd, model_root, matmul_nodes) -> None:
    """The accuracy_level=1 reference and ORT's own int8 kernel: no nibble line in their sessions (nibble is not
    loaded), and ORT's greedy sequences: the ones everything is compared along are nibble's (next test)."""
    ref, log = load(variants("int4-acc1", "ort"), capfd)
    assert not NODE_LINE.search(log), "the reference session ran nibble"
    ort_int8, log = load(variants("int4", "ort"), capfd)
    assert not NODE_LINE.search(log), "the ORT baseline session ran nibble"
    state["ref"], state["ort"] = ref, ort_int8
    state["prompt_ids"] = {p: encode(ref, p) for p in PROMPTS}
    eos = json.loads((model_root / "int4" / "genai_config.json").read_text())["model"]["eos_token_id"]
    state["eos"] = sorted(eos if isinstance(eos, list) else [eos])


@pytest.mark.parametrize("frontend", ["custom-op", "ep"])
def test_nibble_under_genai(state, variants, capfd, matmul_nodes, frontend: str) -> None:
    if "ref" not in state:
        pytest.fail("test_reference_and_ort_baseline did not run first")
    model, log = load(variants("int4", frontend), capfd)
    assert_nibble_ran(log, matmul_nodes, frontend)
    figures = {}
    for p in PROMPTS:
        ids = state["prompt_ids"][p]
        tokens = greedy(model, ids, STEPS)
        mine = forced_logprobs(model, ids, tokens)
        ref = baseline_logprobs(state, "ref", p, tokens)
        ort = baseline_logprobs(state, "ort", p, tokens)
        # min_length holds EOS off in genai's search: mask it likewise
        assert [int(t) for t in np.delete(mine, state["eos"], axis=1).argmax(axis=1)] == \
            [t - sum(e < t for e in state["eos"]) for t in tokens], \
            f"{frontend} {p!r}: the forced pass does not reproduce genai's greedy tokens"
        assert not np.array_equal(mine, ort), f"{frontend} {p!r}: logits are bitwise ORT's own int8 kernel's"
        k_nibble, k_ort = kl(ref, mine), kl(ref, ort)
        figures[p] = {
            "text": og.Tokenizer(model).decode(np.asarray(tokens, dtype=np.int32)),
            "kl_mean": float(k_nibble.mean()), "kl_max": float(k_nibble.max()),
            "ort_kl_mean": float(k_ort.mean()), "ort_kl_max": float(k_ort.max()),
            "top1_agree_ref": float((mine.argmax(1) == ref.argmax(1)).mean()),
        }
        print(f"\n{frontend} {p!r}: KL(ref||nibble) mean {k_nibble.mean():.4g} max {k_nibble.max():.4g}; "
              f"KL(ref||ORT int8) mean {k_ort.mean():.4g} max {k_ort.max():.4g}; {figures[p]['text']!r}")
    RESULTS[frontend] = figures
    for p, f in figures.items():
        assert f["kl_mean"] <= MEAN_KL_MAX, f"{frontend} {p!r}: mean KL {f['kl_mean']:.4g} > {MEAN_KL_MAX}"
        assert f["kl_max"] <= STEP_KL_MAX, f"{frontend} {p!r}: a position's KL {f['kl_max']:.4g} > {STEP_KL_MAX}"
        assert f["kl_mean"] <= KL_VS_ORT * f["ort_kl_mean"] + KL_SLACK, \
            f"{frontend} {p!r}: mean KL {f['kl_mean']:.4g} vs ORT's own int8 kernel's {f['ort_kl_mean']:.4g}"


def swapped_nibbles_data(model_root: Path, out: Path, pattern: str) -> int:
    """A copy of int4/model.onnx.data with the two 4-bit codes of every byte swapped in the B inputs of the
    MatMulNBits nodes whose name contains `pattern`; returns how many were changed."""
    src = model_root / "int4"
    graph = onnx.load(src / "model.onnx", load_external_data=False).graph
    targets = {n.input[1] for n in graph.node if n.op_type == "MatMulNBits" and pattern in n.name}
    shutil.copy(src / "model.onnx.data", out)
    data = np.memmap(out, dtype=np.uint8, mode="r+")
    changed = 0
    for init in graph.initializer:
        if init.name in targets:
            where = {e.key: e.value for e in init.external_data}
            lo = int(where.get("offset", 0))
            b = data[lo: lo + int(where["length"])]
            b[:] = (b >> 4) | (b << 4)
            changed += 1
    data.flush()
    return changed


def test_a_broken_kernel_fails_the_bounds(state, variants, capfd, model_root, matmul_nodes) -> None:
    """The bounds are not vacuous: nibble computing from weights packed wrong (low and high nibble of every B byte
    swapped, in the 30 o_proj layers) lands far outside them in the same measurement."""
    if "ref" not in state:
        pytest.fail("test_reference_and_ort_baseline did not run first")
    changed = []
    model, log = load(variants("int4", "custom-op",
                               broken=lambda out: changed.append(swapped_nibbles_data(model_root, out, "o_proj"))),
                      capfd)
    assert changed == [30]
    assert_nibble_ran(log, matmul_nodes, "custom-op")
    worst = []
    for p in PROMPTS:
        ids = state["prompt_ids"][p]
        tokens = greedy(model, ids, STEPS)
        k = kl(baseline_logprobs(state, "ref", p, tokens), forced_logprobs(model, ids, tokens))
        worst.append(float(k.mean()))
        print(f"\nbroken {p!r}: KL mean {k.mean():.4g} max {k.max():.4g}")
    RESULTS["broken_o_proj_mean_kl"] = worst
    assert min(worst) > 4 * MEAN_KL_MAX, f"the broken model's mean KL {worst} is not far outside {MEAN_KL_MAX}"


def teardown_module() -> None:
    if RESULTS:
        out = REPO_ROOT / "target" / "genai-kl.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"onnxruntime_genai": og.__version__, **RESULTS}, indent=2) + "\n")
