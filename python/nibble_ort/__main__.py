"""``python -m nibble_ort [--json] [--library-path] [--include-path]``: what nibble detects and chooses on this CPU
(the same as the ``nibble-info`` tool), or where the package's library and header are."""

from __future__ import annotations

import argparse
import json

import nibble_ort


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m nibble_ort",
        description="nibble's version, the ONNX Runtime versions it supports, the CPU features it detects, its "
        "kernel ladder and which kernel family each compute path, bit width and block size gets "
        "(NIBBLE_ISA / NIBBLE_FAMILIES apply)",
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--json", action="store_true", help="the same as one JSON object")
    group.add_argument("--library-path", action="store_true", help="print the path of libnibble_ort.so and exit")
    group.add_argument("--include-path", action="store_true", help="print the directory of nibble_ort.h and exit")
    args = parser.parse_args(argv)
    if args.library_path:
        print(nibble_ort.get_library_path())
    elif args.include_path:
        print(nibble_ort.get_include_path())
    elif args.json:
        print(json.dumps(nibble_ort.info(), indent=1))
    else:
        print(nibble_ort.info_text(), end="")
        print(f"library: {nibble_ort.get_library_path()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
