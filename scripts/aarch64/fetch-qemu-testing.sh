#!/usr/bin/env bash
# fetch-qemu-testing.sh — a recent qemu-aarch64 (>= 10.1: SVE2 + SME2 in -cpu max, the neoverse-v1 / neoverse-n2 /
# cortex-a710 models) from Debian's testing suite, for the SVE/SME tests (scripts/test-aarch64.sh). Debian's
# qemu-user package there is a static-pie build without dependencies (and without -plugin: the system's qemu 7.2
# counts instructions with the plugin, this one with its exec log: scripts/aarch64/aarch64-icount.sh --qemu 11).
#
# How: a private apt configuration under the project's cache ($A64ENV/apt-testing/: its own sources list, lists and
# cache directories, passed as Dir::Etc::SourceList, Dir::Etc::SourceParts, Dir::State::Lists, Dir::Cache); nothing in
# the system's apt configuration changes and nothing is installed. The mirror URI is the one this machine's own apt
# sources use (scripts/debian-mirror.sh); the package's hash is checked by apt against the suite's signed Release
# (Signed-By the system's debian-archive-keyring). The .deb is unpacked and only usr/bin/qemu-aarch64 kept:
#     $A64ENV/qemu/<debian version>/qemu-aarch64      and the symlink $A64ENV/qemu/testing -> <debian version>
# Once fetched the binary is reused (the version does not move under the tests); --update fetches the suite's
# current package again.
#
# Usage: fetch-qemu-testing.sh [--update] [--min-version X.Y] [--print-path]
#   prints "[qemu-testing] ..." progress lines on stderr, and on stdout the path of the qemu-aarch64 binary
#   (--print-path: only that, for scripts: QEMU_A64=$(fetch-qemu-testing.sh --print-path)).
# Exit status: 0 with a usable qemu-aarch64 of at least --min-version (default 10.1); 1 saying what failed otherwise.
# Env: A64ENV (default $HOME/.cache/a64env, as qemu-a64-run.sh), QEMU_TESTING_SUITE (default testing).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
A64ENV=${A64ENV:-$HOME/.cache/a64env}
SUITE=${QEMU_TESTING_SUITE:-testing}
update=0; min=10.1; quiet=0
while [ $# -gt 0 ]; do
    case "$1" in
        --update) update=1; shift ;;
        --min-version) min=$2; shift 2 ;;
        --print-path) quiet=1; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "fetch-qemu-testing.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
    esac
done
say() { printf '[qemu-testing] %s\n' "$*" >&2; }
fail() { printf '[qemu-testing] FAILED: %s\n' "$*" >&2; exit 1; }

# "11.1.2" >= "10.1"?
version_at_least() {
    [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -1)" = "$2" ]
}
# The version qemu-aarch64 $1 reports ("11.1.2"), or nothing.
qemu_version() {
    "$1" --version 2>/dev/null | sed -n '1s/.*version \([0-9][0-9.]*\).*/\1/p'
}
# Checks binary $1 and prints its path on stdout; fails saying why.
use() {
    local bin=$1 v
    [ -x "$bin" ] || fail "$bin is missing or not executable"
    v=$(qemu_version "$bin")
    [ -n "$v" ] || fail "$bin --version does not run or prints no version ($("$bin" --version 2>&1 | head -1))"
    version_at_least "$v" "$min" || fail "$bin is qemu $v, older than the $min needed (Debian $SUITE moved back?)"
    local models; models=$("$bin" -cpu help 2>/dev/null || true)
    grep -qw neoverse-v1 <<< "$models" || fail "$bin (qemu $v) lists no neoverse-v1 CPU model"
    [ $quiet = 1 ] || say "$("$bin" --version | head -1)"
    echo "$bin"
}

qdir=$A64ENV/qemu
cached() {
    if [ $update = 0 ] && [ -x "$qdir/testing/qemu-aarch64" ]; then
        [ $quiet = 1 ] || say "ok ($(readlink "$qdir/testing"), cached)"
        use "$qdir/testing/qemu-aarch64"
        exit 0
    fi
}
cached
# One fetch at a time: scripts/test-aarch64.sh's two lanes (the model checks and the Llama driver) can both reach
# here first on a fresh clone, and two apt-get runs on one private state fail on its lock. The second caller waits
# for the first and then finds its binary.
mkdir -p "$qdir"
exec 9> "$qdir/.fetch.lock"
flock 9 || fail "cannot lock $qdir/.fetch.lock"
cached

for tool in apt-get dpkg-deb; do
    command -v "$tool" >/dev/null || fail "$tool not found (this script needs Debian's apt and dpkg)"
done
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -s "$keyring" ] || fail "$keyring is missing (apt-get install debian-archive-keyring)"
mirror=$(bash "$here/../debian-mirror.sh") || fail "cannot tell the Debian mirror from this machine's apt sources"

apt=$A64ENV/apt-testing
mkdir -p "$apt/sources.list.d" "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/debs"
: > "$apt/sources.list"
printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: %s\n' "$mirror" "$SUITE" "$keyring" \
    > "$apt/sources.list.d/testing.sources"
O=(-o "Dir::Etc::SourceList=$apt/sources.list" -o "Dir::Etc::SourceParts=$apt/sources.list.d"
   -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o "Acquire::Languages=none")
log=$apt/apt.log
say "apt-get update (private configuration in $apt: Debian $SUITE main from $mirror)"
apt-get "${O[@]}" update > "$log" 2>&1 \
    || { sed 's/^/    /' "$log" >&2; fail "apt-get update of Debian $SUITE from $mirror (log above, $log)"; }
ver=$(apt-cache "${O[@]}" show qemu-user 2>/dev/null | sed -n 's/^Version: //p' | sort -V | tail -1)
[ -n "$ver" ] || fail "Debian $SUITE at $mirror has no qemu-user package for $(dpkg --print-architecture)"
# dpkg's version "1:11.1.2+ds-3" -> directory name "11.1.2+ds-3"
dir=$qdir/${ver#*:}
if [ -x "$dir/qemu-aarch64" ]; then
    say "qemu-user $ver already unpacked in $dir"
else
    say "apt-get download qemu-user=$ver ($(apt-cache "${O[@]}" show "qemu-user=$ver" | sed -n 's/^Size: //p' | head -1) bytes)"
    rm -f "$apt/debs"/qemu-user_*.deb
    (cd "$apt/debs" && apt-get "${O[@]}" download "qemu-user=$ver" >> "$log" 2>&1) \
        || { tail -20 "$log" | sed 's/^/    /' >&2; fail "apt-get download qemu-user=$ver (log above, $log)"; }
    deb=$(ls "$apt/debs"/qemu-user_*.deb 2>/dev/null | head -1)
    [ -n "$deb" ] || fail "apt-get download qemu-user=$ver left no .deb in $apt/debs"
    tmp=$(mktemp -d "$qdir.tmp.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$tmp" ./usr/bin/qemu-aarch64 \
        || fail "$deb holds no usr/bin/qemu-aarch64 (dpkg-deb -c $deb)"
    mkdir -p "$dir"
    mv -f "$tmp/usr/bin/qemu-aarch64" "$dir/qemu-aarch64"
    echo "$(basename "$deb")" > "$dir/SOURCE"
    rm -f "$deb"
fi
ln -sfn "${ver#*:}" "$qdir/testing"
use "$qdir/testing/qemu-aarch64"
