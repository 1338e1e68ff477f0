#!/usr/bin/env bash
# test-aarch64.sh — cross-builds nibble for aarch64 and, under qemu-user 7.2 on every CPU model we support:
#   * runs the kernel tests (every kernel the model can run against the reference), checking that feature
#     detection finds exactly what each model has and which kernel family each compute path gets, and nibble-info
#     reports the same rungs and families;
#   * loads the aarch64 libnibble_ort.so into the aarch64 ONNX Runtime 1.31.1 (PyPI wheel) and runs the Rust
#     integration test (provider/tests/session.rs) against ORT's own aarch64 kernel and numpy; on the first model
#     again with NIBBLE_FAMILIES forcing the second-ranked kernel families (as scripts/test.sh does on x86);
#   * runs the Python parity tests (tests/python/test_parity.py) in an aarch64 CPython 3.11 with the aarch64
#     onnxruntime 1.31.1 wheel on max, neoverse-n1 and cortex-a72, in parallel (scripts/aarch64/python-aarch64.sh:
#     both domains against ORT's built-in aarch64 op and numpy; a wide subset of the matrix on max, a quick one on
#     the others);
#   * runs the Llama driver cross-built for aarch64 (scripts/aarch64/llama-aarch64.sh).
# Installs what it needs (apt cross toolchain + qemu-user, rustup target, the aarch64 ORT wheel; for the Python
# tests Debian's arm64 CPython packages, unpacked under A64ENV, and aarch64 wheels from PyPI). Needs the fixtures of
# tests/fixtures/make_fixtures.py (made here if absent).
# Env: A64ENV (default <repo>/.cache/a64env), AARCH64_CPUS to restrict the models (space-separated; the Python tests
# run on those of max, neoverse-n1 and cortex-a72 it names).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export A64ENV=${A64ENV:-$root/.cache/a64env}

# model → what detection must report (qemu 7.2: max = dotprod, i8mm, sve, sme; "max,sve=off" drops SVE and SME,
# "max,sme=off" only SME).
declare -A expect=(
  [max]="portable,neon,dotprod,i8mm,sve,sme"
  [max,sve=off]="portable,neon,dotprod,i8mm"
  [max,sme=off]="portable,neon,dotprod,i8mm,sve"
  [neoverse-n1]="portable,neon,dotprod"
  [cortex-a76]="portable,neon,dotprod"
  [cortex-a72]="portable,neon"
  [a64fx]="portable,neon,sve"
)
# model → the family each path gets (4-bit, block 32, zero points).
fp32=fp32=neon_fp32_qsnbp8x4_sf32_zpc
declare -A families=(
  [max]="int8=i8mm_int8_qsnbp8x8_sf16_zpc,$fp32"
  [max,sve=off]="int8=i8mm_int8_qsnbp8x8_sf16_zpc,$fp32"
  [max,sme=off]="int8=i8mm_int8_qsnbp8x8_sf16_zpc,$fp32"
  [neoverse-n1]="int8=dotprod_int8_qsnbp8x4_sf16_zpc,$fp32"
  [cortex-a76]="int8=dotprod_int8_qsnbp8x4_sf16_zpc,$fp32"
  [cortex-a72]="int8=neon_int8_qsnbp8x4_sf16_zpc,$fp32"
  [a64fx]="int8=neon_int8_qsnbp8x4_sf16_zpc,$fp32"
)
cpus=${AARCH64_CPUS:-"max max,sve=off max,sme=off neoverse-n1 cortex-a76 cortex-a72 a64fx"}

bash scripts/aarch64/setup-aarch64.sh --no-ort --no-icount --cpus "$cpus"
# The expectations above are qemu 7.2's CPU models (Debian bookworm's qemu-user): another qemu reports other
# features for the same names, which would fail here as a surprise rather than say why.
qver=$(qemu-aarch64 --version | sed -n '1s/.*version \([0-9][0-9.]*\).*/\1/p')
case "$qver" in
    7.2|7.2.*) ;;
    *) echo "test-aarch64.sh: the CPU-model expectations are for qemu-user 7.2 (Debian bookworm); qemu-aarch64 is" \
            "'${qver:-unknown}'" >&2; exit 1 ;;
