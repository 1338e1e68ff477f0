#!/usr/bin/env bash
# icount-llama.sh — guest instructions of one SmolLM2-135M decode step (one token) and of one 64-token prefill,
# under qemu-aarch64 with the TCG counting plugin: the Llama driver (examples/llama) cross-built for aarch64 in
# the aarch64 ONNX Runtime 1.31.1, once with ORT's built-in MatMulNBits and once with libnibble_ort.so (per
# --act numerics). Everything but the MatMulNBits nodes (attention, norms, the fp32 tied LM head, ORT's own code,
# sampling) is the same on both sides and dilutes the ratio: this is the end-to-end figure, not the kernel one
# (scripts/aarch64/icount-matmul.sh).
#
# Marked regions (nibble-llama --icount-marks, examples/llama/src/icount.rs): one process generates 1 + S tokens
# after the 64-token prompt and marks
#   prefill(64)  = slot 0: the prompt's graph run and the first token's sampling
#   decode step  = slot 1 / S: the S steps after the first token (each: one graph run, sampling, streaming)
# so session creation, weight packing and tokenizer loading (~10 G instructions per process) are outside both,
# and one process gives both figures. One intra-op thread, greedy sampling, ORT's telemetry off
# (aarch64-icount.sh: with it on, a telemetry thread's SQLite logging and timed upload attempts moved identical
# processes by tens of M instructions). Every figure is measured --repeat times (default 3, each in a process of
# its own); the table shows the median and the spread (max − min) / median, and the script exits 1 (after the
# table) if any spread is >= 1%. ORT's side does not depend on --act: it is counted once per CPU and model.
#
# Usage: scripts/aarch64/icount-llama.sh [--cpus "neoverse-n1 max,sve=off"] [--model q4|q4-sym] [--steps S]
#                                        [--act "block row"] [--repeat 3] [--out FILE.md]
# --act: nibble's int8 activation numerics, one or both (nibble-llama --activation-quant; a table row each).
#   q4      the demo model (scripts/convert-smollm2.sh: 4-bit asymmetric, block 32, accuracy_level 4; ORT: MLAS)
#   q4-sym  the same, symmetric (ORT: KleidiAI on dotprod/i8mm CPUs)
# `max` itself is left out by default: ORT's SVE fp32 kernels (attention, LM head) take ~10x longer under qemu.
# Needs scripts/setup.sh's .venv and SmolLM2 GGUF, and the aarch64 set-up (scripts/aarch64/setup-aarch64.sh).
set -euo pipefail
shopt -s inherit_errexit
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
cpus="neoverse-n1 max,sve=off"; which=q4; steps=16; out=""; repeat=3; act=block
while [ $# -gt 0 ]; do
    case "$1" in
        --cpus) cpus=$2; shift 2 ;;
        --model) which=$2; shift 2 ;;
        --steps) steps=$2; shift 2 ;;
        --act) act=$2; shift 2 ;;
        --repeat) repeat=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
        *) echo "icount-llama: unknown argument $1" >&2; exit 2 ;;
    esac
done
for a in $act; do
    case "$a" in block|row) ;; *) echo "icount-llama: --act takes block and/or row, not $a" >&2; exit 2 ;; esac
done
[[ $steps =~ ^[1-9][0-9]*$ ]] || { echo "icount-llama: --steps must be a positive integer, not $steps" >&2; exit 2; }
[[ $repeat =~ ^[1-9][0-9]*$ ]] || { echo "icount-llama: --repeat must be a positive integer, not $repeat" >&2; exit 2; }
export A64ENV=${A64ENV:-$root/.cache/a64env}
source scripts/aarch64/ort-aarch64.sh
bash scripts/aarch64/setup-aarch64.sh --no-ort --cpus "$cpus" >&2
fetch_ort_a64 >&2
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
target=aarch64-unknown-linux-gnu
tdir=${CARGO_TARGET_DIR:-$root/target}
locked=(); [ -f Cargo.lock ] && locked=(--locked)
case "$which" in
    q4) bash scripts/convert-smollm2.sh "$tdir/llama" >&2; model=$tdir/llama/smollm2-q4 ;;
    q4-sym) bash scripts/convert-smollm2.sh "$tdir/llama" smollm2-q4-sym --bits 4 --block-size 32 \
                --accuracy-level 4 --domain com.microsoft >&2
            model=$tdir/llama/smollm2-q4-sym ;;
    *) echo "icount-llama: --model is q4 or q4-sym, not $which" >&2; exit 2 ;;
esac
cargo build-release-aarch64 -q "${locked[@]}" >&2
bin=$tdir/$target/release/nibble-llama
lib=$tdir/$target/release/libnibble_ort.so
work=$tdir/icount/llama
mkdir -p "$work"

# A raw prompt of exactly 64 tokens (checked below against the driver's own count).
p64="The history of Paris begins with a Celtic tribe, the Parisii, who settled on an island in the Seine around the third century before our era. The Romans conquered the area in 52 BC and built a town called Lutetia on the left bank, with a forum, baths and an amphithe"

