#!/usr/bin/env bash
# run.sh — the C++ inference service example (examples/cpp) built and run as a user would:
#   1. its system packages (g++, pkg-config, libpcre2-dev, nlohmann-json3-dev: scripts/setup.sh installs them);
#   2. nibble installed into a fresh prefix (scripts/install.sh), an ONNX Runtime tree laid out like ORT's release
#      tarball (include/ = the vendored 1.24 C/C++ headers, which have the EP API; lib/ = the 1.31.1 runtime);
#   3. cmake configure + build (cmake from .venv, tests/python/requirements.txt);
#   4. the tokenizer against Hugging Face tokenizers (check_tokenizer.py);
#   5. the service on the SmolLM2 q4 model (few tokens): several requests over one session from 2-3 workers,
#      both frontends, the chat prompt with and without --system, a sampled request, ORT's own kernels; every
#      request's prompt ids and generated ids must equal the Rust driver's (examples/llama) for the same prompt
#      and settings (check_service.py), and the JSON must carry TTFT / decode tok/s p50 and p95; SIGINT during a
#      burst ends cleanly with the summary;
#   6. the same source built against Debian's ORT_API_VERSION 21 headers (no EP API): custom-op, same ids;
#   7. its errors: a missing model, a bad flag, a bad --top-p, negative or out-of-range counts, a prompts file
#      without prompts, a library that does not exist, --frontend ep in the API-21 build, and a binary built with
#      the 1.24 headers on ORT 1.23.2 (refused by name).
# Needs the release build (target/release/{libnibble_ort.so,nibble-info,nibble-llama}), .cache/ort/1.31.1 and the
# SmolLM2 model directory (scripts/convert-smollm2.sh target/llama), as scripts/test.sh makes them.
# Env: CARGO_TARGET_DIR, NIBBLE_LLAMA_Q4_DIR (default target/llama/smollm2-q4), ORT_LOG (default fatal).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
cd "$root"
say() { printf '[cpp-service] %s\n' "$*"; }
die() { printf '[cpp-service] ERROR: %s\n' "$*" >&2; exit 1; }

target=${CARGO_TARGET_DIR:-$root/target}
out=$target/cpp-service
model=${NIBBLE_LLAMA_Q4_DIR:-$target/llama/smollm2-q4}
ort_version=1.31.1
ort_lib=$root/.cache/ort/$ort_version/libonnxruntime.so.$ort_version
cmake=$root/.venv/bin/cmake
py=$root/.venv/bin/python
export ORT_LOG=${ORT_LOG:-fatal}
for f in "$target/release/libnibble_ort.so" "$target/release/nibble-llama" "$ort_lib" "$model/model.onnx" "$cmake"; do
    [ -e "$f" ] || die "$f missing (scripts/setup.sh, cargo build --release -p nibble-ort -p nibble-llama, scripts/convert-smollm2.sh)"
done

# ------------------------------------------------------------------ 1. system packages (scripts/setup.sh)
command -v g++ >/dev/null && command -v pkg-config >/dev/null && pkg-config --exists libpcre2-8 &&
    [ -f /usr/include/nlohmann/json.hpp ] ||
    die "needs g++, pkg-config, libpcre2-dev and nlohmann-json3-dev (scripts/setup.sh installs them with apt)"

# ------------------------------------------------------------------ 2. nibble prefix, ORT tree
rm -rf "$out/prefix" "$out/ort"
bash scripts/install.sh --prefix "$out/prefix" --no-build | sed 's/^/[cpp-service] /'
mkdir -p "$out/ort/lib"
ln -s "$root/third_party/onnxruntime-1.24/include" "$out/ort/include"
ln -s "$ort_lib" "$out/ort/lib/libonnxruntime.so.1"
ln -s libonnxruntime.so.1 "$out/ort/lib/libonnxruntime.so"

# ------------------------------------------------------------------ 3. build
t0=$SECONDS
"$cmake" -S examples/cpp -B "$out/build" -DCMAKE_PREFIX_PATH="$out/prefix" -DORT_ROOT="$out/ort" \
    > "$out/configure.log" 2>&1 || { cat "$out/configure.log"; die "cmake configure failed"; }
"$cmake" --build "$out/build" -j2 > "$out/build.log" 2>&1 || { cat "$out/build.log"; die "build failed"; }
if grep -q "warning:" "$out/build.log"; then cat "$out/build.log"; die "the build has warnings"; fi
svc=$out/build/nibble-llama-service
say "built ${svc#"$root"/} ($((SECONDS - t0)) s)"

# ------------------------------------------------------------------ 4. tokenizer
"$py" tests/cpp/service/check_tokenizer.py "$svc" "$model" | sed 's/^/[cpp-service] /'

