#!/usr/bin/env bash
# serve.sh — the chat server from a fresh clone: installs what it needs (scripts/setup.sh --no-extra-ort), builds
# libnibble_ort.so and nibble-serve, converts SmolLM2-135M-Instruct (scripts/convert-smollm2.sh), then serves it
# on nibble's INT4 kernels with OpenAI's chat-completions API (default http://127.0.0.1:8080/v1).
#
#   scripts/serve.sh                                  127.0.0.1:8080, the SmolLM2 q4 model
#   scripts/serve.sh --host 0.0.0.0 --port 9000 --usd-per-hour 0.68 --parallel 8
#   scripts/serve.sh --model DIR --no-nibble          any nibble-serve option (target/release/nibble-serve --help)
# Options are checked against nibble-serve's before anything is installed or built.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
LOCKED=()
[ -f Cargo.lock ] && LOCKED=(--locked)
die() { printf 'serve.sh: %s\n' "$*" >&2; exit 2; }

# Option names from the server's source (examples/server/src/main.rs, struct Args), so they cannot drift.
mapfile -t OPTIONS < <(sed -n '/^struct Args {/,/^}/s/^    \([a-z0-9_]*\): .*/--\1/p' examples/server/src/main.rs | tr _ -)
[ "${#OPTIONS[@]}" -gt 5 ] || die "could not read nibble-serve's options from examples/server/src/main.rs"
has() { local a; for a in "${@:2}"; do [ "$a" = "$1" ] && return 0; done; return 1; }
for a in "$@"; do
    case "$a" in
        -h|--help|-V|--version) ;;
        --*=*) has "${a%%=*}" "${OPTIONS[@]}" || die "unknown option ${a%%=*} (nibble-serve has: ${OPTIONS[*]})" ;;
        --*) has "$a" "${OPTIONS[@]}" || die "unknown option $a (nibble-serve has: ${OPTIONS[*]})" ;;
    esac
done
command -v rustup >/dev/null || die "rustup not found: install Rust from https://rustup.rs, then open a new shell"
command -v "${PYTHON:-python3}" >/dev/null || die "python3 not found: install Python 3.11+ (python3 python3-venv)"
command -v cc >/dev/null || die "no C compiler/linker (cc) found (Debian/Ubuntu: sudo apt-get install gcc)"

echo "==> setup (scripts/setup.sh --no-extra-ort)"
bash scripts/setup.sh --no-extra-ort
echo "==> build (cargo build --release -p nibble-ort -p nibble-llama -p nibble-serve)"
# one build of the three, as scripts/demo.sh and scripts/test.sh do: one feature resolution, nothing rebuilt
cargo build "${LOCKED[@]}" --release -p nibble-ort -p nibble-llama -p nibble-serve
echo "==> convert SmolLM2-135M-Instruct (scripts/convert-smollm2.sh)"
bash scripts/convert-smollm2.sh "$TARGET/llama"
echo "==> serve (Ctrl-C stops it; answers in flight finish first)"
exec "$TARGET/release/nibble-serve" "$@"   # finds target/release/libnibble_ort.so itself
