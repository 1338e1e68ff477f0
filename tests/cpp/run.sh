#!/usr/bin/env bash
# run.sh — the C++ end-to-end test: builds tests/cpp/test_load.cpp with g++ (C++17) against ONNX Runtime's C/C++ API
# and runs it, fixture models in both domains checked against the golden data, ORT linked and found through the
# rpath ($ORIGIN/libonnxruntime.so.1, a symlink to the runtime of that run):
#   * custom-op frontend (Ort::SessionOptions::RegisterCustomOpsLibrary), built against Debian's ORT 1.21 headers
#     (API 21: the oldest C++ API we document), on the PyPI wheel's ORT 1.31.1;
#   * execution-provider frontend (Ort::Env::RegisterExecutionProviderLibrary + AppendExecutionProvider_V2), built
#     against the vendored 1.24 headers (third_party/onnxruntime-1.24/include), on ORT 1.24.4 and 1.31.1.
#
# Needs what scripts/test.sh makes first: target/release/libnibble_ort.so, the fixtures of
# tests/fixtures/make_fixtures.py and .cache/ort/{1.31.1,1.24.4}/libonnxruntime.so.* (scripts/setup.sh).
# Gets, once, and skips when present:
#   * g++ with libstdc++ headers: apt-get install g++, only if g++ cannot compile C++17;
#   * ORT's C/C++ headers. No registry package but Debian's libonnxruntime-dev ships them (trixie: ORT 1.21,
#     ORT_API_VERSION 21); scripts/fetch-ort-headers.sh downloads it with an isolated apt config (the system's apt
#     sources are not touched) and extracts it, never installs it: .cache/ort-headers/include/onnxruntime/.
# Recompiles only when test_load.cpp or the headers are newer than the object.
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
EP_VERSIONS=(1.24.4 1.31.1)                # the EP frontend runs on each
EP_INC=$ROOT/third_party/onnxruntime-1.24/include
HEADERS=$ROOT/.cache/ort-headers          # setup-aarch64.sh --dest; the headers land in include/onnxruntime/
INC=$HEADERS/include/onnxruntime
SRC=tests/cpp/test_load.cpp
BUILD=$TARGET/cpp
BIN=$BUILD/test_load

for v in "$ORT_VERSION" "${EP_VERSIONS[@]}"; do
    [ -e "$ROOT/.cache/ort/$v/libonnxruntime.so.$v" ] || die ".cache/ort/$v/libonnxruntime.so.$v missing (run scripts/setup.sh)"
done
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
# ORT's exports are symbol-versioned per release (VERS_1.31.1, ...), so a binary runs on the runtime it was linked
# against: one object per header set, linked once per runtime into $BUILD/ort-VERSION/ beside a
# libonnxruntime.so.1 symlink to that runtime (rpath $ORIGIN).
mkdir -p "$BUILD"
compile() {  # compile NAME INCLUDE_DIR -> $BUILD/NAME.o
    local obj=$BUILD/$1.o inc=$2
    if [ "$obj" -nt "$SRC" ] && [ "$obj" -nt "$inc/onnxruntime_cxx_api.h" ]; then
        say "compile: ok (${obj#"$ROOT"/} up to date)"
        return
    fi
    local t0=$SECONDS
    g++ -std=c++17 -O1 -Wall -Wextra -Werror -I"$inc" -c "$SRC" -o "$obj.tmp"
    mv "$obj.tmp" "$obj"
    say "compile: g++ -std=c++17 -I${inc#"$ROOT"/} -c $SRC -> ${obj#"$ROOT"/} ($((SECONDS - t0)) s)"
}
link() {  # link NAME VERSION -> $BUILD/ort-VERSION/NAME
    local dir=$BUILD/ort-$2
    mkdir -p "$dir"
    ln -sfn "$ROOT/.cache/ort/$2/libonnxruntime.so.$2" "$dir/libonnxruntime.so.1"
    [ "$dir/$1" -nt "$BUILD/$1.o" ] && [ "$dir/$1" -nt "$dir/libonnxruntime.so.1" ] && return
    g++ "$BUILD/$1.o" -o "$dir/$1" -L"$dir" -l:libonnxruntime.so.1 -Wl,-rpath,'$ORIGIN'
}
compile test_load "$INC"
compile test_load_api24 "$EP_INC"
link test_load "$ORT_VERSION"
for v in "${EP_VERSIONS[@]}"; do link test_load_api24 "$v"; done

# ------------------------------------------------------------------ 4. run
export ORT_LOG=${ORT_LOG:-fatal}
status=0
run() {  # run NAME VERSION FRONTEND
    local bin=$BUILD/ort-$2/$1
    say "run: ${bin#"$ROOT"/} $NIBBLE_LIB $NIBBLE_FIXTURES $2 $3"
    "$bin" "$NIBBLE_LIB" "$NIBBLE_FIXTURES" "$2" "$3" || status=1
}
run test_load "$ORT_VERSION" custom-op
for v in "${EP_VERSIONS[@]}"; do run test_load_api24 "$v" ep; done
exit $status
