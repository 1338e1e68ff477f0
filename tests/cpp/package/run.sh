#!/usr/bin/env bash
# run.sh — the C/C++ package as a user installs it: scripts/install.sh into a fresh prefix (target/cpp-package/
# prefix), then tests/cpp/package/consumer.cpp built two ways against it and run:
#   * CMake (cmake from .venv: tests/python/requirements.txt): find_package(nibble_ort 0.1) and nibble_ort::nibble_ort;
#   * pkg-config --cflags --libs nibble_ort with g++.
# Each binary calls NibbleInfo from the installed library (found through its rpath / the prefix) and checks the
# version and the library path the package reports. Needs the release build (scripts/test.sh makes it first).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
cd "$root"
out=${CARGO_TARGET_DIR:-$root/target}/cpp-package
prefix=$out/prefix
cmake=$root/.venv/bin/cmake
[ -x "$cmake" ] || { echo "package/run.sh: $cmake missing (scripts/setup.sh installs it)" >&2; exit 2; }
command -v pkg-config >/dev/null || { echo "package/run.sh: pkg-config missing (apt-get install pkg-config)" >&2; exit 2; }
rm -rf "$out"
bash scripts/install.sh --prefix "$prefix" --no-build

echo "== CMake: find_package(nibble_ort) from $prefix"
"$cmake" -S tests/cpp/package -B "$out/cmake" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release > "$out/cmake.log" ||
    { cat "$out/cmake.log"; exit 1; }
"$cmake" --build "$out/cmake" > "$out/cmake-build.log" || { cat "$out/cmake-build.log"; exit 1; }
"$out/cmake/consumer" | tail -3
# The version file refuses another minor series (0.x: minors may break the API).
if "$cmake" -S tests/cpp/package -B "$out/cmake-0.2" -DCMAKE_PREFIX_PATH="$prefix" -DNIBBLE_REQUEST_VERSION=0.2 \
        > "$out/cmake-0.2.log" 2>&1; then
    echo "package/run.sh: find_package(nibble_ort 0.2) accepted version $(grep -o '"[0-9.]*"' "$prefix/lib/cmake/nibble_ort/nibble_ortConfigVersion.cmake" | head -1)" >&2
    exit 1
fi
grep -q "considered but not accepted" "$out/cmake-0.2.log" || { cat "$out/cmake-0.2.log"; exit 1; }
echo "find_package(nibble_ort 0.2) refused, as it should be"

echo "== pkg-config: $(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs nibble_ort)"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
libdir=$(pkg-config --variable=libdir nibble_ort)
g++ -std=c++17 -O1 -o "$out/consumer-pc" tests/cpp/package/consumer.cpp $(pkg-config --cflags nibble_ort) \
    -DNIBBLE_ORT_LIBRARY="\"$libdir/libnibble_ort.so\"" -DNIBBLE_ORT_EXPECT_VERSION="\"$(pkg-config --modversion nibble_ort)\"" \
    $(pkg-config --libs nibble_ort) -Wl,-rpath,"$libdir"
"$out/consumer-pc" | tail -1
"$prefix/bin/nibble-info" | head -1
echo "C/C++ package: CMake and pkg-config consumers built and ran against $prefix"
