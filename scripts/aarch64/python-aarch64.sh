#!/usr/bin/env bash
# python-aarch64.sh — the Python parity and package tests (tests/python/test_parity.py, test_package.py) inside the
# aarch64 ONNX Runtime 1.31.1 (the PyPI manylinux wheel, as the Python tests use it on x86) with an aarch64 CPython
# 3.11 and the nibble-ort aarch64 wheel installed (scripts/build-wheel.sh), under qemu-user on each
# CPU model (scripts/aarch64/qemu-a64-run.sh: its sysroot's /proc/cpuinfo is what ORT inside the guest reads), against
# the cross-built aarch64 libnibble_ort.so: nibble's MatMulNBits in both domains (nibble, and com.microsoft through
# the override) against ORT's own aarch64 kernel and numpy, plus the session-level tests of that file.
# The full matrix takes ~35 min per model under qemu: NIBBLE_PARITY_SUBSET (see test_parity.py) keeps "quick"
# (~40 cases, and the session-level tests) on every model; "wide" (~400 cases) took ~20 min of the test command on
# max for what the kernel suite under qemu 11's max (every aarch64 kernel over every shape class, against the
# reference) and the ORT session test on every model (provider/tests/session.rs) already prove. The models run in
# parallel (one log each).
#
# Sets up, once (stamp files; skipped when in place), under $A64ENV/python:
#   root/   CPython 3.11 from Debian bookworm's arm64 packages (python3.11-minimal, libpython3.11-minimal,
#           libpython3.11-stdlib and the shared libraries their extension modules need), unpacked with dpkg-deb -x.
#           apt-get runs on a private state (apt/: arm64 package lists, the host's sources): nothing is installed on
#           the host and its apt/dpkg configuration is not changed. glibc and libstdc++ come from the cross toolchain
#           (/usr/aarch64-linux-gnu, scripts/aarch64/setup-aarch64.sh) through qemu-a64-run.sh's sysroot.
#   site/   onnxruntime (the wheel of ort-aarch64.sh, sha256-checked), onnx, numpy, ml_dtypes, pytest at the pins of
#           tests/python/requirements.txt, with their dependencies: manylinux aarch64 cp311 wheels from PyPI (pip
#           download/install --target with the .venv's pip; the guest gets it as PYTHONPATH).
# Guest-only environment goes through qemu's -E (QEMU_A64_EXTRA), so the x86 qemu itself is not affected.
#
# Usage: python-aarch64.sh [--cpus "max neoverse-n1 cortex-a72"] [--subset quick|wide|all] [--setup-only]
#                          [-- PYTEST ARGS...]
#   --subset forces one NIBBLE_PARITY_SUBSET on every model (default: quick).
# Env: A64ENV (default <repo>/.cache/a64env), NIBBLE_WHEEL (default: the aarch64 wheel of scripts/build-wheel.sh,
#      built here when NIBBLE_WHEEL is not set). Needs scripts/setup.sh's .venv; runs
#      setup-aarch64.sh when the cross toolchain or qemu is missing. Logs and parity summaries: target/python-aarch64/.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
export A64ENV=${A64ENV:-$root/.cache/a64env}
cpus="max neoverse-n1 cortex-a72"
subset=""
setup_only=0
pytest_args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --cpus) cpus=$2; shift 2 ;;
        --subset) subset=$2; shift 2 ;;
        --setup-only) setup_only=1; shift ;;
        --) shift; pytest_args=("$@"); break ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
        *) echo "python-aarch64.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
    esac
done
say() { printf '[python-aarch64] %s\n' "$*"; }
die() { printf '[python-aarch64] ERROR: %s\n' "$*" >&2; exit 1; }

pip=$root/.venv/bin/pip
[ -x "$pip" ] || die "$pip missing (run scripts/setup.sh)"
if ! command -v qemu-aarch64 >/dev/null || [ ! -e /usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1 ]; then
    bash scripts/aarch64/setup-aarch64.sh --no-ort --no-icount --cpus "$cpus"
fi
source scripts/aarch64/ort-aarch64.sh
pydir=$A64ENV/python
pyroot=$pydir/root
site=$pydir/site

# ---------------------------------------------------------------- CPython 3.11 (Debian bookworm arm64)
debs=(python3.11-minimal libpython3.11-minimal libpython3.11-stdlib
      libexpat1 zlib1g libssl3 libffi8 libbz2-1.0 liblzma5 libuuid1 libcrypt1)
