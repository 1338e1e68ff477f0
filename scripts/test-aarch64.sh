#!/usr/bin/env bash
# test-aarch64.sh — cross-builds nibble for aarch64 and, under qemu-user 7.2 (Debian bookworm's) on 7 CPU models:
#   * runs the kernel tests (every kernel the model can run against the reference: the quick subset, or the whole
#     suite on the models of AARCH64_FULL, none by default: every aarch64 kernel, base NEON, dotprod and i8mm
#     included, runs the whole suite under qemu 11's max, below), checking that feature detection finds exactly
#     what each model has and which kernel family each compute path gets, and nibble-info reports the same rungs
#     and families;
#   * loads the aarch64 libnibble_ort.so into the aarch64 ONNX Runtime 1.31.1 (PyPI wheel) and runs the Rust
#     integration test (provider/tests/session.rs) against ORT's own aarch64 kernel and numpy; on the first model
#     again with NIBBLE_FAMILIES forcing the second-ranked kernel families (as scripts/test.sh does on x86);
#   * runs the Python parity tests (tests/python/test_parity.py) in an aarch64 CPython 3.11 with the aarch64
#     onnxruntime 1.31.1 wheel on max, neoverse-n1 and cortex-a72, in parallel (scripts/aarch64/python-aarch64.sh:
#     both domains against ORT's built-in aarch64 op and numpy; the quick subset of the matrix);
#   * runs the Llama driver cross-built for aarch64 (scripts/aarch64/llama-aarch64.sh);
#   * under qemu-user >= 10.1 (Debian testing's static qemu-aarch64, scripts/aarch64/fetch-qemu-testing.sh: 11.1 when
#     written) on the SVE/SME models 7.2 lacks or gets wrong: max (SVE2 + SME2; also with the SVE and SME vector
#     lengths both set to 16, 32 and 64 bytes), max,sme=off, max,sve=off (SME2 without SVE: detection must not
#     report SVE from its sve2 flag), neoverse-v1 (SVE 256 + i8mm), neoverse-n2 and cortex-a710 (SVE2 128 + i8mm),
#     a64fx (SVE 512, no dotprod): the same checks (detection, every feature and vector length, the families,
#     nibble-info, the ORT session test), the whole kernel suite on max and a quick subset of it on the others
#     (QEMU11_FULL). Each qemu version keeps its own sysroots (qemu-a64-run.sh).
# Installs what it needs (apt cross toolchain + qemu-user, rustup target, the aarch64 ORT wheel; for the Python
# tests Debian's arm64 CPython packages, unpacked under A64ENV, and aarch64 wheels from PyPI). Needs the fixtures of
# tests/fixtures/make_fixtures.py (made here if absent).
# Env: A64ENV (default <repo>/.cache/a64env), AARCH64_CPUS to restrict the qemu 7.2 models (space-separated, "none"
# for none; the Python tests run on those of max, neoverse-n1 and cortex-a72 it names), AARCH64_CPUS_QEMU11 the
# same for the qemu 11 models, AARCH64_FULL and QEMU11_FULL the models of each that run the whole kernel suite.
# --build-only: the set-up and the cross-builds, then stop (scripts/test.sh runs them in the foreground, at full
# priority, before it starts the rest of this script in the background at nice 19: starved by the x86 steps there,
# the builds took ~15 min and held target/release's build lock, on which other steps' cargo calls waited).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build_only=0
case "${1:-}" in
    --build-only) build_only=1 ;;
    "") ;;
    *) echo "test-aarch64.sh: unknown argument $1 (the one option: --build-only)" >&2; exit 2 ;;
