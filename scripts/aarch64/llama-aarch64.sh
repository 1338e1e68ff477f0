#!/usr/bin/env bash
# llama-aarch64.sh — the Llama driver (examples/llama) cross-built for aarch64 and run under qemu-user with the
# aarch64 ONNX Runtime 1.31.1 and the aarch64 libnibble_ort.so: N greedy tokens of SmolLM2-135M q4 at
# accuracy_level 1 on each CPU model, which must be identical to ORT's built-in op and to nibble on x86 (both
# frontends there; under qemu the CPU models alternate between the execution provider and the custom-op library). (ORT's own
# aarch64 fp32 path under qemu takes over 5 minutes for this, so ORT's tokens come from x86.) Called by scripts/test-aarch64.sh (after its setup); standalone it needs the same environment
# (A64ENV with the aarch64 ORT, the cross linker) and scripts/setup.sh's .venv + SmolLM2 GGUF.
# Env: LLAMA_CPUS (default "max,sve=off cortex-a72"), LLAMA_TOKENS (default 16).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
export A64ENV=${A64ENV:-$root/.cache/a64env}
cpus=${LLAMA_CPUS:-"max,sve=off cortex-a72"}
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

cargo build -q "${locked[@]}" --release -p nibble-ort -p nibble-llama
cargo build -q "${locked[@]}" --release -p nibble-ort -p nibble-llama --target $target
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

# The CPU models alternate between the two frontends (the first as an execution provider, the second as a custom-op
# library, ...): both are proven on aarch64 without doubling the minutes under qemu.
frontend_of() { local i=0 c; for c in $cpus; do [ "$c" = "$1" ] && break; i=$((i + 1)); done
                if [ $((i % 2)) = 0 ]; then echo ep; else echo custom-op; fi; }
start=$SECONDS
pids=()
for cpu in $cpus; do
    fe=$(frontend_of "$cpu")
    echo "== aarch64 under qemu -cpu $cpu (nibble as $fe), in the background"
    rm -f "$out/a64-$cpu.json"
    QEMU_CPU=$cpu scripts/aarch64/qemu-a64-run.sh "$tdir/$target/release/nibble-llama" "${common[@]}" \
        --lib "$tdir/$target/release/libnibble_ort.so" --ort-dylib "$a64_ort" --frontend "$fe" \
        --json "$out/a64-$cpu.json" > "$out/a64-$cpu.log" 2>&1 &
    pids+=($!)
done
for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || { cat "$out/a64-$(echo $cpus | cut -d' ' -f$((i + 1))).log" >&2; echo "FAIL: the aarch64 run failed" >&2; exit 1; }
done
echo "   ($((SECONDS - start)) s under qemu)"
for cpu in $cpus; do
    got=$(ids "$out/a64-$cpu.json")
    echo "aarch64 $cpu nibble ($(frontend_of "$cpu")): $got"
    [ "$got" = "$want" ] || { echo "FAIL: nibble under qemu -cpu $cpu differs from ORT on x86" >&2; exit 1; }
done
echo "llama-aarch64: $tokens greedy tokens identical on x86 (ORT, nibble as EP and as custom-op library) and aarch64 (${cpus// /, })"
