#!/usr/bin/env bash
# fetch-ort-headers.sh DEST [SUITE] — ONNX Runtime's C/C++ API headers into DEST/include/onnxruntime/.
# No PyPI/npm/crates.io package ships them; Debian's libonnxruntime-dev does. It is downloaded with an isolated apt
# configuration (the system's apt sources are not touched) and extracted, never installed. SUITE defaults to
# trixie (Debian stable: libonnxruntime-dev 1.21.0, ORT_API_VERSION 21, a version that no longer moves; sid
# follows upstream). The C ABI is append-only, so these headers work against any newer runtime.
# Skips the download when DEST already holds the headers. Writes the .deb's name to DEST/include/onnxruntime/SOURCE.
set -euo pipefail
DEST=${1:?usage: fetch-ort-headers.sh DEST [SUITE]}
SUITE=${2:-trixie}
INC=$DEST/include/onnxruntime
say() { printf '[ort-headers] %s\n' "$*"; }
if [ -s "$INC/onnxruntime_c_api.h" ]; then
    say "ok ($INC, $(cat "$INC/SOURCE" 2>/dev/null), $(grep -m1 '#define ORT_API_VERSION' "$INC/onnxruntime_c_api.h"))"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/parts" "$tmp/lists/partial" "$tmp/cache/archives/partial"
: > "$tmp/empty.list"
# The Debian mirror this machine's apt already uses (never a host written here).
mirror=$(bash "$(dirname "${BASH_SOURCE[0]}")/debian-mirror.sh") || { say "cannot tell the Debian mirror"; exit 1; }
printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$mirror" "$SUITE" > "$tmp/parts/ort.sources"
O=(-o "Dir::Etc::SourceList=$tmp/empty.list" -o "Dir::Etc::SourceParts=$tmp/parts" -o "Dir::State::Lists=$tmp/lists"
   -o "Dir::Cache=$tmp/cache")
say "apt-get download libonnxruntime-dev (Debian $SUITE from $mirror; extracted only, not installed)"
apt-get "${O[@]}" update >/dev/null
(cd "$tmp" && apt-get "${O[@]}" download libonnxruntime-dev >/dev/null)
dpkg-deb -x "$tmp"/libonnxruntime-dev_*.deb "$tmp/x"
mkdir -p "$DEST/include"
rm -rf "$INC"
cp -r "$tmp/x/usr/include/onnxruntime" "$DEST/include/"
basename "$tmp"/libonnxruntime-dev_*.deb > "$INC/SOURCE"
say "$INC ($(cat "$INC/SOURCE"), $(grep -m1 '#define ORT_API_VERSION' "$INC/onnxruntime_c_api.h"))"