esac
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
# model → the family each path gets (4-bit, block 32, zero points). SVE vectors of at least 256 bits get the SVE
# families on both paths (a64fx, SVE without i8mm, the SVE fp32 one only).
fp32=fp32=neon_fp32_qsnbp8x4_sf32_zpc
sve_fp32=fp32=sve_fp32_qsnbp8x4_sf32_zpc
sve_fams="int8=sve_i8mm_int8_qsnbp8x8_sf16_zpc,$sve_fp32"
declare -A families=(
  [max]=$sve_fams
  [max,sve=off]="int8=i8mm_int8_qsnbp8x8_sf16_zpc,$fp32"
  [max,sme=off]=$sve_fams
  [neoverse-n1]="int8=dotprod_int8_qsnbp8x4_sf16_zpc,$fp32"
  [cortex-a76]="int8=dotprod_int8_qsnbp8x4_sf16_zpc,$fp32"
  [cortex-a72]="int8=neon_int8_qsnbp8x4_sf16_zpc,$fp32"
  [a64fx]="int8=neon_int8_qsnbp8x4_sf16_zpc,$sve_fp32"
)
# model → every feature detection reports, and the vector lengths (the kernels' Cpu display; NIBBLE_EXPECT_CPU).
declare -A features=(
  [max]="neon+dotprod+i8mm+fp16+bf16+sve+sve2+svei8mm+sme (sve vl 64 B) (sme svl 32 B)"
  [max,sve=off]="neon+dotprod+i8mm+fp16+bf16"
  [max,sme=off]="neon+dotprod+i8mm+fp16+bf16+sve+sve2+svei8mm (sve vl 64 B)"
  [neoverse-n1]="neon+dotprod+fp16"
  [cortex-a76]="neon+dotprod+fp16"
  [cortex-a72]="neon"
  [a64fx]="neon+fp16+sve (sve vl 64 B)"
)
cpus=${AARCH64_CPUS:-"max max,sve=off max,sme=off neoverse-n1 cortex-a76 cortex-a72 a64fx"}
[ "$cpus" = none ] && cpus=""

