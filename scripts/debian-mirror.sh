#!/usr/bin/env bash
# debian-mirror.sh [--security] — the Debian archive URI this machine's own apt sources use, for the scripts that
# fetch Debian packages through a private apt configuration (scripts/fetch-ort-headers.sh,
# scripts/aarch64/aarch64-icount.sh): no mirror is written into the repository. Reads deb822 stanzas in
# /etc/apt/sources.list.d/*.sources (URIs: / Suites:) and one-line entries in /etc/apt/sources.list and
# /etc/apt/sources.list.d/*.list; prints the first URI whose suites are not -security ones (with --security: the
# first whose suites are). Exit status 1, saying so, when there is none.
set -euo pipefail
want=main
case "${1:-}" in
    --security) want=security ;;
    "") ;;
    *) echo "debian-mirror.sh: unknown argument $1 (usage: debian-mirror.sh [--security])" >&2; exit 2 ;;
esac
etc=${APT_ETC:-/etc/apt}   # for tests: another apt directory
# One "URI SUITES..." line per source, in apt's order.
sources() {
    local f
    for f in "$etc"/sources.list.d/*.sources; do
        [ -e "$f" ] || continue
        # deb822: stanzas separated by blank lines; fields "URIs:" and "Suites:" (several values each).
        awk 'function flush() { if (uris != "" && types ~ /(^| )deb( |$)/) { n = split(uris, u, " "); for (i = 1; i <= n; i++) print u[i], suites }
                                uris = ""; suites = ""; types = "" }
             /^[ \t]*#/ { next }
             /^[ \t]*$/ { flush(); next }
             tolower($1) == "types:" { $1 = ""; types = $0 }
             tolower($1) == "uris:" { $1 = ""; uris = $0 }
             tolower($1) == "suites:" { $1 = ""; suites = $0 }
             END { flush() }' "$f"
    done
    for f in "$etc"/sources.list "$etc"/sources.list.d/*.list; do
        [ -e "$f" ] || continue
        # deb [options] URI SUITE COMPONENTS...
        awk '$1 == "deb" { i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } print $i, $(i + 1) }' "$f"
    done
}
uri=$(sources | awk -v want="$want" '{ sec = ($2 ~ /-security$/); if ((want == "security") == sec && $1 ~ /^(https?|file):/) { print $1; exit } }')
if [ -z "$uri" ]; then
    echo "debian-mirror.sh: no Debian ${want} archive URI in $etc/sources.list{,.d/*.sources,.d/*.list}" >&2
    exit 1
fi
echo "${uri%/}"
