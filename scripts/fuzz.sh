#!/usr/bin/env bash
# fuzz.sh — builds the libFuzzer targets of fuzz/ and runs them (no cargo-fuzz needed).
#
#   scripts/fuzz.sh [--smoke | --time SECONDS] [--jobs N] [--build-only] [TARGET...]
#
#   TARGET       create (kernel creation from arbitrary attributes and constant inputs, through the op core's
#                creation code), kernels (every kernel and family this CPU runs against the reference oracle on
#                arbitrary small problems), serve_request (nibble-serve's request parsing); default: all three
#   --smoke      60 s per target, all at once, on a fresh copy of its committed seed corpus (scripts/test.sh runs
#                it: ~3 min on 2 idle cores with a cold build, 4.6 min measured on busy ones)
#   --time S     S seconds per target (default 60) on its working corpus, target/fuzz/corpus/TARGET (seeded from
#                fuzz/corpus/TARGET and kept between runs: the committed seeds are never written to)
#   --jobs N     targets run at once (default: all of them with --smoke, so the smoke takes 60 s; otherwise one)
#   --build-only build the instrumented targets and stop
#
# Build: the pinned stable toolchain with cargo-fuzz's flags (RUSTC_BOOTSTRAP=1 for -Zsanitizer): SanitizerCoverage
# (inline 8-bit counters, PC table, compare tracing, stack depth), AddressSanitizer, debug assertions (overflow
# checks), `--cfg fuzzing`; release profile of fuzz/Cargo.toml, its own target dir target/fuzz. `cargo fuzz run
# TARGET` (cargo-fuzz; `RUSTC_BOOTSTRAP=1` on the pinned toolchain) builds and runs the same targets.
# Limits per input: -max_len (create 4096, kernels 1024, serve_request 16384 bytes), -malloc_limit_mb=256 (any
# allocation past it is a finding: the inputs justify far less), -rss_limit_mb=1024, -timeout=60 s (the kernels
# target's largest problems took up to 17 s under compare tracing and ASan on a busy machine).
# FUZZ_ARGS: more libFuzzer flags for every run (e.g. FUZZ_ARGS="-seed=1 -verbosity=2").
# Exit status 1 when a target finds anything (crash, overflow, timeout, leak, out-of-memory): the reproducer's
# path is printed; re-run it with `target/fuzz/x86_64-unknown-linux-gnu/release/TARGET FILE`. Logs: target/fuzz/logs/
# (the smoke's: target/fuzz/smoke/logs/).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
all=(create kernels serve_request)
smoke=0 secs=60 build_only=0 jobs=
targets=()
while [ $# -gt 0 ]; do
    case "$1" in
        --smoke) smoke=1 ;;
        --time) secs=${2:?--time needs SECONDS}; shift ;;
        --jobs) jobs=${2:?--jobs needs N}; shift ;;
        --build-only) build_only=1 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "fuzz.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
        *) [[ " ${all[*]} " == *" $1 "* ]] || { echo "fuzz.sh: unknown target $1 (${all[*]})" >&2; exit 2; }
           targets+=("$1") ;;
    esac
    shift
done
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
[ -n "$jobs" ] || { [ $smoke = 1 ] && jobs=${#targets[@]} || jobs=1; }
case "$(uname -sm)" in
    "Linux x86_64") triple=x86_64-unknown-linux-gnu ;;
    "Linux aarch64") triple=aarch64-unknown-linux-gnu ;;
    *) echo "fuzz.sh: libFuzzer targets build on Linux only" >&2; exit 1 ;;
esac

out=${CARGO_TARGET_DIR:-$root/target}/fuzz
flags=(-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4
       -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table
       -Cllvm-args=-sanitizer-coverage-trace-compares -Cllvm-args=-sanitizer-coverage-stack-depth
       --cfg fuzzing -Zsanitizer=address -Cdebug-assertions -Coverflow-checks -Cforce-frame-pointers=yes)
