#!/usr/bin/env bash
# test-wheel.sh WHEEL [--ort VERSION] — the nibble-ort wheel as a user gets it: installed into a fresh venv
# (target/wheel-venv-VERSION) next to nothing but onnxruntime and the test requirements (pins of
# tests/python/requirements.txt), then
#   nibble-info and python -m nibble_ort run outside the repository, and
#   pytest runs tests/python/test_package.py and a quick subset of the parity matrix on the wheel's library.
# --ort: another onnxruntime from PyPI (default: the pinned one; scripts/test.sh also runs 1.17.3, the oldest our
# ABI floor allows, which PyPI has only as a Python package: its wheels before 1.19 hold no libonnxruntime.so).
# Needs python3 >= 3.11 with venv (scripts/setup.sh's .venv is made from the same one) and PyPI or pip's cache.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
usage="usage: test-wheel.sh WHEEL [--ort VERSION]"
whl=$(realpath "${1:?$usage}"); shift
[ -f "$whl" ] || { echo "test-wheel.sh: $whl not found (scripts/build-wheel.sh makes it)" >&2; exit 2; }
pin() { sed -n "s/^$1==\([^ ]*\).*/$1==\1/p" "$root/tests/python/requirements.txt"; }
ort=$(pin onnxruntime)
case "${1:-}" in
    "") ;;
    --ort) ort=onnxruntime==${2:?$usage} ;;
    *) echo "test-wheel.sh: unknown argument $1 ($usage)" >&2; exit 2 ;;
esac
ver=${ort#onnxruntime==}
minor=$(echo "$ver" | cut -d. -f2)
NUMPY_1=(numpy==1.26.4 onnx==1.17.0)   # the newest numpy 1 and an onnx that takes it (no ml_dtypes needed)
deps=("$(pin onnx)" "$(pin numpy)" "$(pin ml_dtypes)") pytest_k=()
# Before 1.19: numpy 1; and ORT's own kernel is no oracle (the ORT-oracle half of the matrix, and the test that
# expects 1.19+'s refusal of block size 512 in its own words, are left out).
[ "$minor" -ge 19 ] ||
    { deps=("${NUMPY_1[@]}"); pytest_k=(-k "not test_parity[ and not test_override_off_runs_orts_kernel"); }
venv=${CARGO_TARGET_DIR:-$root/target}/wheel-venv-$ver
base=$("$root/.venv/bin/python" -c 'import sys; print(sys._base_executable)')
rm -rf "$venv"
"$base" -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check "$ort" "${deps[@]}" "$(pin pytest)"
"$venv/bin/pip" install -q --disable-pip-version-check --no-deps "$whl"
cd "$venv"
unset NIBBLE_LIB
echo "== $venv/bin/nibble-info ($(basename "$whl"), onnxruntime $ver)"
"$venv/bin/nibble-info"
"$venv/bin/python" -m nibble_ort --json > /dev/null
NIBBLE_PARITY_SUBSET=quick NIBBLE_PARITY_SUMMARY=$venv/parity_summary.json "$venv/bin/python" -m pytest -q -p no:cacheprovider \
    "$root/tests/python/test_package.py" "$root/tests/python/test_parity.py" "${pytest_k[@]}"