# The same for qemu >= 10.1 (Debian testing's qemu-user, 11.1 when written), whose models differ: SME2 in max, SVE
# and SME vector lengths set per model, the Neoverse V1 / N2 and Cortex-A710 models. Without a ranked SME2 family the
# int8 path gets the SVE i8mm family where SVE i8mm has vectors of at least 256 bits (max at a 1024-bit SVL,
# max,sme=off, neoverse-v1), NEON i8mm at 128 bits (neoverse-n2, cortex-a710, max at 16 bytes); the fp32 path the SVE
# fp32 family at ≥ 256 bits (a64fx too), NEON's below, and the SME2 fp32 family at a 256-bit streaming vector (see
# sme2_fams); the int8 SME2 family is first where the streaming vector is 256 or 512 bits (max, max at 32 and 64 bytes, max,sve=off: its
# kernels' asm lengths, counted faster than ORT's KleidiAI SME2 kernels), and ranks nowhere at 128 and 1024 bits
# (the i8mm or SVE i8mm family there). "max,sve=off" is here an SME2 core without SVE, whose sve2 flag must not turn
# into SVE.
i8mm_fams="int8=i8mm_int8_qsnbp8x8_sf16_zpc,$fp32"
sme2_int8=int8=sme2_int8_qsnbp64x4_sf16_zpc
# The fp32 path takes the SME2 (FMOPA) family where the streaming vector is 256 or 512 bits, with or without SVE (max,
# max at 32 and 64 bytes, max,sve=off, and the Apple M4 shape: no SVE, a 512-bit streaming vector); the SVE fp32
# family at other streaming lengths (128 bytes), NEON's at 16 bytes.
sme2_fams="$sme2_int8,fp32=sme2_fp32_qsnbp8x4_sf32_zpc"
q11_max_feats="neon+dotprod+i8mm+fp16+bf16+sve+sve2+svei8mm+sme+sme2"
vl() { echo "max,sve-default-vector-length=$1,sme-default-vector-length=$1"; }
# SME at 1024 bits (SVE stays at 512): the SME2 GEMM's single-vector epilogue, taken above 512-bit SVL; the kernel
# unit test's PR_SME_SET_VL does not change the length under qemu-user.
svl128="max,sme-default-vector-length=128"
# SME2 at 512 bits without SVE: Apple M4's shape (its int8 and fp32 SME2 families, every SVE kernel refused).
m4="max,sve=off,sme-default-vector-length=64"
declare -A expect11=(
  [max]="portable,neon,dotprod,i8mm,sve,sme"
  [$(vl 16)]="portable,neon,dotprod,i8mm,sve,sme"
  [$(vl 32)]="portable,neon,dotprod,i8mm,sve,sme"
  [$(vl 64)]="portable,neon,dotprod,i8mm,sve,sme"
  [$svl128]="portable,neon,dotprod,i8mm,sve,sme"
  [max,sme=off]="portable,neon,dotprod,i8mm,sve"
  [max,sve=off]="portable,neon,dotprod,i8mm,sme"
  [$m4]="portable,neon,dotprod,i8mm,sme"
  [neoverse-v1]="portable,neon,dotprod,i8mm,sve"
  [neoverse-n2]="portable,neon,dotprod,i8mm,sve"
  [cortex-a710]="portable,neon,dotprod,i8mm,sve"
  [a64fx]="portable,neon,sve"
)
declare -A features11=(
  [max]="$q11_max_feats (sve vl 64 B) (sme svl 32 B)"
  [$(vl 16)]="$q11_max_feats (sve vl 16 B) (sme svl 16 B)"
  [$(vl 32)]="$q11_max_feats (sve vl 32 B) (sme svl 32 B)"
  [$(vl 64)]="$q11_max_feats (sve vl 64 B) (sme svl 64 B)"
  [$svl128]="$q11_max_feats (sve vl 64 B) (sme svl 128 B)"
  [max,sme=off]="neon+dotprod+i8mm+fp16+bf16+sve+sve2+svei8mm (sve vl 64 B)"
  [max,sve=off]="neon+dotprod+i8mm+fp16+bf16+sme+sme2 (sme svl 32 B)"
  [$m4]="neon+dotprod+i8mm+fp16+bf16+sme+sme2 (sme svl 64 B)"
  [neoverse-v1]="neon+dotprod+i8mm+fp16+sve+svei8mm (sve vl 32 B)"
  [neoverse-n2]="neon+dotprod+i8mm+fp16+bf16+sve+sve2+svei8mm (sve vl 16 B)"
  [cortex-a710]="neon+dotprod+i8mm+fp16+bf16+sve+sve2+svei8mm (sve vl 16 B)"
  [a64fx]="neon+fp16+sve (sve vl 64 B)"
)
declare -A families11=(
  [max]=$sme2_fams [$(vl 16)]=$i8mm_fams [$(vl 32)]=$sme2_fams [$(vl 64)]=$sme2_fams [$svl128]=$sve_fams
  [max,sme=off]=$sve_fams
  [max,sve=off]=$sme2_fams [$m4]=$sme2_fams [neoverse-v1]=$sve_fams [neoverse-n2]=$i8mm_fams [cortex-a710]=$i8mm_fams
  [a64fx]="int8=neon_int8_qsnbp8x4_sf16_zpc,$sve_fp32"
)
cpus11=${AARCH64_CPUS_QEMU11:-"max $(vl 16) $(vl 32) $(vl 64) $svl128 max,sme=off max,sve=off $m4 neoverse-v1 neoverse-n2 cortex-a710 a64fx"}
[ "$cpus11" = none ] && cpus11=""
# The qemu 11 models that run the whole kernel suite; the others run QUICK_KERNEL_TESTS (below). Measured on this
# 2-core machine (qemu 11.1.2, CPU seconds, which the load of other jobs does not change): a model with the whole
# suite 126 s, a quick one 41 s (the kernel subset, nibble-info and the ORT session test). max (every feature, SVE at
# 512 bits) runs the whole suite, the SVE i8mm GEMM included (it uses the first 256 bits at any vector length);
# neoverse-v1 and max at 32 bytes run it at exactly 256 bits in the quick subset.
full11=${QEMU11_FULL:-"max"}
# The qemu 7.2 models that run the whole kernel suite: none by default. Every aarch64 kernel runs the whole suite
# under qemu 11's max (max runs them all: 157 s there against 267 s under qemu 7.2's max in the CI run of
# 2026-11-25), dotprod's and base NEON's included (forced families), so each 7.2 model runs the quick subset: the
# detection and selection it must show, every kernel it can run over the edge-case taxonomy and generated shapes, the
# ORT session test. The whole suite on neoverse-n1 took 222 s of the test command (cortex-a72's 166 s before it) for
# kernels max's suite already runs (its three longest tests, every_family_tiles_correctly, mlas_shapes and
# every_claimed_block_size, are ~85% of it). AARCH64_FULL="neoverse-n1 ..." brings it back on those models.
full72=${AARCH64_FULL:-""}

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
# Build exactly the package selections used below, once each: cargo unifies dependency features per selection, so
# another selection (e.g. both packages in one `cargo test --no-run`) compiles a variant nothing runs and later
# selections recompile (~150 s in CI). The library, nibble-info and nibble-llama: .cargo/config.toml's selection.
phase() { echo "== aarch64 [$((SECONDS - t_start)) s]: $*"; }
t_start=$SECONDS
phase "cross-building (release): libnibble_ort.so, nibble-info, nibble-llama; the kernel and session test binaries"
cargo build-release-aarch64 -q "${locked[@]}"
cargo test -q "${locked[@]}" --release -p nibble-kernels --target $target --no-run
cargo test-session-aarch64 -q "${locked[@]}" --no-run
if [ $build_only = 1 ]; then
    phase "cross-builds done (--build-only)"
    exit 0
