#!/usr/bin/env python3
"""plot_ratios.py - one PNG of nibble's speed against ORT's built-in MatMulNBits from bench_matmulnbits.py JSONs.

  plot_ratios.py out.png run1.json [run2.json ...]

One panel per JSON file (its settings: block size, zero points, accuracy level, as the file's records say),
x = shape, one bar per (M, threads[, dtype]); y = ORT time / nibble time ("x builtin", 1.0 = as fast as ORT,
drawn as a line). Needs matplotlib (`.venv/bin/pip install matplotlib==3.9.2`).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def records(path):
    with open(path) as fh:
        rs = [r for r in json.load(fh)["results"] if r.get("x_builtin") is not None and not r.get("rotating")]
    if not rs:
        sys.exit(f"{path}: no records with an ORT ratio (x builtin)")
    return rs


def title(rs):
    r = rs[0]
    zp = "asymmetric" if r["asym"] else "symmetric"
    dtypes = sorted({x.get("dtype", "float32") for x in rs})
    return f"block {r['bs']}, {zp}, accuracy_level {r['acc']}, A {'/'.join(dtypes)}"


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, files = sys.argv[1], sys.argv[2:]
    fig, axes = plt.subplots(len(files), 1, figsize=(15, 4.2 * len(files)), squeeze=False)
    for ax, path in zip(axes[:, 0], files):
        rs = records(path)
        shapes = list(dict.fromkeys(f"{r['label']}\n{r['K']}x{r['N']}" for r in rs))
        multi_dtype = len({r.get("dtype", "float32") for r in rs}) > 1
        series = list(
            dict.fromkeys((r["M"], r["threads"], r.get("dtype", "float32") if multi_dtype else None) for r in rs)
        )
        width = 0.8 / len(series)
        for i, (m, thr, dt) in enumerate(series):
            ys = []
            for s in shapes:
                v = [
                    r["x_builtin"]
                    for r in rs
                    if f"{r['label']}\n{r['K']}x{r['N']}" == s
                    and (r["M"], r["threads"]) == (m, thr)
                    and (dt is None or r.get("dtype", "float32") == dt)
                ]
                ys.append(sorted(v)[len(v) // 2] if v else 0)
            label = f"M={m}, {thr} thr" + (f", {dt}" if dt else "")
            ax.bar([x + i * width for x in range(len(shapes))], ys, width, label=label)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(shapes))], shapes, fontsize=8)
        ax.set_ylabel("x ORT (ORT time / nibble time)")
        ax.set_title(f"{path.split('/')[-1]}: {title(rs)}")
        ax.legend(fontsize=7, ncol=max(1, len(series) // 2), loc="upper left")
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
