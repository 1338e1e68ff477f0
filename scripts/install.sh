#!/usr/bin/env bash
# install.sh --prefix DIR — installs nibble for C and C++ users:
#   DIR/lib/libnibble_ort.so                          the library (custom-op library and execution provider)
#   DIR/include/nibble_ort.h                          its C declarations (RegisterCustomOps, CreateEpFactories, ...)
#   DIR/bin/nibble-info                               which kernels this CPU gets
#   DIR/lib/cmake/nibble_ort/nibble_ortConfig*.cmake  find_package(nibble_ort): nibble_ort::nibble_ort, nibble_ort_LIBRARY
#   DIR/lib/pkgconfig/nibble_ort.pc                   pkg-config --cflags --libs nibble_ort
# Builds them first (cargo build-release: the selection every script builds, .cargo/config.toml, so no other
# script's build is invalidated) unless --no-build. The installed tree is relocatable.
# Usage: scripts/install.sh --prefix DIR [--no-build]     (e.g. --prefix /usr/local, or $HOME/.local)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prefix="" build=1
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) prefix=${2:?--prefix needs a directory}; shift 2 ;;
        --no-build) build=0; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "install.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
    esac
done
[ -n "$prefix" ] || { echo "install.sh: --prefix DIR is required (try --help)" >&2; exit 2; }
cd "$root"
release=${CARGO_TARGET_DIR:-$root/target}/release
if [ $build = 1 ]; then
    locked=(); [ -f Cargo.lock ] && locked=(--locked)
    cargo build-release -q "${locked[@]}"
fi
for f in "$release/libnibble_ort.so" "$release/nibble-info"; do
    [ -f "$f" ] || { echo "install.sh: $f missing (cargo build-release)" >&2; exit 1; }
done
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
major=${version%%.*} rest=${version#*.} minor=${rest%%.*}
mkdir -p "$prefix"/{lib/cmake/nibble_ort,lib/pkgconfig,include,bin}
install -m 755 "$release/libnibble_ort.so" "$prefix/lib/libnibble_ort.so"
install -m 755 "$release/nibble-info" "$prefix/bin/nibble-info"
install -m 644 include/nibble_ort.h "$prefix/include/nibble_ort.h"
subst() { sed -e "s/@VERSION@/$version/g" -e "s/@MAJOR@/$major/g" -e "s/@MINOR@/$minor/g" "$1" > "$2"; }
subst cmake/nibble_ortConfig.cmake.in "$prefix/lib/cmake/nibble_ort/nibble_ortConfig.cmake"
subst cmake/nibble_ortConfigVersion.cmake.in "$prefix/lib/cmake/nibble_ort/nibble_ortConfigVersion.cmake"
subst cmake/nibble_ort.pc.in "$prefix/lib/pkgconfig/nibble_ort.pc"
echo "installed nibble $version into $prefix (CMake: -DCMAKE_PREFIX_PATH=$prefix; pkg-config:" \
     "PKG_CONFIG_PATH=$prefix/lib/pkgconfig)"
