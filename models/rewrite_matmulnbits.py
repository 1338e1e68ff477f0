#!/usr/bin/env python3
"""Rewrite MatMulNBits graphs: switch the op's domain, or quantize an fp32 graph's MatMuls with ORT's quantizer.

    # com.microsoft::MatMulNBits <-> nibble::MatMulNBits (weights untouched)
    python models/rewrite_matmulnbits.py domain --to nibble target/llama/smollm2-q4 target/llama/smollm2-q4-nibble
    # fp32 MatMul (constant B) -> MatMulNBits through onnxruntime.quantization's MatMulNBitsQuantizer
    python models/rewrite_matmulnbits.py quantize --bits 4 --block-size 32 --symmetric --accuracy-level 4 \\
        target/llama/smollm2-fp32 target/llama/smollm2-ortq4

IN and OUT are model directories (models/LLAMA_MODEL_DIR.md: tokenizer.json is copied and model_config.json's
"quantization" entry updated) or plain .onnx files. A com.microsoft graph runs on ORT's own kernel unless
libnibble_ort.so is registered; a nibble graph needs the library.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import onnx
from onnx import helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llama_onnx  # noqa: E402

DOMAINS = ("com.microsoft", "nibble")


def _paths(path: Path) -> tuple[Path, Path | None]:
    """(model.onnx, model dir or None) for a directory or a .onnx file."""
    if path.is_dir():
        return path / "model.onnx", path
    return path, None


def load(path: Path) -> tuple[onnx.ModelProto, Path | None]:
    model_path, directory = _paths(path)
    if not model_path.is_file():
        raise SystemExit(f"rewrite_matmulnbits: {model_path} does not exist")
    return onnx.load(model_path), directory


def save(model: onnx.ModelProto, out: Path, src_dir: Path | None, quantization: dict | None) -> None:
    """Writes OUT (a directory when IN was one, or when OUT has no .onnx suffix)."""
    nbytes = sum(len(t.raw_data) for t in model.graph.initializer)
    if out.suffix == ".onnx":
        out.parent.mkdir(parents=True, exist_ok=True)
        external = nbytes > llama_onnx.EXTERNAL_DATA_BYTES
        onnx.save_model(model, out, save_as_external_data=external, all_tensors_to_one_file=True,
                        location=out.name + ".data", size_threshold=1024)
        return
    config = None
    if src_dir is not None and (src_dir / "model_config.json").is_file():
        config = json.loads((src_dir / "model_config.json").read_text(encoding="utf-8"))
        config["quantization"] = quantization
    out.mkdir(parents=True, exist_ok=True)
    (out / "model_config.json").unlink(missing_ok=True)
    tmp = out / "model.onnx.tmp"
    external = nbytes > llama_onnx.EXTERNAL_DATA_BYTES
    (out / "model.onnx.data").unlink(missing_ok=True)
    onnx.save_model(model, tmp, save_as_external_data=external, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=1024)
    tmp.replace(out / "model.onnx")
    if src_dir is not None and (src_dir / "tokenizer.json").is_file() and src_dir.resolve() != out.resolve():
        shutil.copyfile(src_dir / "tokenizer.json", out / "tokenizer.json")
    if config is not None:
        (out / "model_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def matmulnbits_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if n.op_type == "MatMulNBits"]


def set_domain(model: onnx.ModelProto, to: str) -> int:
    """Moves every MatMulNBits node to domain `to`; returns how many moved. Opset imports follow: the target domain
    is imported (version 1), nibble dropped when nothing uses it. com.microsoft stays imported: ORT's optimizer
    inserts com.microsoft nodes (e.g. FusedMatMul) and fails the session when the model lacks that import."""
    moved = 0
    for node in matmulnbits_nodes(model):
        if node.domain != to:
            node.domain = to
            moved += 1
    used = {n.domain for n in model.graph.node if n.domain not in ("", "ai.onnx")}
    keep = [o for o in model.opset_import if o.domain in ("", "ai.onnx", "com.microsoft") or o.domain in used]
    del model.opset_import[:]
    model.opset_import.extend(keep)
    for domain in ("com.microsoft", to):
        if domain not in {o.domain for o in model.opset_import}:
            model.opset_import.append(helper.make_opsetid(domain, 1))
    return moved


def quantization_summary(model: onnx.ModelProto, old: dict | None) -> dict | None:
    nodes = matmulnbits_nodes(model)
    if not nodes:
        return old
    attrs = {a.name: helper.get_attribute_value(a) for a in nodes[0].attribute}
    summary = dict(old or {})
    summary.update({
        "op_domain": nodes[0].domain,
        "bits": attrs.get("bits", 4),
        "block_size": attrs.get("block_size"),
        "symmetric": len(nodes[0].input) < 4 or not nodes[0].input[3],
        "accuracy_level": attrs.get("accuracy_level", 0),
    })
    summary.setdefault("embedding", "fp32")
    summary.setdefault("lm_head", "fp32")
    return summary


def cmd_domain(args) -> None:
    model, src_dir = load(args.input)
    if not matmulnbits_nodes(model):
        raise SystemExit(f"rewrite_matmulnbits: {args.input} has no MatMulNBits node")
    moved = set_domain(model, args.to)
    old = None
    if src_dir is not None and (src_dir / "model_config.json").is_file():
        old = json.loads((src_dir / "model_config.json").read_text(encoding="utf-8")).get("quantization")
    save(model, args.output, src_dir, quantization_summary(model, old))
    print(f"rewrite_matmulnbits: {moved} MatMulNBits node(s) moved to domain {args.to} -> {args.output}",
          file=sys.stderr)


def cmd_quantize(args) -> None:
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    model, src_dir = load(args.input)
    if matmulnbits_nodes(model):
        raise SystemExit(f"rewrite_matmulnbits: {args.input} already has MatMulNBits nodes (quantize an fp32 graph)")
    quantizer = MatMulNBitsQuantizer(model, bits=args.bits, block_size=args.block_size,
                                     is_symmetric=args.symmetric, accuracy_level=args.accuracy_level,
                                     op_types_to_quantize=("MatMul",))
    quantizer.process()
    model = quantizer.model.model
    n = len(matmulnbits_nodes(model))
    if n == 0:
        raise SystemExit(f"rewrite_matmulnbits: no MatMul with a constant weight in {args.input}")
    if args.domain != "com.microsoft":
        set_domain(model, args.domain)
    if model.ir_version > 10:
        model.ir_version = 10  # ORT 1.20 reads IR <= 10
    save(model, args.output, src_dir, quantization_summary(model, None))
    print(f"rewrite_matmulnbits: {n} MatMul -> MatMulNBits ({args.bits}-bit, block {args.block_size}, "
          f"{'symmetric' if args.symmetric else 'asymmetric'}, accuracy_level {args.accuracy_level}, "
          f"domain {args.domain}) -> {args.output}", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("domain", help="move MatMulNBits nodes to another domain")
    d.add_argument("--to", required=True, choices=DOMAINS)
    q = sub.add_parser("quantize", help="fp32 MatMul -> MatMulNBits with onnxruntime's MatMulNBitsQuantizer")
    q.add_argument("--bits", type=int, default=4, choices=(2, 4, 8))
    q.add_argument("--block-size", type=int, default=32)
    sym = q.add_mutually_exclusive_group()
    sym.add_argument("--symmetric", dest="symmetric", action="store_true", default=True)
    sym.add_argument("--asymmetric", dest="symmetric", action="store_false")
    q.add_argument("--accuracy-level", type=int, default=4, choices=(0, 1, 2, 3, 4))
    q.add_argument("--domain", default="com.microsoft", choices=DOMAINS)
    for p in (d, q):
        p.add_argument("input", type=Path, help="model directory or .onnx file")
        p.add_argument("output", type=Path, help="model directory or .onnx file to write")
    args = ap.parse_args(argv)
    {"domain": cmd_domain, "quantize": cmd_quantize}[args.cmd](args)


if __name__ == "__main__":
    main()
