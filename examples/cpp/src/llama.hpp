// A Llama model directory (models/LLAMA_MODEL_DIR.md) on one ONNX Runtime session that many threads share, and
// the generation loop: one prefill run over the prompt, then one run per token, each run's present.* outputs fed
// back as the next run's past_key_values.* inputs. Sampling is the Rust driver's (examples/llama/src/sampling.rs:
// SplitMix64, temperature -> top-k -> softmax -> top-p), so the same seed gives the same tokens in both.
#pragma once

#include <onnxruntime_cxx_api.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace nibble_service {

struct ModelConfig {
  std::string name;
  int64_t num_layers = 0, num_kv_heads = 0, head_dim = 0, vocab_size = 0, context_length = 0;
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;
  bool add_bos_token = false;
  std::optional<std::string> chat_template;
  std::optional<std::string> op_domain;  // of the MatMulNBits nodes; none for the fp32 graph
  std::optional<int> bits, block_size;   // of the MatMulNBits weights
  std::string weights;                   // e.g. "int4 bs32 asym acc4 (com.microsoft)" or "fp32"
};

struct ModelDir {
  std::string dir, onnx, tokenizer;
  ModelConfig config;
  // Opens a directory (or the path of its model.onnx); throws naming the missing file or bad field.
  static ModelDir open(const std::string& path);
};

// How nibble is loaded into the session.
enum class Frontend { kNone, kCustomOp, kEp };
const char* frontend_name(Frontend f);

struct SessionSettings {
  Frontend frontend = Frontend::kCustomOp;
  std::string nibble_lib;  // libnibble_ort.so (kCustomOp, kEp)
  int intra_threads = 0;   // 0 = ORT's default
};

struct Sampling {
  float temperature = 0.0f;  // <= 0: greedy (argmax, ties to the lowest id)
  size_t top_k = 0;          // 0 = all
  float top_p = 1.0f;        // 1 = all
  uint64_t seed = 0;
};

enum class StopReason { kEos, kMaxNewTokens, kContextLength, kCancelled };
const char* stop_name(StopReason s);

struct Generation {
  std::vector<int32_t> ids;  // including the EOS token that stopped it
  StopReason stop = StopReason::kMaxNewTokens;
  double prefill_s = 0, ttft_s = 0, decode_s = 0;  // as the Rust driver defines them (README: Metrics)
};

class Llama {
 public:
  // Creates the session (for kEp, `env` must already hold nibble's EP library) and checks the graph's inputs and
  // outputs against the model directory's contract.
  Llama(Ort::Env& env, const ModelDir& model, const SessionSettings& settings);

  // Generates up to `max_new_tokens` after `prompt`. Safe to call from many threads at once: each call has its
  // own cache tensors and the ORT session runs concurrent Run calls. `on_token` sees each new id as it is
  // sampled; returning false stops generation (StopReason::kCancelled).
  Generation generate(const std::vector<int32_t>& prompt, size_t max_new_tokens, const Sampling& sampling,
                      const std::function<bool(int32_t)>& on_token = nullptr);

  const ModelConfig& config() const { return config_; }
  double create_s() const { return create_s_; }

 private:
  ModelConfig config_;
  Ort::Session session_{nullptr};
  std::vector<std::string> past_names_, present_names_;  // key, value interleaved per layer
  double create_s_ = 0;
};

// Registers `lib` as EP library "nibble" in `env` (once per process). Throws when the headers this was built
// with have no EP API.
void register_nibble_ep(Ort::Env& env, const std::string& lib);

// Next-token choice, the Rust driver's algorithm.
class Sampler {
 public:
  explicit Sampler(const Sampling& s);
  int32_t sample(const float* logits, size_t n);

 private:
  uint64_t next_u64();
  double next_f64();
  Sampling p_;
  uint64_t state_;
};

}  // namespace nibble_service
