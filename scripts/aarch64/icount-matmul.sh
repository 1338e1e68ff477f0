#!/usr/bin/env bash
# icount-matmul.sh — guest instructions per MatMulNBits Run under qemu-aarch64: nibble's kernels against ORT's own
# aarch64 path (KleidiAI where ORT 1.31 uses it: 4-bit, block 32..256, accuracy_level 4; MLAS NEON otherwise), in
# the same aarch64 ORT 1.31.1, one intra-op thread (no spinning), ORT's telemetry off (aarch64-icount.sh). Also
# counts SDOT / SMMLA instructions, which shows which kernel ran.
#
# Per Run (--method marked, the default): one process runs 1 + R Runs and marks Runs 2 ..= 1 + R for the counting
# plugin (provider/examples/run_matmul.rs); per Run = instructions between the marks / R. Session creation, weight
# packing, the first Run's one-time work and process exit are outside the marks, so they cannot move the figure.
# --method difference: the former way, whole-process totals, per Run = (count of 1 + R Runs − count of 1 Run) / R.
# Every figure is counted --repeat times (default 3, separate processes); the table shows the median and the spread
# (max − min) / median of each side, and the script exits 1 (after the table) if any spread is >= 1%.
#
# Usage: scripts/aarch64/icount-matmul.sh [--cpus "max neoverse-n1 cortex-a72"] [--shapes "4096x4096"]
#            [--m "1 32"] [--bits 4] [--bs 32] [--zp none|uint8|float] [--acc 4] [--act block|row] [--runs 2]
#            [--repeat 3] [--method marked|difference] [--out FILE.md]
# --act: nibble's int8 activation numerics (session config nibble.activation_quant; ORT's side is unchanged).
# Prints a markdown table (also written to --out); each count goes to stderr as it is taken. Benchmarks never run
# in the tests.
set -euo pipefail
shopt -s inherit_errexit
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
cpus="max neoverse-n1 cortex-a72"; shapes="4096x4096"; ms="1 32"; bits=4; bs=32; zp=none; acc=4; runs=2; out=""
repeat=3; method=marked; act=block
while [ $# -gt 0 ]; do
    case "$1" in
        --cpus) cpus=$2; shift 2 ;;
        --shapes) shapes=$2; shift 2 ;;
        --m) ms=$2; shift 2 ;;
        --bits) bits=$2; shift 2 ;;
        --bs) bs=$2; shift 2 ;;
        --zp) zp=$2; shift 2 ;;
        --acc) acc=$2; shift 2 ;;
        --act) act=$2; shift 2 ;;
        --runs) runs=$2; shift 2 ;;
        --repeat) repeat=$2; shift 2 ;;
        --method) method=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
        *) echo "icount-matmul: unknown argument $1" >&2; exit 2 ;;
    esac
done
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "icount-matmul: --runs must be a positive integer, not $runs" >&2; exit 2; }
[[ $repeat =~ ^[1-9][0-9]*$ ]] || { echo "icount-matmul: --repeat must be a positive integer, not $repeat" >&2; exit 2; }
case "$act" in block|row) ;; *) echo "icount-matmul: --act is block or row" >&2; exit 2 ;; esac
case "$method" in marked|difference) ;; *) echo "icount-matmul: --method is marked or difference" >&2; exit 2 ;; esac
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

