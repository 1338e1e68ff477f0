#!/usr/bin/env bash
# test.sh — THE test command for nibble: sets up, builds, and runs every test suite, then prints a summary.
#
#   scripts/test.sh            everything (what CI runs through .ci/run)
#   scripts/test.sh --quick    skip the extra ORT passes (1.19.2, 1.23.2, 1.24.4), the Python and aarch64 tests
#   scripts/test.sh --no-setup do not run scripts/setup.sh (offline re-runs; .venv and .cache must exist)
#
# Steps (all run even if an earlier one failed, so the summary shows the whole picture; exit status 1 if any failed):
#   1. scripts/setup.sh                          toolchain, .venv, ONNX Runtime 1.31.1 + the extra versions
#                                                (scripts/ort-versions.txt: 1.19.2 1.23.2 1.24.4) in .cache/ort/
#   2. tests/fixtures/make_fixtures.py           models + golden data -> target/fixtures/
#      scripts/convert-smollm2.sh                SmolLM2-135M GGUF -> target/llama/smollm2-{fp32,q4} (ONNX)
#   3. cargo build-release (.cargo/config.toml: --release -p nibble-ort -p nibble-llama -p nibble-serve)
#                                                target/release/libnibble_ort.so (what ORT loads), the driver and
#                                                the chat server, built together as scripts/demo.sh and serve.sh
#                                                do (one feature resolution: no build invalidates another's)
#      pip install . (into .venv)                the Python package nibble_ort: the Python tests load its library
#      scripts/build-wheel.sh                    manylinux_2_28 wheels for x86_64 and aarch64 (tested in step 8)
#      then step 9 starts in the background (nice 19) and runs beside steps 3-8; its log is printed at the end
#      scripts/genai-model.sh                    the onnxruntime-genai model of step 5, built this early: its
#                                                builder's venv (~6.3 GB at its peak, deleted after) needs the disk
#      cargo clippy --target aarch64-linux-android, aarch64-apple-darwin: the kernels and the library compile for
#                                                Android and macOS on arm64 (not run: no such machine here)
#   4. cargo test --workspace                    kernels unit/property tests, provider tests; the ORT integration
#                                                test (provider/tests/session.rs) and the Llama driver's tests
#                                                (examples/llama/tests/driver.rs) run here against ORT 1.31.1
#      scripts/sanitize.sh --valgrind-session    that test under valgrind memcheck, both frontends: no error in
#                                                nibble's frames (--asan / --valgrind: the kernel suite under
#                                                AddressSanitizer, a parity subset under memcheck; not run here)
#      scripts/fuzz.sh --smoke                   the libFuzzer targets (fuzz/: kernel creation from arbitrary
#                                                attributes and inputs, every kernel against the reference,
#                                                nibble-serve's request parsing), built with coverage and ASan,
#                                                60 s each on a copy of their seed corpora: a finding fails it
#   5. tests/cpp/run.sh                          C++ end-to-end test: g++ against ORT's C++ API, custom-op library
#                                                on ORT 1.31.1, execution provider on 1.24.4 and 1.31.1
#      tests/cpp/package/run.sh                  scripts/install.sh into a fresh prefix; CMake (find_package) and
#                                                pkg-config consumers built against it and run
#      pytest tests/server                       the chat server (examples/server) through the openai client, and
#                                                its page (GET /) in headless chromium over the DevTools protocol
#      pytest tests/ray                          nibble on Ray Serve (examples/ray): a 2-node Ray cluster on this host
#                                                (ray.cluster_utils.Cluster), 2 replicas through Ray's HTTP proxy and
#                                                the openai client (nibble-serve's greedy answer, 16 concurrent
#                                                streams on both nodes, a killed replica, a dead generator, a worker
#                                                node removed and added back, the Serve config deployed and
#                                                autoscaling 1 -> 2), then
#                                                scripts/ray-serve.sh started, asked, stopped with SIGTERM
#      scripts/genai-model.sh + pytest tests/genai  nibble under onnxruntime-genai 0.18.0 (its own venv under
#                                                .cache/genai, onnxruntime 1.32.0) on the model its builder makes from
#                                                the SmolLM2 weights (cached under .cache/genai/models): custom-op
#                                                library from genai_config.json and plugin EP registered with
#                                                og.register_execution_provider_library; nibble ran on all 151 nodes,
#                                                KL to the accuracy_level=1 copy within bounds a broken model fails
#      tests/cpp/service/run.sh                  the C++ inference service example (examples/cpp) built with CMake
#                                                against that package and ORT's headers; its tokenizer against HF
#                                                tokenizers, its concurrent requests against the Rust driver's ids
#   6. cargo test --workspace --test session the ORT integration test again, once per extra ORT version
#                                                (one summary line each), and through the execution-provider
#                                                frontend (NIBBLE_FRONTEND=ep) on 1.31.1 and 1.24.4
#   7. .venv/bin/python -m pytest tests/python   Python tests (onnxruntime 1.31.1 from .venv)
#      + parity (wide subset), malformed, behaviour and EP tests again through the execution-provider frontend
#        (NIBBLE_FRONTEND=ep) on 1.31.1 and, without the ORT-oracle half, on 1.24.4 (scripts/setup.sh unpacks it)
#      + the ORT integration test and the Python parity (wide subset)/malformed tests again with each rung and family forced
#        (NIBBLE_ISA=portable, =avx2, =avx512vnni on AMX CPUs; NIBBLE_FAMILIES= the second portable families, the
#        AVX2 family without AVX-VNNI), so every kernel family is proven through ORT, not only in the kernel suite
#   8. the wheels of step 3                      the x86_64 one in a
#                                                fresh venv (tests/python/test-wheel.sh), again with onnxruntime
#                                                1.17.3 (the floor; Python-only on PyPI), and its library through
#                                                the ORT integration test
#   9. scripts/test-aarch64.sh (background)      (its set-up and cross-builds in the foreground first, --build-only)
#                                                kernel tests cross-built for aarch64, under qemu 7.2 on 7 CPU models
#                                                and under Debian testing's qemu 11 on 10 (SVE2, SME2, vector
#                                                lengths, Neoverse V1/N2; scripts/aarch64/fetch-qemu-testing.sh),
#                                                nibble-info on each, the Python parity and package tests in
#                                                aarch64 ORT with the aarch64 wheel installed on 3 of them
#                                                (scripts/aarch64/python-aarch64.sh) and the Llama driver on aarch64
#                                                (scripts/aarch64/llama-aarch64.sh)
# Environment passed to the tests: NIBBLE_LIB (Rust tests; the Python ones load the installed package), NIBBLE_FIXTURES, NIBBLE_ORT_DYLIB, NIBBLE_ORT_VERSION,
# NIBBLE_LLAMA_FP32_DIR, NIBBLE_LLAMA_Q4_DIR, NIBBLE_LLAMA_BIN.
# ORT_LOG defaults to "fatal": the error-path tests make ORT log the (expected) errors; ORT_LOG=warning shows them.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

