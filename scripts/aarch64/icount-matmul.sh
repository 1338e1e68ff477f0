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
#            [--qemu 7|11] [--families "FAMILY ..."]
# --act: nibble's int8 activation numerics (session config nibble.activation_quant; ORT's side is unchanged).
# --qemu 11: count under Debian testing's qemu 11 ($Q11, else scripts/aarch64/fetch-qemu-testing.sh), which has SVE2,
#   SME2 (-cpu max) and the newer CPU models but no plugins: aarch64-icount.sh --qemu 11 counts qemu's exec log
#   (-d nochain,exec,in_asm,strace: one "Trace" line per executed translation block, whose length in_asm gave) and
#   finds the marks in its strace lines; far slower than the plugin. Adds a column with the SVE SDOT, SVE SMMLA and SMOPA counts. Its
#   marked counts agree with the plugin's (qemu 7.2) on the same CPU model: bench/results/aarch64-icount-sme2.md.
#   --qemu 7 (default): the plugin under the system's qemu 7.2.
# --families: one nibble row per family, forced with NIBBLE_FAMILIES (which also makes nibble take com.microsoft
#   nodes its provider leaves to ORT, e.g. the KleidiAI nodes on SME2 CPUs, kernels/src/versus_ort.rs); ORT is
#   counted once per shape and M. E.g. "sve_i8mm_int8_qsnbp8x8_sf16_zpc i8mm_int8_qsnbp8x8_sf16_zpc" (SVE i8mm, NEON i8mm).
# Prints a markdown table (also written to --out); each count goes to stderr as it is taken. Benchmarks never run
# in the tests.
set -euo pipefail
shopt -s inherit_errexit
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
cpus="max neoverse-n1 cortex-a72"; shapes="4096x4096"; ms="1 32"; bits=4; bs=32; zp=none; acc=4; runs=2; out=""
repeat=3; method=marked; act=block; qemu_major=7; families=""
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
        --qemu) qemu_major=$2; shift 2 ;;
        --families) families=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
        *) echo "icount-matmul: unknown argument $1" >&2; exit 2 ;;
    esac
done
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "icount-matmul: --runs must be a positive integer, not $runs" >&2; exit 2; }
[[ $repeat =~ ^[1-9][0-9]*$ ]] || { echo "icount-matmul: --repeat must be a positive integer, not $repeat" >&2; exit 2; }
case "$act" in block|row) ;; *) echo "icount-matmul: --act is block or row" >&2; exit 2 ;; esac
case "$method" in marked|difference) ;; *) echo "icount-matmul: --method is marked or difference" >&2; exit 2 ;; esac
case "$qemu_major" in 7|11) ;; *) echo "icount-matmul: --qemu is 7 or 11" >&2; exit 2 ;; esac
export A64ENV=${A64ENV:-$root/.cache/a64env}
source scripts/aarch64/ort-aarch64.sh
if [ "$qemu_major" = 11 ]; then
    export Q11=${Q11:-$(bash scripts/aarch64/fetch-qemu-testing.sh --print-path)}
    QEMU_A64=$Q11 bash scripts/aarch64/setup-aarch64.sh --no-ort --no-icount --cpus "$cpus" >&2
else
    bash scripts/aarch64/setup-aarch64.sh --no-ort --cpus "$cpus" >&2
fi
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
errf=$tdir/icount/last.$$.err   # one per process: counts may run side by side

