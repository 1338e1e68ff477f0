/* nibble_ort.h — C declaration of what libnibble_ort.so exports.
 *
 * libnibble_ort.so is an ONNX Runtime custom-op library. It exports exactly one symbol, RegisterCustomOps,
 * which ONNX Runtime calls when the library is registered on a session's options:
 *   C:      OrtApi::RegisterCustomOpsLibrary_V2(options, "libnibble_ort.so")
 *   C++:    Ort::SessionOptions::RegisterCustomOpsLibrary("libnibble_ort.so")
 *   Python: onnxruntime.SessionOptions().register_custom_ops_library("libnibble_ort.so")
 *
 * It registers MatMulNBits (float and float16) in domain "nibble" and, unless the session config entry
 * "nibble.override_com_microsoft" is "0", in "com.microsoft" (replacing ONNX Runtime's own kernel).
 * "nibble.accuracy_level_default" = "4" (default, int8 activations) or "1" (fp32) sets what
 * accuracy_level 0 means. Set both entries before registering the library. Needs ONNX Runtime >= 1.17.
 * NIBBLE_ISA=<rung> (environment) caps the kernel ladder, e.g. NIBBLE_ISA=portable.
 */
#ifndef NIBBLE_ORT_H
#define NIBBLE_ORT_H

#ifdef __cplusplus
extern "C" {
#endif

struct OrtSessionOptions;
struct OrtApiBase;
struct OrtStatus;

/* Returns NULL on success, or an OrtStatus (to be released by the caller, as ORT does) describing the error. */
struct OrtStatus* RegisterCustomOps(struct OrtSessionOptions* options, const struct OrtApiBase* api_base);

#ifdef __cplusplus
}
#endif

#endif /* NIBBLE_ORT_H */