quick=0
setup=1
for arg in "$@"; do
    case "$arg" in
        --quick) quick=1 ;;
        --no-setup) setup=0 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "test.sh: unknown option $arg (try --help)" >&2; exit 2 ;;
    esac
done

# The settings that steer kernel selection and the tests' expectations come from this script only: a caller's
# NIBBLE_ISA=portable (say) would otherwise change what every suite runs and compares.
unset NIBBLE_ISA NIBBLE_FAMILIES NIBBLE_FRONTEND NIBBLE_PARITY_SUBSET NIBBLE_EXPECT_ISAS NIBBLE_EXPECT_CPU NIBBLE_EXPECT_FAMILIES \
    NIBBLE_REQUIRE_ISAS
while read -r v; do unset "$v"; done < <(compgen -e | grep '^PROPTEST_' || true)

TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
export NIBBLE_LIB=$TARGET/release/libnibble_ort.so
export NIBBLE_FIXTURES=$TARGET/fixtures
export NIBBLE_LLAMA_FP32_DIR=$TARGET/llama/smollm2-fp32 NIBBLE_LLAMA_Q4_DIR=$TARGET/llama/smollm2-q4
export NIBBLE_LLAMA_BIN=$TARGET/debug/nibble-llama   # built by step 4 (cargo test --workspace); pytest drives it
export ORT_LOG=${ORT_LOG:-fatal}
ORT_NEW=1.31.1
# The forced passes: the second-ranked portable families (every node the first two can serve runs on them; the kr=8
# layout cannot hold 2-bit blocks of 16, those nodes fall to the default portable families), the portable rung,
# and on x86 CPUs with AVX2 the avx2 rung and the AVX2 family without AVX-VNNI (vpmaddubsw); on CPUs with AMX-INT8 also
# the avx512vnni rung (there the AMX families take every int8 GEMM of 32 rows or more and, with AMX-BF16, every
# fp32-path GEMM of 8 rows or more by default).
FORCED=("NIBBLE_FAMILIES=portable_int8_qsnbp8x8_sf16_zpc_bsum,portable_fp32_qsnbp8x8_sf32_zpc,portable_int8_qunbp8x4_sf32_zpb,portable_fp32_qunbp8x4_sf32_zpb"
        "NIBBLE_ISA=portable")
