#!/usr/bin/env bash
# test-wheel.sh WHEEL — the nibble-ort wheel as a user gets it: installed into a fresh venv (target/wheel-venv) next
# to nothing but onnxruntime and the test requirements (pins of tests/python/requirements.txt), then
#   nibble-info and python -m nibble_ort run outside the repository, and
#   pytest runs tests/python/test_package.py and a quick subset of the parity matrix on the wheel's library.
# Needs python3 >= 3.11 with venv (scripts/setup.sh's .venv is made from the same one) and PyPI or pip's cache.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
whl=$(realpath "${1:?usage: test-wheel.sh WHEEL}")
[ -f "$whl" ] || { echo "test-wheel.sh: $whl not found (scripts/build-wheel.sh makes it)" >&2; exit 2; }
venv=${CARGO_TARGET_DIR:-$root/target}/wheel-venv
base=$("$root/.venv/bin/python" -c 'import sys; print(sys._base_executable)')
rm -rf "$venv"
"$base" -m venv "$venv"
pin() { sed -n "s/^$1==\([^ ]*\).*/$1==\1/p" "$root/tests/python/requirements.txt"; }
"$venv/bin/pip" install -q --disable-pip-version-check "$(pin onnxruntime)" "$(pin onnx)" "$(pin numpy)" \
    "$(pin ml_dtypes)" "$(pin pytest)"
"$venv/bin/pip" install -q --disable-pip-version-check --no-deps "$whl"
cd "$venv"
unset NIBBLE_LIB
echo "== $venv/bin/nibble-info ($(basename "$whl"))"
"$venv/bin/nibble-info"
"$venv/bin/python" -m nibble_ort --json > /dev/null
NIBBLE_PARITY_SUBSET=quick NIBBLE_PARITY_SUMMARY=$venv/parity_summary.json "$venv/bin/python" -m pytest -q -p no:cacheprovider \
    "$root/tests/python/test_package.py" "$root/tests/python/test_parity.py"
