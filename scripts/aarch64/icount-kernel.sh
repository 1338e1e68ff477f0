#!/usr/bin/env bash
# icount-kernel.sh — guest instructions executed inside one kernel's function (and inside the activation
# quantizer) per call, under qemu-aarch64 7.2 with the instruction-count plugin: what a kernel's module doc budget
# ("instructions per SMMLA/SDOT") is measured against. Runs kernels/examples/kernel_icount.rs (the kernel on its
# own layout, every tile on one thread), counting by symbol: exact and repeatable (no session, no threads).
#
# Usage: scripts/aarch64/icount-kernel.sh KERNEL [--cpu max] [--m 32] [--n 2048] [--k 2048] [--bits 4] [--bs 32]
#            [--zp none|uint8] [--act block|row]
# Prints "KERNEL cpu M NxK bits bs zp: N insns/call, N SMMLA, N SDOT, N insns per SMMLA|SDOT, quantizer N insns/call".
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
[ $# -ge 1 ] || { sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 2; }
kernel=$1; shift
cpu=max; args=(); m=32; n=2048; k=2048; bits=4; bs=32; zp=none; act=block
while [ $# -gt 0 ]; do
    case "$1" in
        --cpu) cpu=$2; shift 2 ;;
        --m) m=$2; shift 2 ;;
        --n) n=$2; shift 2 ;;
        --k) k=$2; shift 2 ;;
        --bits) bits=$2; shift 2 ;;
        --bs) bs=$2; shift 2 ;;
        --zp) zp=$2; shift 2 ;;
        --act) act=$2; shift 2 ;;
        *) echo "icount-kernel: unknown argument $1" >&2; exit 2 ;;
    esac
done
args=(--kernel "$kernel" --m "$m" --n "$n" --k "$k" --bits "$bits" --bs "$bs" --zp "$zp" --act "$act" --runs 1)
export A64ENV=${A64ENV:-$root/.cache/a64env}
bash scripts/aarch64/setup-aarch64.sh --no-ort --cpus "$cpu" >&2
rustup target list --installed | grep -qx aarch64-unknown-linux-gnu || rustup target add aarch64-unknown-linux-gnu
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
target=aarch64-unknown-linux-gnu
locked=(); [ -f Cargo.lock ] && locked=(--locked)
cargo build -q "${locked[@]}" --release -p nibble-kernels --target $target --example kernel_icount >&2
bin=${CARGO_TARGET_DIR:-$root/target}/$target/release/examples/kernel_icount
# The kernel's instructions: everything in nibble_kernels::arch (its `run` and the bodies it calls, inlined or
# not; only the named kernel runs) but the NEON quantizer (arch::aarch64::quantize_block_neon); the quantizer:
# quantize_block (portable or NEON).
bash scripts/aarch64/aarch64-icount.sh -q -c "$cpu" -p sym=14nibble_kernels4arch -p sym=quantize_block_neon \
    -p sym=quantize_block -p enc=smmla -p enc=sdot -p enc=sdot_idx -- "$bin" "${args[@]}" |
    awk -v name="$kernel" -v cpu="$cpu" -v shape="M=$m ${k}x$n bits=$bits bs=$bs zp=$zp" '
        /^icount sym 14nibble_kernels4arch / {arch=$4} /^icount sym quantize_block_neon / {qn=$4}
        /^icount sym quantize_block / {q=$4}
        /^icount enc smmla/ {mm=$4} /^icount enc sdot / {sd=$4} /^icount enc sdot_idx/ {sd+=$4}
        END {
            kern = arch - qn
            dots = mm + sd
            printf "%s on %s, %s: %d insns/call, %d SMMLA, %d SDOT, %.2f insns per SMMLA|SDOT, quantizer %d insns/call\n",
                name, cpu, shape, kern, mm, sd, dots ? kern / dots : 0, q
        }'
