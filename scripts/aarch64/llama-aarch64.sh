#!/usr/bin/env bash
# llama-aarch64.sh — the Llama driver (examples/llama) cross-built for aarch64 and run under qemu-user with the
# aarch64 ONNX Runtime 1.31.1 and the aarch64 libnibble_ort.so: N greedy tokens of SmolLM2-135M q4 at
# accuracy_level 1 on each CPU model, which must be identical to ORT's built-in op and to nibble on x86 (both
# frontends there; under qemu the CPU models alternate between the execution provider and the custom-op library). (ORT's own
# aarch64 fp32 path under qemu takes over 5 minutes for this, so ORT's tokens come from x86.) Called by scripts/test-aarch64.sh (after its setup); standalone it needs the same environment
# (A64ENV with the aarch64 ORT, the cross linker) and scripts/setup.sh's .venv + SmolLM2 GGUF.
# Also under Debian testing's qemu 11 (scripts/aarch64/fetch-qemu-testing.sh) on max (SVE2 + SME2) and
# neoverse-v1 (SVE 256 + i8mm), CPU models qemu 7.2 lacks.
# Env: LLAMA_CPUS (qemu 7.2 models, default "max,sve=off"), LLAMA_CPUS_QEMU11 (default
# "max neoverse-v1"; "none" for none), LLAMA_TOKENS (default 16).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
export A64ENV=${A64ENV:-$root/.cache/a64env}
# The model's MatMulNBits nodes run the fp32 path (accuracy_level 1), whose family is neon_fp32_qsnbp8x4_sf32_zpc
# on every model below 256-bit SVE, sve_fp32_qsnbp8x4_sf32_zpc at 256 bits and more (neoverse-v1 here) and
# sme2_fp32_qsnbp8x4_sf32_zpc at a 256- or 512-bit streaming vector (qemu 11's max: 256): their GEMM sums are the NEON GEMM's bit
# for bit (unit tests check it), so the tokens are x86 ORT's; the kernel suites test
# both on each model that runs them. One qemu 7.2 model (NEON i8mm) and the two
# qemu 11 models whose features differ most (SME2, SVE 256) run the whole driver.
cpus=${LLAMA_CPUS:-"max,sve=off"}
cpus11=${LLAMA_CPUS_QEMU11:-"max neoverse-v1"}
[ "$cpus11" = none ] && cpus11=""
tokens=${LLAMA_TOKENS:-16}
tdir=${CARGO_TARGET_DIR:-$root/target}
target=aarch64-unknown-linux-gnu
source scripts/aarch64/ort-aarch64.sh
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
locked=(); [ -f Cargo.lock ] && locked=(--locked)

# The model: SmolLM2 q4, block 32, asymmetric, accuracy_level 1 (fp32-accurate: identical tokens are expected).
model=$tdir/llama/smollm2-q4-acc1
bash scripts/convert-smollm2.sh "$tdir/llama" smollm2-q4-acc1 --bits 4 --block-size 32 --asymmetric \
    --accuracy-level 1 --domain com.microsoft

# The package selections every script builds (.cargo/config.toml: another one would recompile the library, ~100 s).
cargo build-release -q "${locked[@]}"
cargo build-release-aarch64 -q "${locked[@]}"
x86_ort=$root/.cache/ort/1.31.1/libonnxruntime.so.1.31.1
a64_ort=$ORT_A64_LIB
out=$tdir/llama-aarch64
mkdir -p "$out"
# A raw prompt (no chat template): few prompt tokens, since under qemu every float operation is emulated.
prompt="The history of Paris begins"
common=(--model "$model" --max-new-tokens "$tokens" --prompt "$prompt" --raw --threads 1 --quiet)

ids() { .venv/bin/python -c 'import json,sys; print(" ".join(map(str, json.load(open(sys.argv[1]))["generated_token_ids"])))' "$1"; }

echo "== x86: ORT's built-in op and nibble"
"$tdir/release/nibble-llama" "${common[@]}" --lib "$tdir/release/libnibble_ort.so" --ort-dylib "$x86_ort" \
    --no-nibble --json "$out/x86-ort.json" >/dev/null
want=$(ids "$out/x86-ort.json")
echo "x86 ORT:    $want"
for fe in ep custom-op; do
    "$tdir/release/nibble-llama" "${common[@]}" --lib "$tdir/release/libnibble_ort.so" --ort-dylib "$x86_ort" \
        --frontend $fe --json "$out/x86-nibble-$fe.json" >/dev/null
    echo "x86 nibble ($fe): $(ids "$out/x86-nibble-$fe.json")"
    [ "$(ids "$out/x86-nibble-$fe.json")" = "$want" ] || { echo "FAIL: nibble ($fe) on x86 differs from ORT" >&2; exit 1; }
done

# The runs: "qemu version, qemu binary, CPU model" each. They alternate between the two frontends (the first as an
# execution provider, the second as a custom-op library, ...): both are proven on aarch64 without doubling the
# minutes under qemu.
runs=()
for cpu in $cpus; do runs+=("7.2|qemu-aarch64|$cpu"); done
if [ -n "$cpus11" ]; then
    q11=$(bash scripts/aarch64/fetch-qemu-testing.sh)   # prints its version on stderr, its path on stdout
    for cpu in $cpus11; do runs+=("11|$q11|$cpu"); done
fi
start=$SECONDS
pids=()
for i in "${!runs[@]}"; do
    IFS='|' read -r qv qemu cpu <<< "${runs[$i]}"
    fe=ep; [ $((i % 2)) = 1 ] && fe=custom-op
    echo "== aarch64 under qemu $qv -cpu $cpu (nibble as $fe), in the background"
    rm -f "$out/a64-q$qv-$cpu.json"
    QEMU_A64=$qemu QEMU_CPU=$cpu scripts/aarch64/qemu-a64-run.sh "$tdir/$target/release/nibble-llama" "${common[@]}" \
        --lib "$tdir/$target/release/libnibble_ort.so" --ort-dylib "$a64_ort" --frontend "$fe" \
        --json "$out/a64-q$qv-$cpu.json" > "$out/a64-q$qv-$cpu.log" 2>&1 &
    pids+=($!)
done
for i in "${!pids[@]}"; do
    IFS='|' read -r qv qemu cpu <<< "${runs[$i]}"
    wait "${pids[$i]}" || { cat "$out/a64-q$qv-$cpu.log" >&2; echo "FAIL: the aarch64 run under qemu $qv -cpu $cpu failed" >&2; exit 1; }
done
echo "   ($((SECONDS - start)) s under qemu)"
for i in "${!runs[@]}"; do
    IFS='|' read -r qv qemu cpu <<< "${runs[$i]}"
    fe=ep; [ $((i % 2)) = 1 ] && fe=custom-op
    got=$(ids "$out/a64-q$qv-$cpu.json")
    echo "aarch64 qemu $qv -cpu $cpu nibble ($fe): $got"
    [ "$got" = "$want" ] || { echo "FAIL: nibble under qemu $qv -cpu $cpu differs from ORT on x86" >&2; exit 1; }
done
names=$(for r in "${runs[@]}"; do IFS='|' read -r qv _ cpu <<< "$r"; printf '%s (qemu %s), ' "$cpu" "$qv"; done)
echo "llama-aarch64: $tokens greedy tokens identical on x86 (ORT, nibble as EP and as custom-op library) and aarch64: ${names%, }"