# count CPU MODEL M RUNS [LIB]: "total sdot_idx sdot smmla" guest instructions, whole process (difference) or
# inside the marked Runs (marked; exactly one region required).
count() {
    local cpu=$1 model=$2 m=$3 n=$4 lib_arg=() res
    [ $# -ge 5 ] && lib_arg=(--lib "$5" --config "nibble.activation_quant=$act")
    res=$(bash scripts/aarch64/aarch64-icount.sh -q -c "$cpu" -p enc=sdot_idx -p enc=sdot -p enc=smmla -- \
        "$bin" --ort-dylib "$ort" --model "$model" --m "$m" --runs "$n" "${lib_arg[@]}" 2>"$tdir/icount/last.err") \
        || { cat "$tdir/icount/last.err" >&2; echo "icount-matmul: run_matmul failed ($cpu, $model, M=$m)" >&2; exit 1; }
    if [ "$method" = marked ]; then
        grep -qx 'icount marked regions 1' <<<"$res" \
            || { echo "icount-matmul: no single marked region in the count ($cpu, $model, M=$m)" >&2; exit 1; }
        res=$(sed -n 's/^icount marked /icount /p' <<<"$res")
    fi
    awk '/^icount total/{t=$3} /^icount enc sdot_idx/{a=$4} /^icount enc sdot /{b=$4} /^icount enc smmla/{c=$4}
         END{print t, a+0, b+0, c+0}' <<<"$res"
}
# per_run_once CPU MODEL M [LIB]: "instructions, SDOT(+by element), SMMLA" per Run, one measurement.
per_run_once() {
    local one many
    if [ "$method" = marked ]; then
        many=($(count "$1" "$2" "$3" $((1 + runs)) "${@:4}"))
        one=(0 0 0 0)
    else
        one=($(count "$1" "$2" "$3" 1 "${@:4}"))
        many=($(count "$1" "$2" "$3" $((1 + runs)) "${@:4}"))
    fi
    echo $(((many[0] - one[0]) / runs)) $(((many[1] + many[2] - one[1] - one[2]) / runs)) $(((many[3] - one[3]) / runs))
}
# per_run CPU MODEL M [LIB]: the median of --repeat measurements (by instructions; its SDOT/SMMLA counts with it),
# then the spread (max − min) / median in percent. Each measurement is logged to stderr.
per_run() {
    local i samples=() s side=ORT
    [ $# -ge 4 ] && side=nibble
    for ((i = 0; i < repeat; i++)); do
        s=$(per_run_once "$@")
        echo "icount-matmul: $1 $(basename "$2") M=$3 $side: ${s%% *} insns/run" >&2
        samples+=("$s")
    done
    printf '%s\n' "${samples[@]}" | sort -n -k1,1 | awk '{ v[NR] = $0; x[NR] = $1 }
        END { split(v[int((NR + 1) / 2)], med, " ")
              printf "%s %s %s %.3f\n", med[1], med[2], med[3], med[1] ? (x[NR] - x[1]) * 100 / med[1] : 0 }'
}
over=()   # "what spread" of each figure whose spread is >= 1%
# Columns beyond the counts: insns per weight byte (K·N·bits/8 bytes of codes per Run: how tight the loop over
# the weights is) and the MACs the SDOT / SMMLA instructions perform over the M·K·N the product needs (1.00: not
# one lane wasted; SDOT = 16 MACs, SMMLA = 32).
table="| CPU (qemu -cpu) | K x N | M | ORT insns/run | nibble insns/run | nibble / ORT | ORT SDOT, SMMLA | nibble SDOT, SMMLA | insns/weight byte ORT, nibble | dot MACs / needed ORT, nibble | spread of $repeat ORT, nibble |
|---|---|---:|---:|---:|---:|---|---|---|---|---|"
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
            row="| $cpu | ${K}x${N} | $m | ${o[0]} | ${n[0]} | $ratio | ${o[1]}, ${o[2]} | ${n[1]}, ${n[2]} | $extra | ${o[3]}%, ${n[3]}% |"
            awk -v s="${o[3]}" 'BEGIN{exit !(s >= 1)}' && over+=("$cpu ${K}x${N} M=$m ORT ${o[3]}%")
            awk -v s="${n[3]}" 'BEGIN{exit !(s >= 1)}' && over+=("$cpu ${K}x${N} M=$m nibble ${n[3]}%")
            echo "$row"
            table+=$'\n'"$row"
        done
    done
done
[ -z "$out" ] || { printf '%s\n' "$table" > "$out"; echo "icount-matmul: wrote $out" >&2; }
if [ ${#over[@]} -gt 0 ]; then
    printf 'icount-matmul: FAILED: spread >= 1%% over %s counts: %s\n' "$repeat" "$(IFS=';'; echo "${over[*]}")" >&2
    exit 1
fi