# count CPU MODEL M RUNS [LIB [FAMILY]]: "total sdot_idx sdot smmla sve_sdot sve_sdot_idx sve_smmla smopa" guest
# instructions, whole process (difference) or inside the marked Runs (marked; exactly one region required).
encs=(-p enc=sdot_idx -p enc=sdot -p enc=smmla)
[ "$qemu_major" = 11 ] && encs+=(-p enc=sve_sdot -p enc=sve_sdot_idx -p enc=sve_smmla -p enc=smopa)
count() {
    local cpu=$1 model=$2 m=$3 n=$4 lib_arg=() fam_env=() res
    [ $# -ge 5 ] && lib_arg=(--lib "$5" --config "nibble.activation_quant=$act")
    [ -n "${6:-}" ] && fam_env=("NIBBLE_FAMILIES=$6")
    res=$(env "${fam_env[@]}" bash scripts/aarch64/aarch64-icount.sh --qemu "$qemu_major" -q -c "$cpu" "${encs[@]}" -- \
        "$bin" --ort-dylib "$ort" --model "$model" --m "$m" --runs "$n" "${lib_arg[@]}" 2>"$errf") \
        || { cat "$errf" >&2; echo "icount-matmul: run_matmul failed ($cpu, $model, M=$m)" >&2; exit 1; }
    grep '^qemu-exec-count:' "$errf" >&2 || true
    # ORT's decision lines (which kernels nibble took or left) stay visible
    grep -i 'nibble' "$errf" | grep -v '^qemu-exec-count:' | head -3 >&2 || true
    if [ "$method" = marked ]; then
        grep -qx 'icount marked regions 1' <<<"$res" \
            || { echo "icount-matmul: no single marked region in the count ($cpu, $model, M=$m)" >&2; exit 1; }
        res=$(sed -n 's/^icount marked /icount /p' <<<"$res")
    fi
    awk '/^icount total/{t=$3} /^icount enc sdot_idx/{a=$4} /^icount enc sdot /{b=$4} /^icount enc smmla/{c=$4}
         /^icount enc sve_sdot /{d=$4} /^icount enc sve_sdot_idx/{e=$4} /^icount enc sve_smmla/{f=$4}
         /^icount enc smopa/{g=$4} END{print t, a+0, b+0, c+0, d+0, e+0, f+0, g+0}' <<<"$res"
}
# per_run_once CPU MODEL M [LIB [FAMILY]]: "instructions, SDOT(+by element), SMMLA, SVE SDOT(+by element),
# SVE SMMLA, SMOPA" per Run, one measurement.
per_run_once() {
    local one many
    if [ "$method" = marked ]; then
        many=($(count "$1" "$2" "$3" $((1 + runs)) "${@:4}"))
        one=(0 0 0 0 0 0 0 0)
    else
        one=($(count "$1" "$2" "$3" 1 "${@:4}"))
        many=($(count "$1" "$2" "$3" $((1 + runs)) "${@:4}"))
    fi
    echo $(((many[0] - one[0]) / runs)) $(((many[1] + many[2] - one[1] - one[2]) / runs)) $(((many[3] - one[3]) / runs)) \
        $(((many[4] + many[5] - one[4] - one[5]) / runs)) $(((many[6] - one[6]) / runs)) $(((many[7] - one[7]) / runs))
}
# per_run CPU MODEL M [LIB [FAMILY]]: the median of --repeat measurements (by instructions; its dot-instruction
# counts with it), then the spread (max − min) / median in percent, then the SVE SDOT, SVE SMMLA and SMOPA counts.
# Each measurement is logged to stderr.
per_run() {
    local i samples=() s side=ORT
    [ $# -ge 4 ] && side="nibble${5:+ $5}"
    for ((i = 0; i < repeat; i++)); do
        s=$(per_run_once "$@")
        echo "icount-matmul: $1 $(basename "$2") M=$3 $side: ${s%% *} insns/run (all: $s)" >&2
        samples+=("$s")
    done
    printf '%s\n' "${samples[@]}" | sort -n -k1,1 | awk '{ v[NR] = $0; x[NR] = $1 }
        END { split(v[int((NR + 1) / 2)], med, " ")
              printf "%s %s %s %.3f %s %s %s\n", med[1], med[2], med[3], med[1] ? (x[NR] - x[1]) * 100 / med[1] : 0,
                  med[4], med[5], med[6] }'
}
famlist=($families); [ ${#famlist[@]} -gt 0 ] || famlist=("")
over=()   # "what spread" of each figure whose spread is >= 1%
# Columns beyond the counts: insns per weight byte (K·N·bits/8 bytes of codes per Run: how tight the loop over
# the weights is) and the MACs the SDOT / SMMLA instructions perform over the M·K·N the product needs (1.00: not
# one lane wasted; SDOT = 16 MACs, SMMLA = 32).
# Under --qemu 11 also the SVE / SME dot instructions (their MACs depend on the vector length: not in the MAC
# column, which counts NEON SDOT / SMMLA only), and with --families the nibble family of the row.
famcol=""; famsep=""; svecol=""; svesep=""
[ -n "$families" ] && { famcol=" nibble family |"; famsep="---|"; }
[ "$qemu_major" = 11 ] && { svecol=" SVE SDOT, SVE SMMLA, SMOPA: ORT; nibble |"; svesep="---|"; }
table="| CPU (qemu -cpu) | K x N | M |$famcol ORT insns/run | nibble insns/run | nibble / ORT | ORT SDOT, SMMLA | nibble SDOT, SMMLA | insns/weight byte ORT, nibble | dot MACs / needed ORT, nibble |$svecol spread of $repeat ORT, nibble |
|---|---|---:|$famsep---:|---:|---:|---|---|---|---|$svesep---|"
echo "$table"
for cpu in $cpus; do
    for shape in $shapes; do
        K=${shape%x*}; N=${shape#*x}
        model=$tdir/icount/mm-${K}x${N}-b${bits}-bs${bs}-zp${zp}-acc${acc}.onnx
        [ -s "$model" ] || .venv/bin/python models/build_matmulnbits.py -K "$K" -N "$N" --bits "$bits" --block-size "$bs" \
            --zp "$zp" --accuracy-level "$acc" --domain com.microsoft -o "$model" >&2
        for m in $ms; do
            o=($(per_run "$cpu" "$model" "$m"))
            for fam in "${famlist[@]}"; do
            n=($(per_run "$cpu" "$model" "$m" "$lib" "$fam"))
            ratio=$(awk -v a="${n[0]}" -v b="${o[0]}" 'BEGIN{printf "%.2f", a/b}')
            extra=$(awk -v o="${o[0]}" -v n="${n[0]}" -v os="${o[1]}" -v om="${o[2]}" -v ns="${n[1]}" -v nm="${n[2]}" \
                -v k="$K" -v nn="$N" -v m="$m" -v bits="$bits" 'BEGIN{
                    wb = k * nn * bits / 8; macs = m * k * nn
                    printf "%.2f, %.2f | %.2f, %.2f", o / wb, n / wb, (os * 16 + om * 32) / macs, (ns * 16 + nm * 32) / macs }')
            famcell=""; svecell=""
            [ -n "$families" ] && famcell=" $fam |"
            [ "$qemu_major" = 11 ] && svecell=" ${o[4]}, ${o[5]}, ${o[6]}; ${n[4]}, ${n[5]}, ${n[6]} |"
            row="| $cpu | ${K}x${N} | $m |$famcell ${o[0]} | ${n[0]} | $ratio | ${o[1]}, ${o[2]} | ${n[1]}, ${n[2]} | $extra |$svecell ${o[3]}%, ${n[3]}% |"
            awk -v s="${o[3]}" 'BEGIN{exit !(s >= 1)}' && over+=("$cpu ${K}x${N} M=$m ORT ${o[3]}%")
            awk -v s="${n[3]}" 'BEGIN{exit !(s >= 1)}' && over+=("$cpu ${K}x${N} M=$m nibble${fam:+ $fam} ${n[3]}%")
            echo "$row"
            table+=$'\n'"$row"
            done
        done
    done
done
[ -z "$out" ] || { printf '%s\n' "$table" > "$out"; echo "icount-matmul: wrote $out" >&2; }
if [ ${#over[@]} -gt 0 ]; then
    printf 'icount-matmul: FAILED: spread >= 1%% over %s counts: %s\n' "$repeat" "$(IFS=';'; echo "${over[*]}")" >&2
    exit 1
fi
