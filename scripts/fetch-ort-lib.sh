#!/usr/bin/env bash
# fetch-ort-lib.sh VERSION PLATFORM SHA256 DEST — ONNX Runtime's shared library (and libonnxruntime_providers_shared.so) from its PyPI wheel, nothing else.
#   PLATFORM: a wheel platform tag, e.g. manylinux_2_28_x86_64 or manylinux_2_28_aarch64 (cp311 wheels)
#   SHA256:   the wheel's pinned hash (pip --require-hashes, checked again after download)
#   DEST:     where libonnxruntime.so.VERSION goes; skipped when it is already there.
# Wheels are cached in <repo>/.cache/wheels. Uses the repository's .venv (pip, and zipfile: unzip may be missing).
set -euo pipefail
ver=${1:?usage: fetch-ort-lib.sh VERSION PLATFORM SHA256 DEST} platform=${2:?} sha256=${3:?} dest=${4:?}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
py=$root/.venv/bin/python
say() { printf '[ort-lib] %s\n' "$*"; }
lib=$dest/libonnxruntime.so.$ver
# The marker records a complete extraction (the library and, where the wheel has it, libonnxruntime_providers_shared.so,
# which ORT 1.22/1.23 load before any execution-provider library).
if [ -s "$lib" ] && [ -e "$dest/.extracted" ]; then
    say "$ver $platform: ok (${lib#"$root"/})"
    exit 0
fi
[ -x "$py" ] || { echo "fetch-ort-lib.sh: $py missing (run scripts/setup.sh)" >&2; exit 1; }
wheels=$root/.cache/wheels
mkdir -p "$wheels" "$dest"
whl=$(ls "$wheels"/onnxruntime-"$ver"-cp311-cp311-*"$platform"*.whl 2>/dev/null | head -1 || true)
if [ -z "$whl" ] || ! sha256sum --status -c <<<"$sha256  $whl"; then
    say "pip download onnxruntime==$ver (cp311, $platform) -> ${wheels#"$root"/}"
    "$py" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
        --implementation cp --python-version 3.11 --abi cp311 --platform "$platform" \
        --require-hashes -r <(echo "onnxruntime==$ver --hash=sha256:$sha256") -d "$wheels"
    whl=$(ls "$wheels"/onnxruntime-"$ver"-cp311-cp311-*"$platform"*.whl | head -1)
fi
sha256sum --status -c <<<"$sha256  $whl" || { echo "fetch-ort-lib.sh: sha256 mismatch for $whl" >&2; exit 1; }
"$py" - "$whl" "onnxruntime/capi/libonnxruntime.so.$ver" "$lib" <<'PY'
import os, shutil, sys, zipfile
whl, member, dst = sys.argv[1:]
with zipfile.ZipFile(whl) as z:
    shared = "onnxruntime/capi/libonnxruntime_providers_shared.so"
    for m, d in [(member, dst)] + ([(shared, os.path.join(os.path.dirname(dst), os.path.basename(shared)))]
                                   if shared in z.namelist() else []):
        with z.open(m) as src, open(d + ".tmp", "wb") as out:
            shutil.copyfileobj(src, out)
        os.replace(d + ".tmp", d)
PY
touch "$dest/.extracted"
say "$ver $platform: extracted ${lib#"$root"/} ($(du -h "$lib" | cut -f1))"
