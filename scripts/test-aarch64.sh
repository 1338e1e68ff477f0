#!/usr/bin/env bash
# test-aarch64.sh — cross-builds nibble-kernels for aarch64 and runs its tests under qemu-user 7.2 on every CPU
# model we support, checking that feature detection finds exactly what each model has (a wrong answer would
# SIGILL once SIMD kernels land). Installs what it needs (apt cross toolchain + qemu-user, rustup target).
# Env: A64ENV (default <repo>/.cache/a64env), AARCH64_CPUS to restrict the models (space-separated).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export A64ENV=${A64ENV:-$root/.cache/a64env}

# model → what detection must report (qemu 7.2: max = dotprod, i8mm, sve, sme; "max,sve=off" drops SVE and SME).
declare -A expect=(
  [max]="portable,neon,dotprod,i8mm,sve,sme"
  [max,sve=off]="portable,neon,dotprod,i8mm"
  [neoverse-n1]="portable,neon,dotprod"
  [cortex-a76]="portable,neon,dotprod"
  [cortex-a72]="portable,neon"
  [a64fx]="portable,neon,sve"
)
cpus=${AARCH64_CPUS:-"max max,sve=off neoverse-n1 cortex-a76 cortex-a72 a64fx"}

bash scripts/aarch64/setup-aarch64.sh --no-ort --no-icount --cpus "$cpus"
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER=$root/scripts/aarch64/qemu-a64-run.sh

cargo test -q -p nibble-kernels --release --target aarch64-unknown-linux-gnu --no-run
for cpu in $cpus; do
    echo "== aarch64 kernels under qemu -cpu $cpu (expect ${expect[$cpu]})"
    QEMU_CPU=$cpu NIBBLE_EXPECT_ISAS=${expect[$cpu]} \
        cargo test -q -p nibble-kernels --release --target aarch64-unknown-linux-gnu
done
echo "aarch64: kernel tests passed on: $cpus"
