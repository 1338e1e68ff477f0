#!/usr/bin/env bash
# run.sh — the C++ end-to-end test: builds tests/cpp/test_load.cpp with g++ (C++17) against ONNX Runtime's C/C++ API
# and runs it: libnibble_ort.so registered with Ort::SessionOptions::RegisterCustomOpsLibrary into the PyPI wheel's
# ORT 1.31.1 (linked, found through the rpath), fixture models in both domains checked against the golden data.
#
# Needs what scripts/test.sh makes first: target/release/libnibble_ort.so, the fixtures of
# tests/fixtures/make_fixtures.py and .cache/ort/1.31.1/libonnxruntime.so.1.31.1 (scripts/setup.sh).
# Gets, once, and skips when present:
#   * g++ with libstdc++ headers: apt-get install g++, only if g++ cannot compile C++17;
#   * ORT's C/C++ headers. No registry package but Debian's libonnxruntime-dev ships them (trixie: ORT 1.21,
#     ORT_API_VERSION 21); scripts/fetch-ort-headers.sh downloads it with an isolated apt config (the system's apt
#     sources are not touched) and extracts it, never installs it: .cache/ort-headers/include/onnxruntime/.
# Rebuilds $TARGET/cpp/test_load only when test_load.cpp or the headers are newer than it.
# Env: NIBBLE_LIB, NIBBLE_FIXTURES, CARGO_TARGET_DIR (same defaults as scripts/test.sh), ORT_LOG (default fatal).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"

say() { printf '[cpp] %s\n' "$*"; }
die() { printf '[cpp] ERROR: %s\n' "$*" >&2; exit 1; }

TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
NIBBLE_LIB=${NIBBLE_LIB:-$TARGET/release/libnibble_ort.so}
NIBBLE_FIXTURES=${NIBBLE_FIXTURES:-$TARGET/fixtures}
ORT_VERSION=1.31.1
ORT_LIB=$ROOT/.cache/ort/$ORT_VERSION/libonnxruntime.so.$ORT_VERSION
HEADERS=$ROOT/.cache/ort-headers          # setup-aarch64.sh --dest; the headers land in include/onnxruntime/
INC=$HEADERS/include/onnxruntime
SRC=tests/cpp/test_load.cpp
BUILD=$TARGET/cpp
BIN=$BUILD/test_load

[ -e "$ORT_LIB" ] || die "${ORT_LIB#"$ROOT"/} missing (run scripts/setup.sh)"
[ -f "$NIBBLE_LIB" ] || die "$NIBBLE_LIB missing (cargo build --release -p nibble-ort)"
[ -f "$NIBBLE_FIXTURES/manifest.txt" ] || die "no fixtures in $NIBBLE_FIXTURES (run tests/fixtures/make_fixtures.py)"

# ------------------------------------------------------------------ 1. g++ (C++17, libstdc++ headers)
cxx_ok() { command -v g++ >/dev/null && echo '#include <string>' | g++ -std=c++17 -x c++ -fsyntax-only - 2>/dev/null; }
if ! cxx_ok; then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    say "apt-get install g++ (g++ missing or cannot compile C++17)"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends g++ >/dev/null
    cxx_ok || die "g++ still cannot compile C++17"
fi
say "g++: ok ($(g++ --version | head -1))"

# ------------------------------------------------------------------ 2. ORT C/C++ headers (Debian's libonnxruntime-dev)
bash scripts/fetch-ort-headers.sh "$HEADERS" | sed 's/^/[cpp] /'
[ -s "$INC/onnxruntime_cxx_api.h" ] || die "could not get $INC/onnxruntime_cxx_api.h from Debian's libonnxruntime-dev"
api=$(sed -n 's/^#define ORT_API_VERSION \([0-9]*\).*/\1/p' "$INC/onnxruntime_c_api.h")
say "headers: ok (${INC#"$ROOT"/}, ORT_API_VERSION $api, from $(cat "$INC/SOURCE" 2>/dev/null || echo '?'))"
# The C++ API asks the runtime for ORT_API_VERSION at start-up: headers newer than the runtime cannot work.
ort_minor=$(cut -d. -f2 <<<"$ORT_VERSION")
[ "$api" -le "$ort_minor" ] || die "headers are ORT_API_VERSION $api, newer than ONNX Runtime $ORT_VERSION (API $ort_minor)"

# ------------------------------------------------------------------ 3. build (only when out of date)
# The binary asks for the library's SONAME, libonnxruntime.so.1: a symlink to the wheel's library next to it, rpath $ORIGIN.
mkdir -p "$BUILD"
ln -sfn "$ORT_LIB" "$BUILD/libonnxruntime.so.1"
if [ "$BIN" -nt "$SRC" ] && [ "$BIN" -nt "$INC/onnxruntime_cxx_api.h" ]; then
    say "build: ok (${BIN#"$ROOT"/} up to date)"
else
    t0=$SECONDS
    g++ -std=c++17 -O1 -Wall -Wextra -Werror -I"$INC" "$SRC" -o "$BIN.tmp" \
        -L"$BUILD" -l:libonnxruntime.so.1 -Wl,-rpath,'$ORIGIN'
    mv "$BIN.tmp" "$BIN"
    say "build: g++ -std=c++17 $SRC -> ${BIN#"$ROOT"/} ($((SECONDS - t0)) s)"
fi

# ------------------------------------------------------------------ 4. run
export ORT_LOG=${ORT_LOG:-fatal}
say "run: ${BIN#"$ROOT"/} $NIBBLE_LIB $NIBBLE_FIXTURES $ORT_VERSION"
"$BIN" "$NIBBLE_LIB" "$NIBBLE_FIXTURES" "$ORT_VERSION"
