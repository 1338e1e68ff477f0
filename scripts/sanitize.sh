#!/usr/bin/env bash
# sanitize.sh — memory-error checks of nibble's own code on x86_64:
#
#   scripts/sanitize.sh [--asan] [--valgrind] [--valgrind-session]     (default: --asan --valgrind)
#
#   --asan      AddressSanitizer (rustc -Zsanitizer=address; stable Rust with RUSTC_BOOTSTRAP=1, the ASan runtime
#               ships with the toolchain) over the kernel suite (every family this CPU runs against the reference,
#               the property tests, packing) and the provider's unit tests; its own target dir, target/asan.
#   --valgrind  valgrind memcheck over the Rust ORT integration test (provider/tests/session.rs: both frontends,
#               ORT 1.31.1, the release libnibble_ort.so) and over a parity subset through ORT from Python
#               (tests/python/test_parity.py, NIBBLE_PARITY_SUBSET=quick, PYTHONMALLOC=malloc). An error counts
#               against nibble when a frame of its stack is in libnibble_ort.so or a nibble function; the others
#               (the loader's, ORT's, CPython's) are listed, not failed on.
#   --valgrind-session  only the ORT integration test's part of --valgrind (~30 s: scripts/test.sh runs it).
#   --session-test-bin  only build the release ORT integration test (within build-release's selection) and print
#               its executable's path: scripts/test.sh builds it early and hands it back as NIBBLE_SESSION_TEST_BIN.
#
# Exit status 1 when ASan reports anything or memcheck finds an error in nibble's frames. Logs: target/sanitize/.
# Needs scripts/setup.sh (the .venv, ORT 1.31.1) and tests/fixtures/make_fixtures.py's fixtures; valgrind from
# Debian (scripts/setup.sh installs it). Takes ~5 min (ASan, most of it the instrumented build) and ~3 min
# (memcheck) on 2 cores.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
asan=0 vg=0 parity=1 print_bin=0
for a in "$@"; do
    case "$a" in
        --session-test-bin) print_bin=1 ;;
        --asan) asan=1 ;;
        --valgrind) vg=1 ;;
        --valgrind-session) vg=1 parity=0 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
        *) echo "sanitize.sh: unknown option $a (use --asan, --valgrind, --valgrind-session, --session-test-bin)" >&2; exit 2 ;;
    esac
done
# session_test_bin: builds the release ORT integration test within build-release's selection (cargo alias
# test-session-release: nothing else recompiles) and prints its executable.
session_test_bin() {
    local locked=(); [ -f Cargo.lock ] && locked=(--locked)
    cargo test-session-release -q "${locked[@]}" --no-run --message-format=json |
        python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "session":
        print(m["executable"])'
}
if [ $print_bin = 1 ]; then
    bin=$(session_test_bin)
    [ -x "$bin" ] || { echo "sanitize.sh: cargo test-session-release built no session test executable" >&2; exit 1; }
    echo "$bin"
    exit 0
fi
[ $asan = 0 ] && [ $vg = 0 ] && asan=1 vg=1
out=${CARGO_TARGET_DIR:-$root/target}/sanitize
mkdir -p "$out"
ort=$root/.cache/ort/1.31.1/libonnxruntime.so.1.31.1
[ -f "$ort" ] || { echo "sanitize.sh: $ort missing: run scripts/setup.sh" >&2; exit 1; }
export NIBBLE_ORT_DYLIB=$ort NIBBLE_ORT_VERSION=1.31.1 ORT_LOG=fatal
export NIBBLE_FIXTURES=${NIBBLE_FIXTURES:-${CARGO_TARGET_DIR:-$root/target}/fixtures}
[ -s "$NIBBLE_FIXTURES/manifest.txt" ] || .venv/bin/python tests/fixtures/make_fixtures.py --out "$NIBBLE_FIXTURES"
locked=(); [ -f Cargo.lock ] && locked=(--locked)
status=0

if [ $asan = 1 ]; then
    echo "== AddressSanitizer: nibble-kernels (all tests) and nibble-ort (unit tests)"
    # --target keeps the flags off build scripts and proc macros; the ORT integration test needs an instrumented
    # ORT host, so it is memcheck's (below).
    if RUSTC_BOOTSTRAP=1 RUSTFLAGS="-Zsanitizer=address" ASAN_OPTIONS=detect_leaks=1 \
        CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}/asan" \
        cargo test -q "${locked[@]}" --release --target x86_64-unknown-linux-gnu -p nibble-kernels \
            > "$out/asan.log" 2>&1 &&
       RUSTC_BOOTSTRAP=1 RUSTFLAGS="-Zsanitizer=address" ASAN_OPTIONS=detect_leaks=1 \
        CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}/asan" \
        cargo test -q "${locked[@]}" --release --target x86_64-unknown-linux-gnu -p nibble-ort --lib \
            >> "$out/asan.log" 2>&1; then
        grep -E "^test result" "$out/asan.log" | sed 's/^/   /'
        echo "   AddressSanitizer: no report ($out/asan.log)"
    else
        grep -E "ERROR: AddressSanitizer|SUMMARY: AddressSanitizer|panicked|test result" "$out/asan.log" | head -20 >&2
        echo "FAIL: AddressSanitizer or a test failed ($out/asan.log)" >&2
        status=1
    fi
