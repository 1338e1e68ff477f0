#!/usr/bin/env bash
# icount-matmul.sh — guest instructions per MatMulNBits Run under qemu-aarch64: nibble's kernels against ORT's own
# aarch64 path (KleidiAI where ORT 1.31 uses it: 4-bit, block 32..256, accuracy_level 4; MLAS NEON otherwise), in
# the same aarch64 ORT 1.31.1, one intra-op thread. Per Run = (count of 1 + R runs − count of 1 run) / R, so session
# creation, packing and start-up cancel out. Also counts SDOT / SMMLA instructions, which shows which kernel ran.
#
# Usage: scripts/aarch64/icount-matmul.sh [--cpus "max neoverse-n1 cortex-a72"] [--shapes "4096x4096"]
#            [--m "1 32"] [--bits 4] [--bs 32] [--zp none|uint8|float] [--acc 4] [--runs 2] [--out FILE.md]
# Prints a markdown table (also written to --out). Benchmarks never run in the tests.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
cpus="max neoverse-n1 cortex-a72"; shapes="4096x4096"; ms="1 32"; bits=4; bs=32; zp=none; acc=4; runs=2; out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --cpus) cpus=$2; shift 2 ;;
        --shapes) shapes=$2; shift 2 ;;
        --m) ms=$2; shift 2 ;;
        --bits) bits=$2; shift 2 ;;
        --bs) bs=$2; shift 2 ;;
        --zp) zp=$2; shift 2 ;;
        --acc) acc=$2; shift 2 ;;
        --runs) runs=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
        *) echo "icount-matmul: unknown argument $1" >&2; exit 2 ;;
    esac
done
export A64ENV=${A64ENV:-$root/.cache/a64env}
source scripts/aarch64/ort-aarch64.sh
bash scripts/aarch64/setup-aarch64.sh --no-ort --cpus "$cpus" >&2
fetch_ort_a64 >&2
rustup target list --installed | grep -qx aarch64-unknown-linux-gnu || rustup target add aarch64-unknown-linux-gnu
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
target=aarch64-unknown-linux-gnu
tdir=${CARGO_TARGET_DIR:-$root/target}
locked=(); [ -f Cargo.lock ] && locked=(--locked)
cargo build -q "${locked[@]}" --release -p nibble-ort --target $target --lib --example run_matmul >&2
lib=$tdir/$target/release/libnibble_ort.so
bin=$tdir/$target/release/examples/run_matmul
ort=$ORT_A64_LIB
[ -x .venv/bin/python ] || { echo "icount-matmul: needs .venv (scripts/setup.sh)" >&2; exit 2; }
mkdir -p "$tdir/icount"

# count CPU MODEL M RUNS [LIB]: "total sdot_idx sdot smmla" guest instructions of the whole process.
count() {
    local cpu=$1 model=$2 m=$3 n=$4 lib_arg=()
    [ $# -ge 5 ] && lib_arg=(--lib "$5")
    bash scripts/aarch64/aarch64-icount.sh -q -c "$cpu" -p enc=sdot_idx -p enc=sdot -p enc=smmla -- \
        "$bin" --ort-dylib "$ort" --model "$model" --m "$m" --runs "$n" "${lib_arg[@]}" 2>"$tdir/icount/last.err" \
        | awk '/^icount total/{t=$3} /^icount enc sdot_idx/{a=$4} /^icount enc sdot /{b=$4} /^icount enc smmla/{c=$4}
               END{print t, a+0, b+0, c+0}'
}
# per_run CPU MODEL M [LIB]: "instructions, SDOT(+by element), SMMLA" per Run.
per_run() {
    local one many
    one=($(count "$1" "$2" "$3" 1 "${@:4}"))
    many=($(count "$1" "$2" "$3" $((1 + runs)) "${@:4}"))
    echo $(((many[0] - one[0]) / runs)) $(((many[1] + many[2] - one[1] - one[2]) / runs)) $(((many[3] - one[3]) / runs))
}

# Columns beyond the counts: insns per weight byte (K·N·bits/8 bytes of codes per Run: how tight the loop over
# the weights is) and the MACs the SDOT / SMMLA instructions perform over the M·K·N the product needs (1.00: not
# one lane wasted; SDOT = 16 MACs, SMMLA = 32).
table="| CPU (qemu -cpu) | K x N | M | ORT insns/run | nibble insns/run | nibble / ORT | ORT SDOT, SMMLA | nibble SDOT, SMMLA | insns/weight byte ORT, nibble | dot MACs / needed ORT, nibble |
|---|---|---:|---:|---:|---:|---|---|---|---|"
echo "$table"
for cpu in $cpus; do
    for shape in $shapes; do
        K=${shape%x*}; N=${shape#*x}
        model=$tdir/icount/mm-${K}x${N}-b${bits}-bs${bs}-zp${zp}-acc${acc}.onnx
        [ -s "$model" ] || .venv/bin/python models/build_matmulnbits.py -K "$K" -N "$N" --bits "$bits" --block-size "$bs" \
            --zp "$zp" --accuracy-level "$acc" --domain com.microsoft -o "$model" >&2
        for m in $ms; do
            o=($(per_run "$cpu" "$model" "$m"))
            n=($(per_run "$cpu" "$model" "$m" "$lib"))
            ratio=$(awk -v a="${n[0]}" -v b="${o[0]}" 'BEGIN{printf "%.2f", a/b}')
            extra=$(awk -v o="${o[0]}" -v n="${n[0]}" -v os="${o[1]}" -v om="${o[2]}" -v ns="${n[1]}" -v nm="${n[2]}" \
                -v k="$K" -v nn="$N" -v m="$m" -v bits="$bits" 'BEGIN{
                    wb = k * nn * bits / 8; macs = m * k * nn
                    printf "%.2f, %.2f | %.2f, %.2f", o / wb, n / wb, (os * 16 + om * 32) / macs, (ns * 16 + nm * 32) / macs }')
            row="| $cpu | ${K}x${N} | $m | ${o[0]} | ${n[0]} | $ratio | ${o[1]}, ${o[2]} | ${n[1]}, ${n[2]} | $extra |"
            echo "$row"
            table+=$'\n'"$row"
        done
    done
done
[ -z "$out" ] || { printf '%s\n' "$table" > "$out"; echo "icount-matmul: wrote $out" >&2; }
