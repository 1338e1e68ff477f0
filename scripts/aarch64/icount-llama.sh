#!/usr/bin/env bash
# icount-llama.sh — guest instructions of one SmolLM2-135M decode step (one token) and of one 64-token prefill,
# under qemu-aarch64 with the TCG counting plugin: the Llama driver (examples/llama) cross-built for aarch64 in
# the aarch64 ONNX Runtime 1.31.1, once with ORT's built-in MatMulNBits and once with libnibble_ort.so. The whole
# process is counted, so everything but the MatMulNBits nodes (attention, norms, the fp32 tied LM head, ORT's own
# code) is the same on both sides and dilutes the ratio: this is the end-to-end figure, not the kernel one
# (scripts/aarch64/icount-matmul.sh).
#
#   decode step  = [count(64-token prompt, 1 + S new tokens) − count(64-token prompt, 1 new token)] / S
#   prefill(64)  = count(64-token prompt, 1 new token) − count(1-token prompt, 1 new token) + decode step
#                  (a 1-token prefill is a decode step)
# Session creation, weight packing and tokenizer loading cancel out (~15 G instructions per process), so one
# decode step (~60 M) is measured over S = 16 steps. One intra-op thread, greedy sampling, ORT's telemetry off
# (aarch64-icount.sh: with it on, a telemetry thread's SQLite logging and timed upload attempts moved identical
# processes by tens of M instructions). Every figure is measured --repeat times (default 3: each of its process
# counts taken anew); the table shows the median and the spread (max − min) / median, and the script exits 1
# (after the table) if any spread is >= 1%.
#
# Usage: scripts/aarch64/icount-llama.sh [--cpus "neoverse-n1 max,sve=off"] [--model q4|q4-sym] [--steps S]
#                                        [--act block|row] [--repeat 3] [--out FILE.md]
# --act: nibble's int8 activation numerics (nibble-llama --activation-quant; ORT's side is unchanged).
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
case "$act" in block|row) ;; *) echo "icount-llama: --act is block or row, not $act" >&2; exit 2 ;; esac
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

# A raw prompt of exactly 64 tokens (checked below against the driver's own count), and a 1-token one.
p64="The history of Paris begins with a Celtic tribe, the Parisii, who settled on an island in the Seine around the third century before our era. The Romans conquered the area in 52 BC and built a town called Lutetia on the left bank, with a forum, baths and an amphithe"
p1="Paris"

# count CPU SIDE PROMPT NEW: total guest instructions of one driver run (SIDE: ort | nibble).
count() {
    local cpu=$1 side=$2 prompt=$3 new=$4 extra=() json
    if [ "$side" = ort ]; then extra=(--no-nibble); else extra=(--activation-quant "$act"); fi
    json=$work/$act-$side-$(printf '%s' "$cpu" | tr ',=' '__')-$new-${#prompt}.json
    bash scripts/aarch64/aarch64-icount.sh -q -c "$cpu" -- "$bin" --model "$model" --prompt "$prompt" --raw \
        --max-new-tokens "$new" --threads 1 --quiet --lib "$lib" --ort-dylib "$ORT_A64_LIB" --json "$json" \
        "${extra[@]}" 2>"$work/last.err" | awk '/^icount total/{print $3}' | grep . \
        || { cat "$work/last.err" >&2; echo "icount-llama: the $side run on $cpu failed" >&2; exit 1; }
    # The prompts must be 64 and 1 tokens for this tokenizer, and generation must not stop early (end of text).
    local got want=1
    got=$(.venv/bin/python -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["prompt_tokens"], d["generated_tokens"])' "$json") \
        || { echo "icount-llama: cannot read $json" >&2; exit 1; }
    [ "$prompt" = "$p64" ] && want=64
    [ "${got% *}" = "$want" ] \
        || { echo "icount-llama: the $want-token prompt is ${got% *} tokens for this tokenizer" >&2; exit 1; }
    [ "${got#* }" = "$new" ] || { echo "icount-llama: $side on $cpu generated ${got#* } tokens, not $new" >&2; exit 1; }
}

# median_spread N...: "median spread%" of the numbers (spread = (max − min) / median).
median_spread() {
    printf '%s\n' "$@" | sort -n | awk '{ x[NR] = $1 } END { m = x[int((NR + 1) / 2)]
        printf "%s %.3f\n", m, m ? (x[NR] - x[1]) * 100 / m : 0 }'
}

table="| CPU (qemu -cpu) | model | ORT decode step | nibble decode step | nibble / ORT | ORT prefill 64 | nibble prefill 64 | nibble / ORT | spread of $repeat ORT, nibble (decode; prefill) |
|---|---|---:|---:|---:|---:|---:|---:|---|"
echo "$table"
over=()   # "what spread" of each figure whose spread is >= 1%
for cpu in $cpus; do
    declare -A d=() p=() ds=() ps=()
    for side in ort nibble; do
        dl=(); pl=()
        for ((i = 0; i < repeat; i++)); do
            a=$(count "$cpu" $side "$p64" 1); b=$(count "$cpu" $side "$p64" $((1 + steps)))
            c=$(count "$cpu" $side "$p1" 1)
            dl+=($(((b - a) / steps))); pl+=($((a - c + (b - a) / steps)))
            echo "icount-llama: $cpu $side: decode step ${dl[-1]}, prefill 64 ${pl[-1]} (process counts $a $b $c)" >&2
        done
        r=($(median_spread "${dl[@]}")); d[$side]=${r[0]}; ds[$side]=${r[1]}
        r=($(median_spread "${pl[@]}")); p[$side]=${r[0]}; ps[$side]=${r[1]}
        for f in "decode ${ds[$side]}" "prefill ${ps[$side]}"; do
            awk -v s="${f#* }" 'BEGIN{exit !(s >= 1)}' && over+=("$cpu $side ${f% *} ${f#* }%")
        done
    done
    # Counts printed by bash (awk's %d stops at 2^31 in mawk), ratios by awk.
    ratios=($(awk -v od="${d[ort]}" -v nd="${d[nibble]}" -v op="${p[ort]}" -v np="${p[nibble]}" \
        'BEGIN{printf "%.2f %.2f", nd / od, np / op}'))
    row="| $cpu | smollm2-$which | ${d[ort]} | ${d[nibble]} | ${ratios[0]} | ${p[ort]} | ${p[nibble]} | ${ratios[1]} | ${ds[ort]}%, ${ds[nibble]}%; ${ps[ort]}%, ${ps[nibble]}% |"
    echo "$row"
    table+=$'\n'"$row"
done
[ -z "$out" ] || { printf '%s\n' "$table" > "$out"; echo "icount-llama: wrote $out" >&2; }
if [ ${#over[@]} -gt 0 ]; then
    printf 'icount-llama: FAILED: spread >= 1%% over %s measurements: %s\n' "$repeat" "$(IFS=';'; echo "${over[*]}")" >&2
    exit 1
fi