echo "== building the fuzz targets (${targets[*]}) into $out"
t0=$SECONDS
bins=()
for t in "${targets[@]}"; do bins+=(--bin "$t"); done
# fuzz/ is a workspace of its own, whose lock file is not committed: it starts as a copy of the repository's
# Cargo.lock, so every crate the libraries share keeps the version the tests pin, and cargo adds the fuzz-only ones
# (libfuzzer-sys and arbitrary, pinned exactly in fuzz/Cargo.toml, and what they need).
cp Cargo.lock fuzz/Cargo.lock
# --target keeps the flags off build scripts and proc macros (sanitizers and coverage are for the code under test).
RUSTC_BOOTSTRAP=1 RUSTFLAGS="${flags[*]}" CARGO_TARGET_DIR="$out" \
    cargo build -q --release --manifest-path fuzz/Cargo.toml --target "$triple" "${bins[@]}"
echo "   built in $((SECONDS - t0)) s"
[ $build_only = 1 ] && exit 0

max_len() { case "$1" in create) echo 4096 ;; kernels) echo 1024 ;; *) echo 16384 ;; esac; }
# The smoke has its own logs and corpus copies, so it can run beside a long run of the same target.
logs=$out/logs
[ $smoke = 1 ] && logs=$out/smoke/logs
mkdir -p "$logs"
# run TARGET: one libFuzzer run; its exit status is the run's.
run() {
    local t=$1 corpus art log
    art=$out/artifacts/$t
    log=$logs/$t.log
    if [ $smoke = 1 ]; then
        corpus=$out/smoke/corpus/$t
        rm -rf "$corpus"
    else
        corpus=$out/corpus/$t
    fi
    mkdir -p "$corpus" "$art"
    cp -n fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null || true
    local dict=()
    [ -f "fuzz/dict/$t.dict" ] && dict=(-dict="fuzz/dict/$t.dict")
    # A crash leaves its reproducer under $art (crash-*, oom-*, timeout-*, leak-*, slow-unit-* is not one).
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0} \
        "$out/$triple/release/$t" -max_total_time="$secs" -max_len="$(max_len "$t")" -malloc_limit_mb=256 \
        -rss_limit_mb=1024 -timeout=60 -print_final_stats=1 -artifact_prefix="$art/" "${dict[@]}" ${FUZZ_ARGS:-} "$corpus" \
        > "$log" 2>&1
}

start=$SECONDS
declare -A pid=()
status=0
finish() {
    local t=$1 rc=0
    wait "${pid[$t]}" || rc=$?
    local log=$logs/$t.log
    local last
    last=$(grep -aE '^#[0-9]+' "$log" | tail -1 || true)
    local execs rate
    execs=$(grep -a '^stat::number_of_executed_units:' "$log" | sed 's/^.*: *//')
    rate=$(grep -a '^stat::average_exec_per_sec:' "$log" | sed 's/^.*: *//')
    if [ $rc = 0 ]; then
        printf '   %-14s ok: %s execs (%s/s); last: %s\n' "$t" "${execs:-?}" "${rate:-?}" "$last"
    else
        status=1
        printf '   %-14s FAILED (exit %d); log %s\n' "$t" "$rc" "$log" >&2
        grep -aE 'ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer)|panicked at|SUMMARY' "$log" | head -5 | sed 's/^/      /' >&2
        grep -aohE "(Test unit written to|artifact_prefix.*; Test unit written to) [^ ]+" "$log" | sed 's/^.* to /      reproducer: /' >&2
    fi
}
echo "== fuzzing ${targets[*]}: $secs s each, $jobs at a time"
running=()
for t in "${targets[@]}"; do
    if [ ${#running[@]} -ge "$jobs" ]; then
        finish "${running[0]}"
        running=("${running[@]:1}")
    fi
    run "$t" &
    pid[$t]=$!
    running+=("$t")
done
for t in "${running[@]}"; do finish "$t"; done
echo "   fuzzed in $((SECONDS - start)) s"
if [ $status != 0 ]; then
    echo "fuzz.sh: FINDINGS (reproducers above; re-run one with target/fuzz/$triple/release/TARGET FILE)" >&2
else
    echo "fuzz.sh: no finding"
fi
exit $status
