#!/usr/bin/env python3
"""pc-profile.py — a per-function instruction profile of the marked region of a qemu 11 count, libraries included.

qemu-user names on its Trace lines only the symbols of the main executable, so `sym=` cannot see into dlopen'ed
libraries (ORT, libnibble_ort.so). `aarch64-icount.sh --qemu 11 -p pcs=FILE` has qemu-exec-count.c write the
instructions executed inside the marked regions per translation-block pc, plus qemu's strace lines of openat and
mmap; this script finds each library's load address from those (the first mmap at offset 0 of the file's fd),
names every pc by the library's symbol table (`nm`) and prints the functions by instructions.

Usage: scripts/aarch64/pc-profile.py PCS_FILE [--top 40] [--divide R] [--prefix /usr/aarch64-linux-gnu]
  R: marked Runs, for per-Run figures; --prefix: where a guest path that is not on this machine is looked for
  (qemu-a64-run.sh's sysroots link lib to the cross toolchain's /usr/aarch64-linux-gnu/lib).
A block is charged to the function its first instruction lies in (a block never spans two functions' code but
for tail calls, which are rare in the counted loops).
"""
import argparse
import bisect
import os
import re
import subprocess
import sys
from collections import defaultdict


def symbols(path):
    """Sorted (address, name) of the defined functions in an ELF file (nm -C, demangled; the dynamic symbols
    where the file has no symbol table, as a stripped libc)."""
    syms = []
    for extra in ([], ["-D"]):
        out = subprocess.run(["nm", "-C", "--defined-only", *extra, path], capture_output=True, text=True)
        for line in out.stdout.splitlines() if out.returncode == 0 else []:
            parts = line.split(" ", 2)
            if len(parts) == 3 and parts[1] in "tTwWiI":
                syms.append((int(parts[0], 16), parts[2]))
        if syms:
            break
    syms.sort()
    return [a for a, _ in syms], [n for _, n in syms]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pcs")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--divide", type=float, default=1.0)
    ap.add_argument("--prefix", default="/usr/aarch64-linux-gnu")
    args = ap.parse_args()

    fd_path, maps, counts = {}, [], []
    open_re = re.compile(r'openat\([^,]*,"([^"]+)",.*\) = (\d+)')
    mmap_re = re.compile(r"mmap\(([^,]*),(\d+|0x[0-9a-f]+),[^,]*,[^,]*,(\d+),(\d+|0x[0-9a-f]+)\) = (0x[0-9a-f]+)")
    for line in open(args.pcs):
        if line.startswith("# "):
            m = open_re.search(line)
            if m:
                fd_path[int(m.group(2))] = m.group(1)
                continue
            m = mmap_re.search(line)
            if m and int(m.group(4), 0) == 0 and int(m.group(3)) in fd_path:
                path = fd_path[int(m.group(3))]
                if path.endswith(".so") or ".so." in path:
                    maps.append((int(m.group(5), 16), int(m.group(2), 0), path))
            continue
        pc, n = line.split()
        counts.append((int(pc, 16), int(n)))
    # Each library's first whole-file mapping (later ones at offset 0 of the same fd are its segments or another
    # process's reuse of the fd number; the loader's first reserves the span).
    seen, libs = set(), []
    for base, size, path in maps:
        if path not in seen:
            seen.add(path)
            local = path if os.path.exists(path) else args.prefix + path
            libs.append((base, size, path, *symbols(local)))
    by_fn = defaultdict(int)
    total = 0
    for pc, n in counts:
        total += n
        name = "?"
        for base, size, path, addrs, names in libs:
            if base <= pc < base + size:
                lib = path.rsplit("/", 1)[-1]
                i = bisect.bisect_right(addrs, pc - base) - 1
                name = f"{lib}: {names[i] if i >= 0 else '?'}"
                break
        else:
            name = "(main executable or unknown)"
        by_fn[name] += n
    d = args.divide
    print(f"{total / d:12.0f}  total (marked{', per Run' if d != 1 else ''})")
    for name, n in sorted(by_fn.items(), key=lambda x: -x[1])[: args.top]:
        print(f"{n / d:12.0f}  {100 * n / total:5.1f}%  {name[:150]}")


if __name__ == "__main__":
    sys.exit(main())
