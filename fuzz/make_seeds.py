#!/usr/bin/env python3
"""Writes the generated seeds of the structured fuzz targets (create, kernels) into fuzz/corpus/<target>/.

Their inputs are byte strings decoded by `arbitrary` into the targets' input structs (fields in order; u8 one byte,
u16/i64 little-endian, bool the low bit, Option a flag byte then the value, enums a u32 choosing the variant, the
trailing Vec<u8> the rest). All-zero bytes give the simplest valid node or problem; the others are deterministic
pseudo-random strings of a few lengths. The serve_request seeds are hand-written JSON files. Run from anywhere:
python3 fuzz/make_seeds.py
"""
import pathlib
import random

here = pathlib.Path(__file__).resolve().parent
rng = random.Random(0x6E6962626C65)
for target, lengths in (("create", (0, 64, 160, 400, 1200)), ("kernels", (0, 40, 96, 300))):
    d = here / "corpus" / target
    d.mkdir(parents=True, exist_ok=True)
    for i, n in enumerate(lengths):
        data = bytes(n) if i == 0 else bytes(rng.randrange(256) for _ in range(n))
        (d / f"seed-{i}").write_bytes(data if n else bytes(64))