esac
source scripts/aarch64/ort-aarch64.sh
fetch_ort_a64
# The setup script equips the stable/nightly toolchains; this repository pins its own (rust-toolchain.toml).
rustup target list --installed | grep -qx aarch64-unknown-linux-gnu || rustup target add aarch64-unknown-linux-gnu
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER=$root/scripts/aarch64/qemu-a64-run.sh
target=aarch64-unknown-linux-gnu
export NIBBLE_LIB=${CARGO_TARGET_DIR:-$root/target}/$target/release/libnibble_ort.so
export NIBBLE_ORT_DYLIB=$ORT_A64_LIB NIBBLE_ORT_VERSION=$ORT_A64
export NIBBLE_FIXTURES=${NIBBLE_FIXTURES:-${CARGO_TARGET_DIR:-$root/target}/fixtures} ORT_LOG=${ORT_LOG:-fatal}
[ -s "$NIBBLE_FIXTURES/manifest.txt" ] || .venv/bin/python tests/fixtures/make_fixtures.py --out "$NIBBLE_FIXTURES"

locked=(); [ -f Cargo.lock ] && locked=(--locked)
cargo build -q "${locked[@]}" --release -p nibble-ort --target $target
cargo test -q "${locked[@]}" --release -p nibble-kernels -p nibble-ort --target $target --no-run
bins=${CARGO_TARGET_DIR:-$root/target}/$target/release
second_families=portable_int8_qsnbp8x8_sf16_zpc_bsum,portable_fp32_qsnbp8x8_sf32_zpc,portable_int8_qunbp8x4_sf32_zpb,portable_fp32_qunbp8x4_sf32_zpb
first=1
for cpu in $cpus; do
    echo "== aarch64 under qemu -cpu $cpu: kernels (expect ${expect[$cpu]}), then nibble in aarch64 ORT"
    QEMU_CPU=$cpu NIBBLE_EXPECT_ISAS=${expect[$cpu]} NIBBLE_EXPECT_FAMILIES=${families[$cpu]} cargo test -q "${locked[@]}" --release -p nibble-kernels --target $target
    # nibble-info on this model: its rungs and the family 4-bit block-32 weights get on each path, as expected.
    QEMU_CPU=$cpu scripts/aarch64/qemu-a64-run.sh "$bins/nibble-info" | sed -n '/^ISA rungs/p;/^selection/,$p'
    QEMU_CPU=$cpu scripts/aarch64/qemu-a64-run.sh "$bins/nibble-info" --json |
        python3 -c '
import json, sys
info, rungs = json.load(sys.stdin), sys.argv[1]
want = dict(x.split("=") for x in sys.argv[2].split(","))
got = {r["path"]: r["family"] for r in info["selection"] if r["bits"] == 4 and r["block_size"] == 32}
have = ",".join(info["rungs"])
assert have == rungs and got == want, f"nibble-info: rungs {have}, {got}; expected {rungs}, {want}"
' "${expect[$cpu]}" "${families[$cpu]}"
    QEMU_CPU=$cpu cargo test -q "${locked[@]}" --release -p nibble-ort --target $target --test session
    if [ $first = 1 ]; then
        echo "== aarch64 under qemu -cpu $cpu: nibble in aarch64 ORT with NIBBLE_FAMILIES=$second_families"
        QEMU_CPU=$cpu NIBBLE_FAMILIES=$second_families \
            cargo test -q "${locked[@]}" --release -p nibble-ort --target $target --test session
        first=0
    fi
done
echo "aarch64: kernel and ORT integration tests passed on: $cpus"
# The Python parity tests inside aarch64 ONNX Runtime (aarch64 CPython under qemu) on the models of both lists.
py_cpus=()
for c in max neoverse-n1 cortex-a72; do
    if [[ " $cpus " == *" $c "* ]]; then py_cpus+=("$c"); fi
done
if [ ${#py_cpus[@]} -gt 0 ]; then
    bash scripts/aarch64/python-aarch64.sh --cpus "${py_cpus[*]}"
else
    echo "aarch64: Python parity tests skipped (AARCH64_CPUS names none of max, neoverse-n1, cortex-a72)"
fi
# The Llama driver cross-built for aarch64: 16 greedy SmolLM2 tokens (accuracy_level 1) under qemu -cpu max,sve=off and
# cortex-a72, identical to ORT's built-in op (x86 and aarch64) and to nibble on x86.
bash scripts/aarch64/llama-aarch64.sh