# count CPU SIDE: "prefill decode-step" instructions of one driver run (SIDE: ort | block | row).
count() {
    local cpu=$1 side=$2 extra=() name json err res new=$((1 + steps))
    if [ "$side" = ort ]; then extra=(--no-nibble); else extra=(--activation-quant "$side"); fi
    name=$which-$side-$(printf '%s' "$cpu" | tr ',=' '__')
    json=$work/$name.json err=$work/$name.err
    res=$(bash scripts/aarch64/aarch64-icount.sh -q -c "$cpu" -p inline=on -- "$bin" --model "$model" \
        --prompt "$p64" --raw --max-new-tokens "$new" --threads 1 --quiet --icount-marks --lib "$lib" \
        --ort-dylib "$ORT_A64_LIB" --json "$json" "${extra[@]}" 2>"$err") \
        || { cat "$err" >&2; echo "icount-llama: the $side run on $cpu failed" >&2; exit 1; }
    grep -qx 'icount marked regions 1' <<<"$res" && grep -qx 'icount marked1 regions 1' <<<"$res" \
        || { printf '%s\n' "$res" >&2; echo "icount-llama: the $side run on $cpu marked no prefill and decode" >&2; exit 1; }
    # The prompt must be 64 tokens for this tokenizer, and generation must not stop early (end of text).
    local got
    got=$(.venv/bin/python -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["prompt_tokens"], d["generated_tokens"])' "$json") \
        || { echo "icount-llama: cannot read $json" >&2; exit 1; }
    [ "${got% *}" = 64 ] || { echo "icount-llama: the 64-token prompt is ${got% *} tokens for this tokenizer" >&2; exit 1; }
    [ "${got#* }" = "$new" ] || { echo "icount-llama: $side on $cpu generated ${got#* } tokens, not $new" >&2; exit 1; }
    echo "$(awk '$2 == "marked" && $3 == "total" {print $4}' <<<"$res") $(( $(awk '$2 == "marked1" && $3 == "total" {print $4}' <<<"$res") / steps ))"
}

# median_spread N...: "median spread%" of the numbers (spread = (max − min) / median).
median_spread() {
    printf '%s\n' "$@" | sort -n | awk '{ x[NR] = $1 } END { m = x[int((NR + 1) / 2)]
        printf "%s %.3f\n", m, m ? (x[NR] - x[1]) * 100 / m : 0 }'
}

table="| CPU (qemu -cpu) | model | nibble numerics | ORT decode step | nibble decode step | nibble / ORT | ORT prefill 64 | nibble prefill 64 | nibble / ORT | spread of $repeat ORT, nibble (decode; prefill) |
|---|---|---|---:|---:|---:|---:|---:|---:|---|"
echo "$table"
over=()   # "what spread" of each figure whose spread is >= 1%
for cpu in $cpus; do
    declare -A d=() p=() ds=() ps=()
    for side in ort $act; do
        dl=(); pl=()
        for ((i = 0; i < repeat; i++)); do
            r=($(count "$cpu" "$side")); pl+=("${r[0]}"); dl+=("${r[1]}")
            echo "icount-llama: $cpu $which $side: prefill 64 ${pl[-1]}, decode step ${dl[-1]}" >&2
        done
        r=($(median_spread "${dl[@]}")); d[$side]=${r[0]}; ds[$side]=${r[1]}
        r=($(median_spread "${pl[@]}")); p[$side]=${r[0]}; ps[$side]=${r[1]}
        for f in "decode ${ds[$side]}" "prefill ${ps[$side]}"; do
            awk -v s="${f#* }" 'BEGIN{exit !(s >= 1)}' && over+=("$cpu $side ${f% *} ${f#* }%")
        done
    done
    for a in $act; do
        # Counts printed by bash (awk's %d stops at 2^31 in mawk), ratios by awk.
        ratios=($(awk -v od="${d[ort]}" -v nd="${d[$a]}" -v op="${p[ort]}" -v np="${p[$a]}" \
            'BEGIN{printf "%.3f %.3f", nd / od, np / op}'))
        row="| $cpu | smollm2-$which | $a | ${d[ort]} | ${d[$a]} | ${ratios[0]} | ${p[ort]} | ${p[$a]} | ${ratios[1]} | ${ds[ort]}%, ${ds[$a]}%; ${ps[ort]}%, ${ps[$a]}% |"
        echo "$row"
        table+=$'\n'"$row"
    done
done
[ -z "$out" ] || { printf '%s\n' "$table" > "$out"; echo "icount-llama: wrote $out" >&2; }
if [ ${#over[@]} -gt 0 ]; then
    printf 'icount-llama: FAILED: spread >= 1%% over %s measurements: %s\n' "$repeat" "$(IFS=';'; echo "${over[*]}")" >&2
    exit 1
fi