stamp=$pyroot/.nibble-debs
if [ -x "$pyroot/usr/bin/python3.11" ] && [ -f "$stamp" ] && [ "$(head -1 "$stamp")" = "${debs[*]}" ]; then
    say "python3.11 arm64: ok ($(sed -n 2p "$stamp"))"
else
    apt=$pydir/apt
    rm -rf "$apt" "$pyroot.tmp"
    mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/debs" "$pyroot.tmp"
    : > "$apt/status"
    aptopts=(-q -o "Dir::State=$apt" -o "Dir::State::Lists=$apt/lists" -o "Dir::State::status=$apt/status"
             -o "Dir::Cache=$apt/cache" -o APT::Architecture=arm64 -o APT::Architectures::=arm64
             -o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false -o Acquire::Languages=none
             -o APT::Sandbox::User="$(id -un)")
    say "apt-get download (arm64, private apt state in ${apt#"$root"/}): ${debs[*]}"
    apt-get "${aptopts[@]}" update >/dev/null
    (cd "$apt/debs" && apt-get "${aptopts[@]}" download "${debs[@]/%/:arm64}" >/dev/null)
    for deb in "$apt"/debs/*.deb; do dpkg-deb -x "$deb" "$pyroot.tmp"; done
    # The stdlib's bytecode, made once on the host (CPython 3.11.x share one bytecode format): the guest would
    # otherwise compile every module it imports, emulated, on every run.
    "$root/.venv/bin/python" -m compileall -q -j 0 "$pyroot.tmp/usr/lib/python3.11" >/dev/null
    versions=$(cd "$apt/debs" && ls ./*.deb | sed -n 's|^\./python3\.11-minimal_\([^_]*\)_.*|python3.11 \1|p')
    printf '%s\n%s\n' "${debs[*]}" "$versions" > "$pyroot.tmp/.nibble-debs"
    rm -rf "$pyroot" "$apt"
    mv "$pyroot.tmp" "$pyroot"
    say "python3.11 arm64: unpacked into ${pyroot#"$root"/} ($versions, $(du -sh "$pyroot" | cut -f1))"
fi

# ---------------------------------------------------------------- the Python packages (manylinux aarch64 wheels)
# What test_parity.py imports (conftest.py, models/build_matmulnbits.py): onnxruntime, onnx, numpy, pytest; onnx
# needs ml_dtypes. Versions: tests/python/requirements.txt (all five have cp311 manylinux aarch64 wheels);
# onnxruntime: the aarch64 pin of ort-aarch64.sh, the same wheel the Rust integration test takes its library from.
pin() { sed -n "s/^$1==\([^ ]*\).*/$1==\1/p" tests/python/requirements.txt; }
reqs=("onnxruntime==$ORT_A64" "$(pin onnx)" "$(pin numpy)" "$(pin ml_dtypes)" "$(pin pytest)")
for r in "${reqs[@]}"; do [[ $r == *==* ]] || die "no pin for $r in tests/python/requirements.txt"; done
platforms=(--platform manylinux_2_28_aarch64 --platform manylinux_2_27_aarch64 --platform manylinux_2_26_aarch64
           --platform manylinux2014_aarch64 --platform manylinux_2_17_aarch64)
stamp=$site/.nibble-requirements
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "${reqs[*]}" ]; then
    say "aarch64 wheels: ok (${reqs[*]})"
