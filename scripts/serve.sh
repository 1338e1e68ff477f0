#!/usr/bin/env bash
# serve.sh — the chat server from a fresh clone: installs what it needs (scripts/setup.sh --no-extra-ort), builds
# libnibble_ort.so and nibble-serve, converts SmolLM2-135M-Instruct (scripts/convert-smollm2.sh), then serves it
# on nibble's INT4 kernels with OpenAI's chat-completions API (default http://127.0.0.1:8080/v1) and the chat page
# at http://127.0.0.1:8080/. Without --model (and without --no-nibble), it adds --compare: the same model on ORT's
# built-in INT4 kernels and SmolLM2's fp32 graph are loaded too, for the page's side-by-side.
#
#   scripts/serve.sh                                  127.0.0.1:8080, SmolLM2 q4 on nibble (+ ORT INT4, fp32)
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

# shellcheck source=scripts/prepare.sh
source scripts/prepare.sh
# Options checked against the server's (examples/server/src/main.rs, struct Args) before setup and build.
check_options nibble-serve examples/server/src/main.rs '/^struct Args {/,/^}/s/^    \([a-z0-9_]*\): .*/--\1/p' 5 "$@"
check_prerequisites
prepare
EXTRA=()
if ! has --model "${GIVEN[@]}" && ! has --no-nibble "${GIVEN[@]}" && ! has --compare "${GIVEN[@]}"; then
    EXTRA=(--compare)   # the demo model's fp32 twin is there: scripts/convert-smollm2.sh wrote both
fi
echo "==> serve ${EXTRA[*]} (Ctrl-C stops it; answers in flight finish first)"
exec "$TARGET/release/nibble-serve" "${EXTRA[@]}" "$@"   # finds target/release/libnibble_ort.so itself