# ------------------------------------------------------------------ 5. generation against the Rust driver
q1="What is the capital of France, and why is it famous?"
q2="Name three primary colors."
drv() {  # drv OUT.json ARGS...: the Rust driver, same runtime and library
    local o=$1
    shift
    NIBBLE_ORT_DYLIB=$ort_lib "$target/release/nibble-llama" --model "$model" --lib "$target/release/libnibble_ort.so" \
        --max-new-tokens 8 --quiet --json "$o" "$@" > "$o.log" 2>&1 || { cat "$o.log"; die "nibble-llama $* failed"; }
}
run_svc() {  # run_svc OUT.json ARGS...
    local o=$1
    shift
    "$svc" --model "$model" --max-new-tokens 8 --quiet --json "$o" "$@" > "$o.log" 2>&1 ||
        { cat "$o.log"; die "nibble-llama-service $* failed"; }
    grep -E "^(TTFT|decode|[0-9]+ requests)" "$o.log" | sed 's/^/[cpp-service]   /'
}
mkdir -p "$out/runs"
r=$out/runs
drv "$r/drv-q1.json" --prompt "$q1"
drv "$r/drv-q2.json" --prompt "$q2"
drv "$r/drv-q2-sys.json" --prompt "$q2" --system "Answer in one word."
drv "$r/drv-q1-sampled.json" --prompt "$q1" --temperature 0.8 --top-p 0.9 --top-k 40 --seed 7
drv "$r/drv-q1-sampled-8.json" --prompt "$q1" --temperature 0.8 --top-p 0.9 --top-k 40 --seed 8

say "service: ep frontend, 5 requests, 2 workers, greedy"
run_svc "$r/svc-ep.json" --frontend ep --prompt "$q1" --prompt "$q2" --requests 5 --concurrency 2
say "service: custom-op frontend, 4 requests, 3 workers, --system"
run_svc "$r/svc-custom-op.json" --frontend custom-op --prompt "$q2" --requests 4 --concurrency 3 --threads 1 \
    --system "Answer in one word."
say "service: sampled (temperature 0.8, top-p 0.9, top-k 40, seed 7), 2 requests"
run_svc "$r/svc-sampled.json" --prompt "$q1" --requests 2 --concurrency 2 --temperature 0.8 --top-p 0.9 --top-k 40 --seed 7
say "service: ORT's own kernels (--no-nibble)"
run_svc "$r/svc-ort.json" --no-nibble --prompt "$q1" --requests 2 --concurrency 2
"$py" tests/cpp/service/check_service.py \
    --service "$r/svc-ep.json" --frontend ep --expect "$q1=$r/drv-q1.json" --expect "$q2=$r/drv-q2.json" \
    --service "$r/svc-custom-op.json" --frontend custom-op --expect "$q2=$r/drv-q2-sys.json" \
    --service "$r/svc-sampled.json" --frontend ep --expect "0=$r/drv-q1-sampled.json" --expect "1=$r/drv-q1-sampled-8.json" \
    --service "$r/svc-ort.json" --frontend none --expect-prompt-only "$q1=$r/drv-q1.json" | sed 's/^/[cpp-service] /'

say "service: SIGINT during a burst ends the answer in flight and drops the queue"
"$svc" --model "$model" --max-new-tokens 64 --quiet --json "$r/svc-int.json" --requests 40 --concurrency 1 \
    > "$r/svc-int.log" 2>&1 &
pid=$!
# Waits while the service lives (a loaded machine only makes it slower); the cap only stops a hung one.
for _ in $(seq 6000); do
    grep -q "^request 0:" "$r/svc-int.log" && break
    kill -0 "$pid" 2>/dev/null || { cat "$r/svc-int.log"; die "the service ended before its first answer"; }
    sleep 0.1
done
grep -q "^request 0:" "$r/svc-int.log" || { kill -9 "$pid"; cat "$r/svc-int.log"; die "no answer within 600 s"; }
kill -INT "$pid"
rc=0
wait "$pid" || rc=$?
[ "$rc" = 0 ] || { cat "$r/svc-int.log"; die "interrupted service exited $rc"; }
"$py" - "$r/svc-int.json" <<'PY' | sed 's/^/[cpp-service] /'
import json, sys
d = json.load(open(sys.argv[1]))
ran = [r for r in d["results"] if r["ran"]]
assert d["failed"] == 0 and d["not_run"] > 0 and len(ran) + d["not_run"] == 40, d
assert all("generated_token_ids" in r for r in ran), ran
print(f"interrupted after {len(ran)} request(s) (last stop: {ran[-1]['stop']}), {d['not_run']} not run, summary written")
PY
grep -q "^interrupted:" "$r/svc-int.log" || { cat "$r/svc-int.log"; die "no 'interrupted' line"; }