if [ "$(uname -m)" = x86_64 ] && grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
    FORCED+=("NIBBLE_ISA=avx2" "NIBBLE_FAMILIES=avx2_int8_qunbp64x4_sf32_zpc,avx2_fp32_qunbp64x4_sf32_zpc")
fi
if [ "$(uname -m)" = x86_64 ] && grep -qwE 'amx_int8|amx_bf16' /proc/cpuinfo && grep -qw avx512_vnni /proc/cpuinfo; then
    FORCED+=("NIBBLE_ISA=avx512vnni")
fi
# The extra ONNX Runtime versions (scripts/ort-versions.txt, the one list): 1.19.2 1.23.2 1.24.4.
mapfile -t ORT_EXTRA < <(bash scripts/setup.sh --ort-versions)
[ ${#ORT_EXTRA[@]} -gt 0 ] || { echo "test.sh: scripts/setup.sh --ort-versions printed no version" >&2; exit 2; }
ort_dylib() { echo "$ROOT/.cache/ort/$1/libonnxruntime.so.$1"; }

# Use the lock file when there is one, so CI builds exactly what was tested.
LOCKED=()
[ -f Cargo.lock ] && LOCKED=(--locked)

# ------------------------------------------------------------------ step runner
B='' N=''
[ -t 1 ] && B=$'\033[1m' N=$'\033[0m'   # bold step headers on a terminal only
declare -a SUMMARY=()
failed=0
# Each step's output (stdout and stderr) is also kept in $STEP_LOGS/NN.log; the last lines of every failed step's
# log are printed again after the summary, so a CI record that keeps only the end of the output still says why.
STEP_LOGS=$TARGET/test-logs
rm -rf "$STEP_LOGS" && mkdir -p "$STEP_LOGS"
declare -a FAILED_LOGS=()
# step NAME CMD... — runs CMD, records "PASS|FAIL  seconds  NAME".
step() {
    local name=$1; shift
    printf '\n%s==> %s%s\n    $ %s\n' "$B" "$name" "$N" "$*"
    local t0=$SECONDS rc=0 log
    log=$STEP_LOGS/$(printf '%02d' ${#SUMMARY[@]}).log
    # The command runs in this shell (a function may set variables), its output through tee on a descriptor of this
    # shell, so that tee's pid is known: `"$@" > >(tee ...)` does not set $! when "$@" is an external command, and a
    # `wait $!` after it waited for whatever was started last (the aarch64 lane: its first step after the lane's
    # start showed the lane's time). tee ends when the command's output closes; a process the command left running
    # with that output open (a server) would keep it, so the wait for tee is bounded (5 s).
    local out tee_pid
    exec {out}> >(exec tee "$log")
    tee_pid=$!
    "$@" >&"$out" 2>&1 || rc=$?
    exec {out}>&-
    for _ in $(seq 50); do kill -0 "$tee_pid" 2>/dev/null || break; sleep 0.1; done
    local dt=$((SECONDS - t0))
    if [ $rc = 0 ]; then
        SUMMARY+=("$(printf 'PASS  %4ds  %s' "$dt" "$name")")
    else
        SUMMARY+=("$(printf 'FAIL  %4ds  %s (exit %d)' "$dt" "$name" "$rc")")
        FAILED_LOGS+=("$name"$'\t'"$log")
        failed=1
    fi
}
skip() { SUMMARY+=("$(printf 'skip  %4s   %s' "" "$*")"); }
# with_ort VERSION CMD... — runs CMD with the integration tests pointed at ONNX Runtime VERSION.
with_ort() {
    local v=$1; shift
    NIBBLE_ORT_DYLIB=$(ort_dylib "$v") NIBBLE_ORT_VERSION=$v "$@"
}
# pytest exits 5 when it collects nothing: say so instead of a bare "exit 5". Arguments: test paths (default all).
run_pytest() {
    local rc=0
    [ $# -gt 0 ] || set -- tests/python
    env -u NIBBLE_LIB .venv/bin/python -m pytest -q "$@" || rc=$?
    [ $rc = 5 ] && echo "test.sh: pytest collected no tests in tests/python" >&2
    return $rc
}

T0=$SECONDS
if [ $setup = 1 ]; then
    # Without the toolchain, venv and ORT libraries nothing else can run: stop here on failure.
    step "setup (scripts/setup.sh)" bash scripts/setup.sh
    if [ $failed = 1 ]; then
        printf '%s\n' "${SUMMARY[@]}"
        exit 1
    fi
else
    skip "setup (--no-setup)"
fi

step "fixtures (tests/fixtures/make_fixtures.py)" .venv/bin/python tests/fixtures/make_fixtures.py --out "$NIBBLE_FIXTURES"
step "SmolLM2 model directories (scripts/convert-smollm2.sh)" bash scripts/convert-smollm2.sh "$TARGET/llama"
step "cargo build-release (-p nibble-ort -p nibble-llama -p nibble-serve: .cargo/config.toml)" \
    cargo build-release "${LOCKED[@]}"
# The release ORT integration test that the valgrind step runs, built now with the other release builds: the
# valgrind step then runs no cargo (a cargo call beside the background aarch64 step can wait on its build lock).
session_bin() {
    local bin
    bin=$(bash scripts/sanitize.sh --session-test-bin) && echo "$bin" > "$TARGET/session-test-release.path"
}
step "release ORT integration test binary (cargo test-session-release --no-run: for the valgrind step)" session_bin
# The Python tests load the library from the installed package, as users do: `pip install .` builds it with cargo
# and installs nibble_ort into .venv. NIBBLE_CARGO_ALIAS=build-release (setup.py) keeps that build within the
# selection above, so nothing recompiles; `-p nibble-ort` alone resolves other dependency features, recompiles the
# library over the one above, and the next script's `cargo build-release` (scripts/ray-serve.sh's) relinked the
# driver and the server (~95 s).
step "Python package: pip install . (nibble_ort into .venv)" \
    env NIBBLE_CARGO_ALIAS=build-release .venv/bin/pip install -q --disable-pip-version-check --no-deps --force-reinstall .
# The wheels (manylinux_2_28, x86_64 and aarch64; zig-linked against glibc 2.28, in target/wheel-build) are built
# here, before the aarch64 step starts: that step installs the aarch64 one under qemu. They are tested further down.
if [ $quick = 0 ]; then
    step "wheels (scripts/build-wheel.sh --arch x86_64, --arch aarch64)" \
        bash -c 'bash scripts/build-wheel.sh --arch x86_64 && bash scripts/build-wheel.sh --arch aarch64'
fi
# The aarch64 step (cross-builds, qemu 7.2 and 11 models, the aarch64 Python and Llama tests: ~29 min alone, mostly
# one emulated thread) runs in the background from here, beside the onnxruntime-genai model's build, at the lowest
# CPU priority (nice 19, in this session: what runs beside it keeps the CPU it asks for); the x86 steps after that
# wait for it (`a64_join`). It shares no lock with them for long: its cargo builds use
# target/aarch64-unknown-linux-gnu (and target/release only for build scripts, whose artifacts the release build
# above made), the x86 test builds target/debug. Its output goes to target/test-aarch64.log, printed (and counted
# in the summary) by `a64_join`; stopping test.sh stops it.
A64_PID=""
A64_LOG=$TARGET/test-aarch64.log
if [ $quick = 0 ]; then
    # Its set-up and cross-builds first, in the foreground at full priority (both cores: ~5 min): in the background
    # they got what the x86 steps left (~15 min) and held target/release's build lock meanwhile (the Ray step's
    # scripts/ray-serve.sh waited ~100 s on it for its `cargo build-release`).
    step "aarch64 set-up and cross-builds (scripts/test-aarch64.sh --build-only)" bash scripts/test-aarch64.sh --build-only
    wheel_a64=$(ls "$TARGET"/wheels/nibble_ort-*-py3-none-manylinux_2_28_aarch64.whl 2>/dev/null | head -1)
    A64_T0=$SECONDS
    set -m   # its own process group (not its own session: nice is relative within a session's autogroup)
    env NIBBLE_WHEEL="${wheel_a64:-missing.whl}" nice -n 19 bash scripts/test-aarch64.sh < /dev/null > "$A64_LOG" 2>&1 &
    A64_PID=$!
    set +m
    stop_a64() { if [ -n "$A64_PID" ]; then kill -- -"$A64_PID" 2>/dev/null || true; A64_PID=""; fi; }
    trap stop_a64 EXIT
    trap 'stop_a64; exit 130' INT
    trap 'stop_a64; exit 143' TERM
    printf '\n%s==> aarch64 kernel tests under qemu (scripts/test-aarch64.sh): started in the background (pid %s, nice 19, log %s)%s\n' \
        "$B" "$A64_PID" "${A64_LOG#"$ROOT"/}" "$N"
fi
# The onnxruntime-genai model is built here, early (its test runs further down): the builder's venv (torch with
# PyPI's CUDA wheels, ~6.3 GB on disk at its peak, deleted once the model is built) then meets a disk that the x86
# test, fuzz and server builds have not filled yet (a CI run failed in pip with ENOSPC when it was built later).
step "onnxruntime-genai model (scripts/genai-model.sh: its builder, then the builder's venv deleted)" \
    bash -c 'bash scripts/genai-model.sh > /dev/null'
# The x86 steps wait for the aarch64 lane here, then run with both cores to themselves. Every measured run of this
# command ran in that order (until 2026-12-06 by accident: `step` waited on `$!`, the lane, in the first step after
# its start): 2223-2382 s for fresh clones on the 2-core machine. The lane beside the x86 steps has not been timed;
# change the order only with such a measurement. The lane's log, then its result in the summary (its time counted
# from its start; the wait is what it added to the x86 steps' time).
a64_join() {
    local t_wait=$SECONDS a64_rc=0 a64_name
    wait "$A64_PID" || a64_rc=$?
    A64_PID=""
    printf '\n%s==> aarch64 kernel tests under qemu (scripts/test-aarch64.sh), run in the background: its log (%s)%s\n' \
        "$B" "${A64_LOG#"$ROOT"/}" "$N"
    cat "$A64_LOG"
    a64_name="aarch64 kernel tests under qemu (scripts/test-aarch64.sh; in the background, $((SECONDS - t_wait)) s waited for)"
    if [ $a64_rc = 0 ]; then
        SUMMARY+=("$(printf 'PASS  %4ds  %s' $((SECONDS - A64_T0)) "$a64_name")")
    else
        SUMMARY+=("$(printf 'FAIL  %4ds  %s (exit %d)' $((SECONDS - A64_T0)) "$a64_name" "$a64_rc")")
        FAILED_LOGS+=("$a64_name"$'\t'"$A64_LOG")
        failed=1
    fi
}
if [ -n "$A64_PID" ]; then a64_join; fi
step "lint (cargo fmt --check, cargo clippy -D warnings)" \
    bash -c 'cargo fmt --all -- --check && cargo fmt --manifest-path fuzz/Cargo.toml -- --check &&
        cargo clippy -q "$@" --workspace --all-targets -- -D warnings' _ "${LOCKED[@]}"
# Android and macOS on arm64: the kernels and the library compile there, feature detection included (getauxval;
# sysctlbyname hw.optional.arm.FEAT_*). Compiled only: nothing here can run them.
for t in aarch64-linux-android aarch64-apple-darwin; do
    step "cargo clippy --target $t -p nibble-kernels -p nibble-ort (compile-only target)" \
        cargo clippy -q "${LOCKED[@]}" --target "$t" -p nibble-kernels -p nibble-ort -- -D warnings
done
step "cargo test --workspace (ORT integration on $ORT_NEW)" with_ort "$ORT_NEW" cargo test "${LOCKED[@]}" --workspace
step "valgrind memcheck: the ORT integration test, both frontends (scripts/sanitize.sh --valgrind-session)" \
    env NIBBLE_SESSION_TEST_BIN="$(cat "$TARGET/session-test-release.path" 2>/dev/null || echo missing)" \
    bash scripts/sanitize.sh --valgrind-session
step "fuzz smoke (scripts/fuzz.sh --smoke: create, kernels, serve_request, 60 s each)" bash scripts/fuzz.sh --smoke
step "C++ end-to-end test (tests/cpp/run.sh: custom-op on $ORT_NEW, EP on 1.24.4 and $ORT_NEW)" bash tests/cpp/run.sh
step "C/C++ package: scripts/install.sh, CMake and pkg-config consumers (tests/cpp/package/run.sh)" \
    bash tests/cpp/package/run.sh
step "chat server (tests/server: nibble-serve through the openai client; its page in headless chromium)" \
    env NIBBLE_LLAMA_Q4_DIR="$NIBBLE_LLAMA_Q4_DIR" NIBBLE_LLAMA_FP32_DIR="$NIBBLE_LLAMA_FP32_DIR" .venv/bin/python -m pytest -q tests/server
step "Ray Serve (tests/ray: examples/ray on a 2-node local Ray cluster; scripts/ray-serve.sh)" \
    env NIBBLE_LLAMA_Q4_DIR="$NIBBLE_LLAMA_Q4_DIR" .venv/bin/python -m pytest -q --durations=0 tests/ray
# onnxruntime-genai runs in its own venv (it brings the onnxruntime it runs on); the model is built by its builder
# when missing and cached under .cache/genai (the step above built it; the builder's venv, torch with PyPI's CUDA
# wheels, is ~5.7 GB unpacked: ~1 min 40 s to make from the package registry on the 2-core machine, the model ~20 s,
# the tests ~30 s).
genai_tests() {
    local out
    out=$(bash scripts/genai-model.sh) || return 1
    env NIBBLE_GENAI_MODEL_DIR="$(sed -n 's/^MODEL_DIR=//p' <<<"$out")" \
        "$(sed -n 's/^RUN_PYTHON=//p' <<<"$out")" -m pytest -q -p no:cacheprovider tests/genai
}
step "onnxruntime-genai (scripts/genai-model.sh; tests/genai: custom-op and EP frontends, KL to accuracy_level=1)" \
    genai_tests
step "C++ inference service example (tests/cpp/service/run.sh: examples/cpp on SmolLM2 q4, few tokens)" \
    bash tests/cpp/service/run.sh
if [ $quick = 0 ]; then
    for v in "${ORT_EXTRA[@]}"; do
        step "ORT integration test on $v (cargo test --workspace --test session)" \
            with_ort "$v" cargo test "${LOCKED[@]}" --workspace --test session
    done
    for v in "$ORT_NEW" $(bash scripts/setup.sh --ort-ep-python-versions); do
        step "ORT integration test through the execution provider on $v (NIBBLE_FRONTEND=ep)" \
            with_ort "$v" env NIBBLE_FRONTEND=ep cargo test "${LOCKED[@]}" --workspace --test session
    done
    step "pytest tests/python (onnxruntime $ORT_NEW)" run_pytest
    # The same suites through the execution-provider frontend: every group of the parity matrix (the wide subset;
    # the custom-op pass above runs all of it on the same kernels), the malformed models, the behaviour tests
    # (override, accuracy default, concurrency, thread counts, optimization levels) and the EP's own tests, on
    # ORT 1.31.1 and on the oldest runtime with the EP kernel API (its Python package ahead of the venv's).
    # On 1.24 only the matrix's ORT-oracle half and one override test expect 1.31's built-in kernel, so they
    # are left out there.
    step "pytest through the execution provider on $ORT_NEW (NIBBLE_FRONTEND=ep)" \
        env NIBBLE_FRONTEND=ep NIBBLE_PARITY_SUBSET=wide bash -c "$(declare -f run_pytest); run_pytest \
        tests/python/test_parity.py tests/python/test_malformed.py tests/python/test_ep.py"
    for v in $(bash scripts/setup.sh --ort-ep-python-versions); do
        step "pytest through the execution provider on $v (NIBBLE_FRONTEND=ep)" \
            env NIBBLE_FRONTEND=ep PYTHONPATH="$ROOT/.cache/ort/$v/python" bash -c "$(declare -f run_pytest); \
            run_pytest tests/python/test_parity.py tests/python/test_malformed.py tests/python/test_ep.py \
            -k 'not test_parity[ and not test_override_off_runs_orts_kernel'"
    done
    # The ORT integration test and the Python parity/malformed tests again on each kernel rung and family this CPU
    # runs besides the default: every kernel is proven through ORT, not only in the kernel suite (which runs every
    # family over the edge-case taxonomy and generated shapes): the wide subset of the parity matrix, every group
    # of it on four shapes (~100 s less than the whole matrix four times over).
    for forced in "${FORCED[@]}"; do
        step "forced $forced: ORT integration test on $ORT_NEW" \
            env "$forced" NIBBLE_ORT_DYLIB="$(ort_dylib $ORT_NEW)" NIBBLE_ORT_VERSION=$ORT_NEW \
            cargo test "${LOCKED[@]}" --workspace --test session
        step "forced $forced: pytest parity + malformed" \
            env "$forced" NIBBLE_PARITY_SUBSET=wide bash -c "$(declare -f run_pytest); \
            run_pytest tests/python/test_parity.py tests/python/test_malformed.py"
    done
    # The wheels (built above): the x86_64 one in a fresh venv with only onnxruntime and the test requirements, its
    # library also through the Rust integration test; the aarch64 one is what the aarch64 Python tests load under
    # qemu (scripts/aarch64/python-aarch64.sh).
    wheel_x86=$(ls "$TARGET"/wheels/nibble_ort-*-py3-none-manylinux_2_28_x86_64.whl 2>/dev/null | head -1)
    step "x86_64 wheel in a fresh venv (tests/python/test-wheel.sh)" bash tests/python/test-wheel.sh "${wheel_x86:-missing.whl}"
    for v in $(bash scripts/setup.sh --ort-python-versions); do
        step "x86_64 wheel in a fresh venv with onnxruntime $v (tests/python/test-wheel.sh --ort $v)" \
            bash tests/python/test-wheel.sh "${wheel_x86:-missing.whl}" --ort "$v"
    done
    step "ORT integration test on the wheel's library (glibc 2.28 build)" \
        env NIBBLE_LIB="$TARGET/wheel-build/x86_64-unknown-linux-gnu/release/libnibble_ort.so" \
        NIBBLE_ORT_DYLIB="$(ort_dylib $ORT_NEW)" NIBBLE_ORT_VERSION=$ORT_NEW \
        cargo test "${LOCKED[@]}" --workspace --test session
else
    for v in "${ORT_EXTRA[@]}"; do skip "ORT integration test on $v (--quick)"; done
    skip "pytest tests/python (--quick)"
    skip "forced rungs and families (--quick)"
    skip "aarch64 kernel tests (--quick)"
fi

# ------------------------------------------------------------------ summary
printf '\n%s==> summary%s (%ds total)\n' "$B" "$N" $((SECONDS - T0))
printf '    %s\n' "${SUMMARY[@]}"
if [ $failed = 0 ]; then
    echo "ALL PASSED"
else
    for entry in "${FAILED_LOGS[@]}"; do
        printf '\n==> the end of the failed step "%s" (whole log: %s)\n' "${entry%%$'\t'*}" "${entry#*$'\t'}"
        tail -n 30 "${entry#*$'\t'}" | sed 's/^/    | /'
    done
    printf '\n'
    printf '%s\n' "${SUMMARY[@]}" | grep '^FAIL' | sed 's/^/    /'
    echo "FAILED"
fi
exit $failed
