/* nibble_ort.h — C declaration of what libnibble_ort.so exports.
 *
 * libnibble_ort.so is both an ONNX Runtime plugin execution-provider library (ORT >= 1.24; entry points
 * CreateEpFactories and ReleaseEpFactory, declared in ORT's onnxruntime_ep_c_api.h, called by
 * OrtApi::RegisterExecutionProviderLibrary; the EP is "NibbleExecutionProvider") and a custom-op library. It exports
 * exactly those three symbols and NibbleInfo. RegisterCustomOps is called when the library is registered on a session's options:
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

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct OrtSessionOptions;
struct OrtApiBase;
struct OrtStatus;
struct OrtLogger;
struct OrtEpFactory;

/* Returns NULL on success, or an OrtStatus (to be released by the caller, as ORT does) describing the error. */
struct OrtStatus* RegisterCustomOps(struct OrtSessionOptions* options, const struct OrtApiBase* api_base);

/* ORT's CreateEpApiFactoriesFn / ReleaseEpApiFactoryFn (onnxruntime_ep_c_api.h). On ORT < 1.24 CreateEpFactories
 * returns an error naming the version the execution provider needs. */
struct OrtStatus* CreateEpFactories(const char* registered_name, const struct OrtApiBase* ort_api_base,
                                    const struct OrtLogger* default_logger, struct OrtEpFactory** factories,
                                    size_t max_factories, size_t* num_factories);
struct OrtStatus* ReleaseEpFactory(struct OrtEpFactory* factory);

/* What nibble detects and chooses on this CPU: format 0 = the report for a person (what the nibble-info tool
 * prints), 1 = one JSON object with "version", "arch", "ort" (custom_op_min, ep_min, tested), "cpu_features",
 * "rungs", "ladder" (families in the order tried), "selection" (the family each path/bits/block_size gets).
 * Needs no ONNX Runtime. The string is owned by the library (valid while it stays loaded; do not free it).
 * NULL for another format, or if it could not be computed. */
const char* NibbleInfo(int format);

#ifdef __cplusplus
}
#endif

#endif /* NIBBLE_ORT_H */
