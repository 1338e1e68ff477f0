# prepare.sh — sourced by scripts/demo.sh and scripts/serve.sh (not run on its own): what both do before their
# program starts. Needs ROOT, TARGET, LOCKED and a die() from the caller.
#   check_options NAME SOURCE SED_SCRIPT MIN ARGS...  every --option in ARGS must be one of the program's, whose
#       names are read from its Rust source (so the list cannot drift); sets OPTIONS and GIVEN (the ones given)
#   check_prerequisites   what the scripts do not install (README, "Prerequisites"): says what to run instead
#   prepare               setup (--no-extra-ort), one build of library + driver + server, the SmolLM2 conversion

has() { local a; for a in "${@:2}"; do [ "$a" = "$1" ] && return 0; done; return 1; }

check_options() {
    local name=$1 source=$2 script=$3 min=$4 a
    shift 4
    mapfile -t OPTIONS < <(sed -n "$script" "$source" | tr _ -)
    [ "${#OPTIONS[@]}" -gt "$min" ] || die "could not read $name's options from $source"
    GIVEN=()
    for a in "$@"; do
        case "$a" in
            -h|--help|-V|--version) ;;
            --*=*) has "${a%%=*}" "${OPTIONS[@]}" || die "unknown option ${a%%=*} ($name has: ${OPTIONS[*]})"
                   GIVEN+=("${a%%=*}") ;;
            --*) has "$a" "${OPTIONS[@]}" || die "unknown option $a ($name has: ${OPTIONS[*]})"
                 GIVEN+=("$a") ;;
        esac
    done
}

check_prerequisites() {
    command -v rustup >/dev/null || die "rustup not found: install Rust from https://rustup.rs \
(curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh), then open a new shell or run: . ~/.cargo/env"
    command -v "${PYTHON:-python3}" >/dev/null || die "python3 not found: install Python 3.11+ \
(Debian/Ubuntu: sudo apt-get install python3 python3-venv)"
    "${PYTHON:-python3}" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
        || die "$("${PYTHON:-python3}" --version 2>&1) is too old: Python 3.11+ is needed (set PYTHON=/path/to/python3.11)"
    command -v cc >/dev/null || die "no C compiler/linker (cc) found: Rust needs one to link \
(Debian/Ubuntu: sudo apt-get install gcc)"
}

prepare() {
    echo "==> setup (scripts/setup.sh --no-extra-ort)"
    bash scripts/setup.sh --no-extra-ort
    echo "==> build (cargo build-release: -p nibble-ort -p nibble-llama -p nibble-serve)"
    # the selection every script builds (.cargo/config.toml): no build invalidates another's
    cargo build-release "${LOCKED[@]}"
    echo "==> convert SmolLM2-135M-Instruct (scripts/convert-smollm2.sh)"
    bash scripts/convert-smollm2.sh "$TARGET/llama"
}