fi

# memcheck LOG: the errors of a valgrind log, split into nibble's (a frame in libnibble_ort.so or a nibble
# function) and the others; prints both counts and nibble's stacks; fails on any of nibble's.
memcheck_report() {
    python3 - "$1" <<'EOF'
import re, sys
log = open(sys.argv[1]).read()
ours, others = [], {}
for block in re.split(r"\n==\d+== \n", log):
    lines = [re.sub(r"^==\d+== ?", "", l) for l in block.splitlines() if l.startswith("==")]
    if not lines or not re.match(r"(Invalid|Conditional|Use of uninit|Syscall param|Source and destination|Mismatched"
                                 r"|Argument|.*definitely lost)", lines[0]):
        continue
    frames = [l for l in lines[1:] if re.match(r"\s*(at|by) 0x", l)]
    if any("libnibble_ort" in f or "nibble" in f.split(":", 1)[-1] for f in frames):
        ours.append("\n    ".join(lines[:14]))
    else:
        where = next((f.split("(in ")[-1].rstrip(")") for f in frames if "(in " in f), frames[0] if frames else "?")
        key = f"{lines[0].split(' (')[0][:60]} in {where.strip()}"
        others[key] = others.get(key, 0) + 1
print(f"   {len(ours)} error(s) in nibble's frames; {sum(others.values())} elsewhere:")
for k, v in sorted(others.items()):
    print(f"     {v} x {k}")
for o in ours:
    print("   NIBBLE: " + o)
sys.exit(1 if ours else 0)
EOF
}


if [ $vg = 1 ]; then
    command -v valgrind > /dev/null ||
        { echo "sanitize.sh: valgrind is not installed (scripts/setup.sh installs it: apt-get install valgrind)" >&2; exit 1; }
    export NIBBLE_LIB=${CARGO_TARGET_DIR:-$root/target}/release/libnibble_ort.so
    if [ -n "${NIBBLE_SESSION_TEST_BIN:-}" ]; then
        # Built by the caller (scripts/test.sh, before its background aarch64 step, whose cross-builds hold
        # target/release's build lock for minutes): no cargo here.
        [ -x "$NIBBLE_SESSION_TEST_BIN" ] && [ -f "$NIBBLE_LIB" ] ||
            { echo "sanitize.sh: NIBBLE_SESSION_TEST_BIN=$NIBBLE_SESSION_TEST_BIN or $NIBBLE_LIB missing" >&2; exit 1; }
        bin=$NIBBLE_SESSION_TEST_BIN
    else
        # The selection every script builds (.cargo/config.toml: -p nibble-ort alone would recompile the library).
        cargo build-release -q "${locked[@]}"
        bin=$(session_test_bin)
    fi
    vgopts=(--tool=memcheck --error-exitcode=0 --num-callers=40 --leak-check=no)
    for fe in custom-op ep; do
        echo "== valgrind memcheck: the ORT integration test (provider/tests/session.rs), NIBBLE_FRONTEND=$fe"
        NIBBLE_FRONTEND=$fe valgrind "${vgopts[@]}" --log-file="$out/memcheck-session-$fe.log" "$bin" --test-threads 1 \
            > "$out/session-$fe.out" 2>&1 || { tail -5 "$out/session-$fe.out" >&2; echo "FAIL: the session test failed under valgrind" >&2; status=1; }
        grep -E "^test result" "$out/session-$fe.out" | sed 's/^/   /'
        memcheck_report "$out/memcheck-session-$fe.log" || status=1
    done
    [ $parity = 1 ] || { [ $status = 0 ] && echo "sanitize.sh: no memory error in nibble's code"; exit $status; }
    echo "== valgrind memcheck: tests/python/test_parity.py (quick subset) through ORT 1.31.1"
    NIBBLE_LIB=$NIBBLE_LIB NIBBLE_PARITY_SUBSET=quick PYTHONMALLOC=malloc \
        valgrind "${vgopts[@]}" --log-file="$out/memcheck-parity.log" \
        .venv/bin/python -m pytest -q -p no:cacheprovider tests/python/test_parity.py > "$out/parity.out" 2>&1 ||
        { tail -5 "$out/parity.out" >&2; echo "FAIL: the parity subset failed under valgrind" >&2; status=1; }
    tail -1 "$out/parity.out" | sed 's/^/   /'
    memcheck_report "$out/memcheck-parity.log" || status=1
fi
[ $status = 0 ] && echo "sanitize.sh: no memory error in nibble's code"
exit $status