fi
bins=${CARGO_TARGET_DIR:-$root/target}/$target/release

# Two lanes from here, each mostly one emulated thread: the model checks below (qemu 7.2, then qemu 11) and, beside
# them, the whole-program tests (the Python parity tests, then the Llama driver), with the log of the second lane
# printed when both are done. In scripts/test.sh this script runs at nice 19 with both cores nearly to itself (only
# the onnxruntime-genai model's build beside it): one lane at a time left a core idle for a last stretch (the
# Python phase 163 s and the Llama phase 166 s of the 2026-11-28 run came after the models, one after the other).
# Shared state is safe: the sysroots are made atomically (qemu-a64-run.sh), the builds above are the only ones
# (the lanes' cargo calls find them fresh), and the Python and Llama tests write only under their own directories.
apps_log=${CARGO_TARGET_DIR:-$root/target}/test-aarch64-apps.log
apps() {
    # The Python parity tests inside aarch64 ONNX Runtime (aarch64 CPython under qemu) on the models of both lists.
    local py_cpus=() c
    for c in max neoverse-n1 cortex-a72; do
        if [[ " $cpus " == *" $c "* ]]; then py_cpus+=("$c"); fi
    done
    if [ ${#py_cpus[@]} -gt 0 ]; then
        bash scripts/aarch64/python-aarch64.sh --cpus "${py_cpus[*]}"
    else
        echo "aarch64: Python parity tests skipped (AARCH64_CPUS names none of max, neoverse-n1, cortex-a72)"
    fi
    phase "Python parity tests done"
    # The Llama driver cross-built for aarch64: 16 greedy SmolLM2 tokens (accuracy_level 1) under qemu 7.2 -cpu
    # max,sve=off and qemu 11 -cpu max (SME2) and neoverse-v1 (SVE 256), identical to ORT's built-in op and to
    # nibble on x86.
    bash scripts/aarch64/llama-aarch64.sh
    phase "Llama driver done"
}
apps > "$apps_log" 2>&1 &
apps_pid=$!
# Stopping this script stops the lane too (scripts/test.sh kills the whole process group; this covers a direct run).
trap 'kill "$apps_pid" 2>/dev/null || true' EXIT
phase "the Python parity and Llama driver tests started beside the model checks (log: ${apps_log#"$root"/})"
sme2_families=sme2_int8_qsnbp64x4_sf16_zpc,neon_fp32_qsnbp8x4_sf32_zpc
second_families=portable_int8_qsnbp8x8_sf16_zpc_bsum,portable_fp32_qsnbp8x8_sf32_zpc,portable_int8_qunbp8x4_sf32_zpb,portable_fp32_qunbp8x4_sf32_zpb
# The quick kernel subset (models outside AARCH64_FULL and QEMU11_FULL): the dispatch test (detection, the vector lengths,
# the families, a matmul through the selected family) and, of the kernel suite, the edge-case taxonomy (every kernel
# the model can run, on every layout it reads: what depends on the model is which kernels run) and the property
# test: ~21 s of the suite's ~250 s, test by test, under qemu 11.1 -cpu max on this 2-core machine (loaded); and the
# SME GEMMs' row tails, M = 1..16 (sme_gemms_every_row_count: ~20 s at SVL 512, nothing where no SME kernel runs),
# whose pass shapes follow the streaming vector length: on max,sve=off (256 bits) and Apple M4's shape (512) here, in
# the full suite on max; the other SME2 models repeat one of those lengths or have no few-row passes (16, 128 bytes).
QUICK_KERNEL_TESTS="every_kernel_edge_taxonomy random_shapes_match_reference"
QUICK_SME_TESTS="$QUICK_KERNEL_TESTS sme_gemms_every_row_count"
# a64fx (both qemus) runs the property test alone: its kernels (base NEON, SVE without i8mm, 512-bit vectors) are a
# subset of what qemu 11's max runs the whole suite on at the same vector length, and qemu emulates the a64fx model
# ~6x slower than max per unit of work (measured under qemu 11.1, CPU seconds: the taxonomy 114 s on a64fx against
# 20 s on max for more kernels; the property test 11 s against 7 s): the taxonomy there was 230 s of the command.
declare -A quick_tests=([a64fx]="random_shapes_match_reference" [max,sve=off]=$QUICK_SME_TESTS [$m4]=$QUICK_SME_TESTS)

# check_model QEMU LABEL CPU RUNGS FEATURES FAMILIES SUITE — the per-model checks under qemu binary QEMU (LABEL names
# it in the log): the kernel tests (SUITE full: all; quick: QUICK_KERNEL_TESTS) with detection and selection
# expected to be RUNGS, FEATURES and FAMILIES, nibble-info reporting the same, and the ORT session test. A SIGILL
# (a kernel the model cannot run) kills a test binary and fails here.
# cpu_seconds: sets CPU_S to the CPU time (user + system, whole seconds) of this shell's finished children so far:
# the per-model figure below, which unlike wall time does not depend on what else the machine runs. (Called
# directly, never in $(...): a subshell has its own children.)
cpu_seconds() {
    local f; f=$(mktemp)
    times > "$f"   # the second line: the children's user and system time, "1m2.345s 0m0.678s"
    CPU_S=$(awk 'NR == 2 { t = 0; for (i = 1; i <= 2; i++) { split($i, p, /[ms]/); t += p[1] * 60 + p[2] } printf "%.0f", t }' "$f")
    rm -f "$f"
}
check_model() {
    local qemu=$1 label=$2 cpu=$3 rungs=$4 feats=$5 fams=$6 suite=$7 t0=$SECONDS c0
    cpu_seconds; c0=$CPU_S
    echo "== aarch64 under $label -cpu $cpu: kernels ($suite suite; expect $rungs; $feats), then nibble in aarch64 ORT"
    local -a env=(env QEMU_A64="$qemu" QEMU_CPU="$cpu" NIBBLE_EXPECT_ISAS="$rungs" NIBBLE_EXPECT_CPU="$feats"
                  NIBBLE_EXPECT_FAMILIES="$fams")
    if [ "$suite" = full ]; then
        "${env[@]}" cargo test -q "${locked[@]}" --release -p nibble-kernels --target $target
    else
        "${env[@]}" cargo test -q "${locked[@]}" --release -p nibble-kernels --target $target --test dispatch
        # shellcheck disable=SC2086
        "${env[@]}" cargo test -q "${locked[@]}" --release -p nibble-kernels --target $target --test ukernels -- \
            ${quick_tests[$cpu]:-$QUICK_KERNEL_TESTS}
    fi
    # nibble-info on this model: its rungs, features, vector lengths and the family 4-bit block-32 weights get on
    # each path, as expected.
    "${env[@]}" scripts/aarch64/qemu-a64-run.sh "$bins/nibble-info" | sed -n '/^CPU features/,/^ISA rungs/p;/^selection/,$p'
    "${env[@]}" scripts/aarch64/qemu-a64-run.sh "$bins/nibble-info" --json |
        python3 -c '
import json, sys
info, rungs, feats = json.load(sys.stdin), sys.argv[1], sys.argv[2]
want = dict(x.split("=") for x in sys.argv[3].split(","))
got = {r["path"]: r["family"] for r in info["selection"] if r["bits"] == 4 and r["block_size"] == 32}
have = ",".join(info["rungs"])
cpu = "+".join(info["cpu_features"]) or "none"
cpu += "".join(f" ({k} {info[f]//8} B)" for k, f in (("sve vl", "sve_vl_bits"), ("sme svl", "sme_svl_bits")) if info[f])
assert (have, cpu, got) == (rungs, feats, want), f"nibble-info: {have}; {cpu}; {got}; expected {rungs}; {feats}; {want}"
' "$rungs" "$feats" "$fams"
    env QEMU_A64="$qemu" QEMU_CPU="$cpu" cargo test-session-aarch64 -q "${locked[@]}"
    # On SME2 the session test through the EP as well, which decides node by node: on the models with the whole
    # suite (a 256-bit streaming vector: nibble's SME2 family takes every node) and at a 1024-bit one ($svl128: the
    # family is not ranked there, so the EP leaves ORT's KleidiAI SME2 nodes to it, as the custom-op frontend above
    # leaves the whole com.microsoft domain). And on the former the SME2 int8 family with the NEON fp32 one forced
    # through ORT, as the second-ranked families are on the first model: every family proven through ORT, not only
    # in the kernel suite.
    if [[ "$feats" == *sme2* ]] && { [ "$suite" = full ] || [ "$cpu" = "$svl128" ]; }; then
        env QEMU_A64="$qemu" QEMU_CPU="$cpu" NIBBLE_FRONTEND=ep \
            cargo test-session-aarch64 -q "${locked[@]}"
    fi
    if [ "$suite" = full ] && [[ "$feats" == *sme2* ]]; then
        echo "== aarch64 under $label -cpu $cpu: nibble in aarch64 ORT with NIBBLE_FAMILIES=$sme2_families"
        env QEMU_A64="$qemu" QEMU_CPU="$cpu" NIBBLE_FAMILIES=$sme2_families \
            cargo test-session-aarch64 -q "${locked[@]}"
    fi
    cpu_seconds
    echo "== aarch64 under $label -cpu $cpu: passed ($suite suite: $((SECONDS - t0)) s, CPU $((CPU_S - c0)) s)"
}

first=1
for cpu in $cpus; do
    suite=quick
    [[ " $full72 " == *" $cpu "* ]] && suite=full
    check_model qemu-aarch64 "qemu $qver" "$cpu" "${expect[$cpu]}" "${features[$cpu]}" "${families[$cpu]}" $suite
    if [ $first = 1 ]; then
        echo "== aarch64 under qemu -cpu $cpu: nibble in aarch64 ORT with NIBBLE_FAMILIES=$second_families"
        QEMU_CPU=$cpu NIBBLE_FAMILIES=$second_families \
            cargo test-session-aarch64 -q "${locked[@]}"
        first=0
    fi
done
echo "aarch64: kernel and ORT integration tests passed on qemu $qver: $cpus"
phase "qemu 7.2 models done"
if [ -n "$cpus11" ]; then
    t11=$SECONDS
    q11=$(bash scripts/aarch64/fetch-qemu-testing.sh)   # prints its version on stderr, its path on stdout
    q11ver=$("$q11" --version | sed -n '1s/.*version \([0-9][0-9.]*\).*/\1/p')
    for cpu in $cpus11; do
        [ -n "${expect11[$cpu]:-}" ] || { echo "test-aarch64.sh: no qemu 11 expectations for -cpu $cpu" >&2; exit 1; }
        suite=quick
        [[ " $full11 " == *" $cpu "* ]] && suite=full
        check_model "$q11" "qemu $q11ver" "$cpu" "${expect11[$cpu]}" "${features11[$cpu]}" "${families11[$cpu]}" $suite
    done
    echo "aarch64: kernel and ORT integration tests passed on qemu $q11ver ($((SECONDS - t11)) s): $cpus11"
fi
phase "qemu 11 models done"
apps_rc=0
wait "$apps_pid" || apps_rc=$?
trap - EXIT
echo "== aarch64: the Python parity and Llama driver tests, run beside the model checks (log: ${apps_log#"$root"/})"
cat "$apps_log"
[ $apps_rc = 0 ] || { echo "test-aarch64.sh: the Python parity or Llama driver tests failed (exit $apps_rc)" >&2; exit "$apps_rc"; }
phase "all done"