# ------------------------------------------------------------------ 6. built against API-21 headers (no EP API)
# Debian's libonnxruntime-dev headers (tests/cpp/run.sh fetched them): the custom-op-only build.
bash scripts/fetch-ort-headers.sh "$root/.cache/ort-headers" | sed 's/^/[cpp-service] /'
mkdir -p "$out/ort-api21"
ln -sfn "$root/.cache/ort-headers/include/onnxruntime" "$out/ort-api21/include"
ln -sfn "$out/ort/lib" "$out/ort-api21/lib"
"$cmake" -S examples/cpp -B "$out/build-api21" -DCMAKE_PREFIX_PATH="$out/prefix" -DORT_ROOT="$out/ort-api21" \
    > "$out/configure-api21.log" 2>&1 || { cat "$out/configure-api21.log"; die "cmake configure (API 21) failed"; }
"$cmake" --build "$out/build-api21" -j2 > "$out/build-api21.log" 2>&1 || { cat "$out/build-api21.log"; die "build (API 21) failed"; }
if grep -q "warning:" "$out/build-api21.log"; then cat "$out/build-api21.log"; die "the API-21 build has warnings"; fi
svc21=$out/build-api21/nibble-llama-service
say "service built against ORT_API_VERSION 21 headers: auto -> custom-op"
"$svc21" --model "$model" --max-new-tokens 8 --quiet --json "$r/svc-api21.json" --prompt "$q2" > "$r/svc-api21.log" 2>&1 ||
    { cat "$r/svc-api21.log"; die "the API-21 build failed to serve"; }
"$py" tests/cpp/service/check_service.py --service "$r/svc-api21.json" --frontend custom-op \
    --expect "$q2=$r/drv-q2.json" | sed 's/^/[cpp-service] /'

# A binary built with the 1.24 headers, linked against ORT 1.23.2: it must refuse the older runtime by name
# (without the check, the C++ API's null table crashed it).
old_ort=$root/.cache/ort/1.23.2/libonnxruntime.so.1.23.2
[ -e "$old_ort" ] || die "$old_ort missing (scripts/setup.sh)"
mkdir -p "$out/ort-old/lib"
ln -sfn "$root/third_party/onnxruntime-1.24/include" "$out/ort-old/include"
ln -sfn "$old_ort" "$out/ort-old/lib/libonnxruntime.so.1"
ln -sfn libonnxruntime.so.1 "$out/ort-old/lib/libonnxruntime.so"
"$cmake" -S examples/cpp -B "$out/build-old-ort" -DCMAKE_PREFIX_PATH="$out/prefix" -DORT_ROOT="$out/ort-old" \
    > "$out/configure-old-ort.log" 2>&1 || { cat "$out/configure-old-ort.log"; die "cmake configure (ORT 1.23.2) failed"; }
"$cmake" --build "$out/build-old-ort" -j2 > "$out/build-old-ort.log" 2>&1 || { cat "$out/build-old-ort.log"; die "build (ORT 1.23.2) failed"; }
svc_old=$out/build-old-ort/nibble-llama-service

# ------------------------------------------------------------------ 7. errors
expect_fail() {  # expect_fail CODE PATTERN ARGS... (the API-24 build; expect_fail_21: the API-21 one)
    local code=$1 pattern=$2 rc=0
    shift 2
    "${bin:-$svc}" "$@" > "$r/err.log" 2>&1 || rc=$?
    [ "$rc" = "$code" ] || { cat "$r/err.log"; die "nibble-llama-service $*: exit $rc, expected $code"; }
    grep -q -- "$pattern" "$r/err.log" || { cat "$r/err.log"; die "nibble-llama-service $*: no \"$pattern\" in its message"; }
    say "refused as expected: $* -> $(grep -m1 -- "$pattern" "$r/err.log" | cut -c1-110)"
}
expect_fail_21() { bin=$svc21 expect_fail "$@"; }
expect_fail_old() { bin=$svc_old expect_fail "$@"; }
expect_fail 1 "/nonexistent/dir does not exist" --model /nonexistent/dir
expect_fail 2 "unknown argument --bogus" --model "$model" --bogus
expect_fail 2 "expected auto, ep or custom-op" --model "$model" --frontend plugin
expect_fail 2 "must be in (0, 1]" --model "$model" --top-p 0
expect_fail_21 1 "no plugin EP API (22+)" --model "$model" --frontend ep --requests 1
expect_fail_old 1 "ONNX Runtime it runs on (1.23.2) is older" --model "$model" --requests 1
expect_fail 2 "must not be negative" --model "$model" --requests -1
expect_fail 2 "must be in 1..1024" --model "$model" --concurrency 0
printf '\n  \r\n' > "$r/blank-prompts.txt"
expect_fail 2 "no prompt in it" --model "$model" --prompts-file "$r/blank-prompts.txt"
expect_fail 1 "cannot load the nibble library /nonexistent/libnibble_ort.so" --model "$model" --lib /nonexistent/libnibble_ort.so
say "ok"