else
    wheels=$pydir/wheels
    rm -rf "$wheels" "$site.tmp"
    say "pip download (cp311, manylinux aarch64): ${reqs[*]} and their dependencies"
    "$pip" download -q --disable-pip-version-check --only-binary=:all: "${platforms[@]}" --python-version 3.11 \
        --implementation cp -d "$wheels" "${reqs[@]}"
    whl=$(ls "$wheels"/onnxruntime-"$ORT_A64"-cp311-cp311-*manylinux_2_28_aarch64*.whl)
    sha256sum --status -c <<<"$ORT_A64_SHA256  $whl" || die "sha256 mismatch for $whl (pinned in ort-aarch64.sh)"
    "$pip" install -q --disable-pip-version-check --no-deps --only-binary=:all: "${platforms[@]}" \
        --python-version 3.11 --implementation cp --target "$site.tmp" "$wheels"/*.whl
    printf '%s\n' "${reqs[*]}" > "$site.tmp/.nibble-requirements"
    rm -rf "$site" "$wheels"
    mv "$site.tmp" "$site"
    say "aarch64 wheels: installed into ${site#"$root"/} ($(du -sh "$site" | cut -f1))"
fi
[ $setup_only = 1 ] && exit 0

# ---------------------------------------------------------------- the library: the aarch64 wheel, installed
# The tests load nibble the way an aarch64 user does: the nibble-ort manylinux_2_28_aarch64 wheel
# (scripts/build-wheel.sh, built here when NIBBLE_WHEEL is not set) installed into its own directory on the guest's
# PYTHONPATH; conftest.py takes the library from the installed package (nibble_ort.get_library_path()).
if [ -z "${NIBBLE_WHEEL:-}" ]; then
    NIBBLE_WHEEL=$(bash scripts/build-wheel.sh --arch aarch64 | tail -1)
fi
[ -f "$NIBBLE_WHEEL" ] || die "$NIBBLE_WHEEL not found"
nibble_site=$pydir/nibble-site
rm -rf "$nibble_site"
"$pip" install -q --disable-pip-version-check --no-deps --only-binary=:all: --platform manylinux_2_28_aarch64 \
    --python-version 3.11 --implementation cp --target "$nibble_site" "$NIBBLE_WHEEL"
say "nibble-ort wheel: $(basename "$NIBBLE_WHEEL") installed into ${nibble_site#"$root"/}"

# ---------------------------------------------------------------- the runs, one per CPU model, in parallel
out=${CARGO_TARGET_DIR:-$root/target}/python-aarch64
mkdir -p "$out"
libpath=$pyroot/lib/aarch64-linux-gnu:$pyroot/usr/lib/aarch64-linux-gnu
start=$SECONDS
pids=() names=()
for cpu in $cpus; do
    name=$(printf '%s' "$cpu" | tr ',=' '__')
    sub=$subset
    [ -n "$sub" ] || sub=quick
    # Guest-only environment. -S: no site module, so no host /usr/lib/python3/dist-packages (x86) on sys.path.
    # OPENBLAS_CORETYPE on max: numpy's OpenBLAS (the float64 reference, not code under test) would pick its SME
    # kernels there, ~16x slower under qemu.
    extra="-E LD_LIBRARY_PATH=$libpath -E PYTHONPATH=$nibble_site:$site -U PYTHONHOME -U NIBBLE_LIB"
    extra+=" -E NIBBLE_UNDER_QEMU_USER=1"   # test_package.py: the guest cannot start guest processes
    extra+=" -E NIBBLE_PARITY_SUBSET=$sub -E NIBBLE_PARITY_SUMMARY=$out/parity_summary-$name.json"
    case "$cpu" in max*) extra+=" -E OPENBLAS_CORETYPE=NEOVERSEN1" ;; esac
    say "qemu -cpu $cpu: python -m nibble_ort (the installed wheel)"
    QEMU_CPU=$cpu QEMU_A64_EXTRA="${QEMU_A64_EXTRA:-} $extra" bash scripts/aarch64/qemu-a64-run.sh \
        "$pyroot/usr/bin/python3.11" -S -m nibble_ort | sed -n '/^ISA rungs/p;/^kernel families/,/^selection/p;/^library/p'
    say "qemu -cpu $cpu: pytest tests/python/test_parity.py test_package.py (NIBBLE_PARITY_SUBSET=$sub) -> ${out#"$root"/}/$name.log"
    rm -f "$out/parity_summary-$name.json"
    QEMU_CPU=$cpu QEMU_A64_EXTRA="${QEMU_A64_EXTRA:-} $extra" \
        bash scripts/aarch64/qemu-a64-run.sh "$pyroot/usr/bin/python3.11" -S -m pytest -q -p no:cacheprovider \
        --basetemp="$out/tmp-$name" tests/python/test_parity.py tests/python/test_package.py "${pytest_args[@]}" \
        > "$out/$name.log" 2>&1 &
    pids+=($!)
    names+=("$cpu")
done
failed=()
for i in "${!pids[@]}"; do
    cpu=${names[$i]} name=$(printf '%s' "${names[$i]}" | tr ',=' '__') rc=0
    wait "${pids[$i]}" || rc=$?
    if [ $rc = 0 ]; then
        say "qemu -cpu $cpu: $(grep -E '^[0-9]+ passed' "$out/$name.log" | tail -1)"
    else
        cat "$out/$name.log" >&2
        say "qemu -cpu $cpu: FAILED (exit $rc, log above: ${out#"$root"/}/$name.log)" >&2
        failed+=("$cpu")
    fi
done
say "$((SECONDS - start)) s under qemu for: $cpus"
[ ${#failed[@]} = 0 ] || die "parity tests failed on: ${failed[*]}"
say "parity tests passed in aarch64 ONNX Runtime $ORT_A64 on: $cpus"
