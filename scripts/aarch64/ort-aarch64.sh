# ort-aarch64.sh — sourced by the aarch64 scripts: the aarch64 ONNX Runtime they test against (PyPI manylinux
# wheel, hash-pinned like the x86 ones in scripts/setup.sh) and where scripts/fetch-ort-lib.sh puts its library.
# Needs A64ENV set. Defines ORT_A64, ORT_A64_SHA256, ORT_A64_LIB and fetch_ort_a64 (fetch if absent, verify).
ORT_A64=1.31.1
ORT_A64_SHA256=da05378364c44d4407e463982d2bf8d5e4cfea873283757e48beeb41df97b7f3
ORT_A64_LIB=$A64ENV/ort/aarch64/libonnxruntime.so.$ORT_A64
fetch_ort_a64() {
    bash scripts/fetch-ort-lib.sh $ORT_A64 manylinux_2_28_aarch64 $ORT_A64_SHA256 "$A64ENV/ort/aarch64"
}
