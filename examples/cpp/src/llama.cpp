#include "llama.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <unordered_map>

namespace nibble_service {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kHowToMake =
    "write one with `.venv/bin/python models/gguf_to_onnx.py --out DIR ...` (see models/LLAMA_MODEL_DIR.md)";

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

ModelConfig parse_config(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(path + ": cannot open");
  ModelConfig c;
  try {
    const json j = json::parse(f);
    const std::string format = j.at("format").get<std::string>();
    if (format.rfind("nibble-llama/1", 0) != 0)
      throw std::runtime_error(path + ": format \"" + format + "\" is not nibble-llama/1 (see models/LLAMA_MODEL_DIR.md)");
    c.name = j.value("name", std::string("(unnamed)"));
    for (auto [key, field] : {std::pair{"num_layers", &c.num_layers}, {"num_kv_heads", &c.num_kv_heads},
                              {"head_dim", &c.head_dim}, {"vocab_size", &c.vocab_size},
                              {"context_length", &c.context_length}}) {
      *field = j.at(key).get<int64_t>();
      if (*field <= 0) throw std::runtime_error(path + ": " + key + " = " + std::to_string(*field) + " must be positive");
    }
    if (j.contains("bos_token_id") && !j["bos_token_id"].is_null()) c.bos_token_id = j["bos_token_id"].get<int32_t>();
    if (j.contains("eos_token_ids")) c.eos_token_ids = j["eos_token_ids"].get<std::vector<int32_t>>();
    c.add_bos_token = j.value("add_bos_token", false);
    if (j.contains("chat_template") && !j["chat_template"].is_null()) c.chat_template = j["chat_template"].get<std::string>();
    c.weights = "fp32";
    if (j.contains("quantization") && !j["quantization"].is_null()) {
      const json& q = j["quantization"];
      c.op_domain = q.at("op_domain").get<std::string>();
      std::string w;
      if (q.contains("bits")) c.bits = q["bits"].get<int>();
      if (q.contains("block_size")) c.block_size = q["block_size"].get<int>();
      if (c.bits) w += "int" + std::to_string(*c.bits);
      if (c.block_size) w += " bs" + std::to_string(*c.block_size);
      if (q.contains("symmetric")) w += q["symmetric"].get<bool>() ? " sym" : " asym";
      if (q.contains("accuracy_level")) w += " acc" + std::to_string(q["accuracy_level"].get<int>());
      c.weights = w + " (" + *c.op_domain + ")";
    }
  } catch (const json::exception& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
  return c;
}

#if ORT_API_VERSION >= 22
std::vector<Ort::ConstEpDevice> nibble_devices(Ort::Env& env) {
  std::vector<Ort::ConstEpDevice> ours;
  for (const auto& d : env.GetEpDevices())
    if (std::string(d.EpName()) == "NibbleExecutionProvider") ours.push_back(d);
  return ours;
}
#endif

ONNXTensorElementDataType element_type(const Ort::TypeInfo& t) {
  if (t.GetONNXType() != ONNX_TYPE_TENSOR) return ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  return t.GetTensorTypeAndShapeInfo().GetElementType();
}

}  // namespace

const char* frontend_name(Frontend f) {
  switch (f) {
    case Frontend::kNone: return "none (ORT's own kernels)";
    case Frontend::kCustomOp: return "custom-op";
    case Frontend::kEp: return "ep";
  }
  return "?";
}

const char* stop_name(StopReason s) {
  switch (s) {
    case StopReason::kEos: return "eos";
    case StopReason::kMaxNewTokens: return "max_new_tokens";
    case StopReason::kContextLength: return "context_length";
    case StopReason::kCancelled: return "cancelled";
  }
  return "?";
}

ModelDir ModelDir::open(const std::string& path) {
  if (!fs::exists(path)) throw std::runtime_error("model " + path + " does not exist: " + kHowToMake);
  ModelDir m;
  const bool file = fs::is_regular_file(path);
  m.dir = file ? fs::path(path).parent_path().string() : path;
  if (m.dir.empty()) m.dir = ".";
  m.onnx = file ? path : (fs::path(m.dir) / "model.onnx").string();
  m.tokenizer = (fs::path(m.dir) / "tokenizer.json").string();
  const std::string config = (fs::path(m.dir) / "model_config.json").string();
  for (const std::string& f : {m.onnx, m.tokenizer, config})
    if (!fs::is_regular_file(f)) throw std::runtime_error(f + " does not exist: not a model directory; " + kHowToMake);
  m.config = parse_config(config);
  return m;
}

void register_nibble_ep(Ort::Env& env, const std::string& lib) {
#if ORT_API_VERSION >= 22
  env.RegisterExecutionProviderLibrary("nibble", lib.c_str());
  if (nibble_devices(env).empty())
    throw std::runtime_error(lib + " registered as an EP library but offers no NibbleExecutionProvider device");
#else
  (void)env;
  throw std::runtime_error("--frontend ep: this binary was built with ORT_API_VERSION " +
                           std::to_string(ORT_API_VERSION) + " headers, which have no plugin EP API (22+); rebuild "
                           "against newer headers or use --frontend custom-op (" + lib + ")");
#endif
}

Llama::Llama(Ort::Env& env, const ModelDir& model, const SessionSettings& s) : config_(model.config) {
  if (s.frontend == Frontend::kNone && config_.op_domain == std::optional<std::string>("nibble"))
    throw std::runtime_error(model.onnx +
                             ": the MatMulNBits nodes are in domain \"nibble\", which ONNX Runtime has no kernel for: "
                             "run it with nibble, or convert it with models/rewrite_matmulnbits.py");
  const auto start = Clock::now();
  Ort::SessionOptions so;
  if (s.intra_threads > 0) so.SetIntraOpNumThreads(s.intra_threads);
  switch (s.frontend) {
    case Frontend::kNone: break;
    case Frontend::kCustomOp: so.RegisterCustomOpsLibrary(s.nibble_lib.c_str(), Ort::CustomOpConfigs{}); break;
    case Frontend::kEp:
#if ORT_API_VERSION >= 22
      // ORT's CPU EP keeps every node nibble does not claim (everything but MatMulNBits).
      so.AppendExecutionProvider_V2(env, nibble_devices(env), std::unordered_map<std::string, std::string>{});
#else
      register_nibble_ep(env, s.nibble_lib);  // throws: no EP API in these headers
#endif
      break;
  }
  try {
    session_ = Ort::Session(env, model.onnx.c_str(), so);
  } catch (const Ort::Exception& e) {
    throw std::runtime_error("creating an ONNX Runtime session for " + model.onnx + ": " + e.what());
  }
  create_s_ = seconds(start, Clock::now());

  for (int64_t i = 0; i < config_.num_layers; ++i) {
    for (const char* kv : {"key", "value"}) {
      past_names_.push_back("past_key_values." + std::to_string(i) + "." + kv);
      present_names_.push_back("present." + std::to_string(i) + "." + kv);
    }
  }
  Ort::AllocatorWithDefaultOptions alloc;
  std::unordered_map<std::string, ONNXTensorElementDataType> inputs, outputs;
  for (size_t i = 0; i < session_.GetInputCount(); ++i)
    inputs[session_.GetInputNameAllocated(i, alloc).get()] = element_type(session_.GetInputTypeInfo(i));
  for (size_t i = 0; i < session_.GetOutputCount(); ++i)
    outputs[session_.GetOutputNameAllocated(i, alloc).get()] = element_type(session_.GetOutputTypeInfo(i));
  const auto want = [&](const std::unordered_map<std::string, ONNXTensorElementDataType>& m, const std::string& name,
                        ONNXTensorElementDataType ty, const char* what) {
    const auto it = m.find(name);
    if (it == m.end())
      throw std::runtime_error(model.onnx + ": the graph has no " + what + " `" + name + "` (see models/LLAMA_MODEL_DIR.md)");
    if (it->second != ty)
      throw std::runtime_error(model.onnx + ": " + what + " `" + name + "` has element type " +
                               std::to_string(it->second) + ", expected " + std::to_string(ty));
  };
  want(inputs, "input_ids", ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64, "input");
  want(outputs, "logits", ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, "output");
  for (size_t i = 0; i < past_names_.size(); ++i) {
    want(inputs, past_names_[i], ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, "input");
    want(outputs, present_names_[i], ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, "output");
  }
  if (inputs.size() != 1 + past_names_.size())
    throw std::runtime_error(model.onnx + ": the graph has " + std::to_string(inputs.size()) + " inputs, expected " +
                             std::to_string(1 + past_names_.size()) +
                             " (input_ids + 2 x num_layers past tensors); does model_config.json match the graph?");
}

Generation Llama::generate(const std::vector<int32_t>& prompt, size_t max_new_tokens, const Sampling& sampling,
                           const std::function<bool(int32_t)>& on_token) {
  const ModelConfig& c = config_;
  if (prompt.empty()) throw std::runtime_error("the prompt has no tokens");
  if (static_cast<int64_t>(prompt.size()) > c.context_length)
    throw std::runtime_error("the prompt has " + std::to_string(prompt.size()) +
                             " tokens, more than the model's context_length " + std::to_string(c.context_length));
  for (int32_t t : prompt)
    if (t < 0 || t >= c.vocab_size)
      throw std::runtime_error("prompt token id " + std::to_string(t) + " is outside the vocabulary (vocab_size " +
                               std::to_string(c.vocab_size) + ")");
  if (max_new_tokens == 0) throw std::runtime_error("max_new_tokens must be at least 1");
  Sampler sampler(sampling);

  Ort::AllocatorWithDefaultOptions alloc;
  const auto mem = Ort::MemoryInfo::CreateCpu(OrtArenaAllocator, OrtMemTypeDefault);
  const int64_t empty_shape[4] = {1, c.num_kv_heads, 0, c.head_dim};
  std::vector<Ort::Value> past;
  for (size_t i = 0; i < past_names_.size(); ++i) past.push_back(Ort::Value::CreateTensor<float>(alloc, empty_shape, 4));
  std::vector<const char*> in_names{"input_ids"}, out_names{"logits"};
  for (const auto& n : past_names_) in_names.push_back(n.c_str());
  for (const auto& n : present_names_) out_names.push_back(n.c_str());

  Generation g;
  std::vector<int64_t> step(prompt.begin(), prompt.end());
  const auto start = Clock::now();
  auto first = start, last = start;
  for (;;) {
    const int64_t s = static_cast<int64_t>(step.size());
    const int64_t ids_shape[2] = {1, s};
    std::vector<Ort::Value> in;
    in.reserve(in_names.size());
    in.push_back(Ort::Value::CreateTensor<int64_t>(mem, step.data(), step.size(), ids_shape, 2));
    for (auto& p : past) in.push_back(std::move(p));
    past.clear();
    std::vector<Ort::Value> out;
    try {
      out = session_.Run(Ort::RunOptions{nullptr}, in_names.data(), in.data(), in.size(), out_names.data(),
                         out_names.size());
    } catch (const Ort::Exception& e) {
      const size_t cached = g.ids.empty() ? 0 : prompt.size() + g.ids.size() - 1;
      throw std::runtime_error("ONNX Runtime run (step " + std::to_string(g.ids.size()) + ": " + std::to_string(s) +
                               " new tokens, " + std::to_string(cached) + " cached): " + e.what());
    }
    if (g.ids.empty()) g.prefill_s = seconds(start, Clock::now());
    const auto shape = out[0].GetTensorTypeAndShapeInfo().GetShape();
    if (shape.size() != 3 || shape[0] != 1 || shape[1] != s || shape[2] <= 0)
      throw std::runtime_error("`logits` has an unexpected shape (expected [1, " + std::to_string(s) + ", vocab])");
    const size_t v = static_cast<size_t>(shape[2]);
    const int32_t next = sampler.sample(out[0].GetTensorData<float>() + static_cast<size_t>(s - 1) * v, v);
    for (size_t i = 1; i < out.size(); ++i) past.push_back(std::move(out[i]));

    g.ids.push_back(next);
    last = Clock::now();
    if (g.ids.size() == 1) {
      first = last;
      g.ttft_s = seconds(start, first);
    }
    const bool go_on = !on_token || on_token(next);
    if (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), next) != c.eos_token_ids.end()) {
      g.stop = StopReason::kEos;
      break;
    }
    if (!go_on) {
      g.stop = StopReason::kCancelled;
      break;
    }
    if (g.ids.size() >= max_new_tokens) {
      g.stop = StopReason::kMaxNewTokens;
      break;
    }
    if (static_cast<int64_t>(prompt.size() + g.ids.size()) > c.context_length) {  // feeding `next` would overflow
      g.stop = StopReason::kContextLength;
      break;
    }
    step.assign(1, next);
  }
  g.decode_s = seconds(first, last);
  return g;
}

// ---------------------------------------------------------------------------------------------- sampling

Sampler::Sampler(const Sampling& s) : p_(s), state_(s.seed) {
  if (!std::isfinite(s.temperature) || s.temperature < 0)
    throw std::runtime_error("temperature " + std::to_string(s.temperature) + " must be >= 0");
  if (!(s.top_p > 0 && s.top_p <= 1)) throw std::runtime_error("top_p " + std::to_string(s.top_p) + " must be in (0, 1]");
}

// SplitMix64 (Steele, Lea, Flood 2014), as examples/llama/src/sampling.rs.
uint64_t Sampler::next_u64() {
  state_ += 0x9E3779B97F4A7C15ULL;
  uint64_t z = state_;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

double Sampler::next_f64() { return static_cast<double>(next_u64() >> 11) * (1.0 / static_cast<double>(1ULL << 53)); }

int32_t Sampler::sample(const float* logits, size_t n) {
  if (p_.temperature <= 0) {  // greedy: argmax, NaN ignored, ties to the lowest id
    std::optional<size_t> best;
    for (size_t i = 0; i < n; ++i) {
      if (std::isnan(logits[i])) continue;
      if (!best || logits[i] > logits[*best]) best = i;
    }
    if (!best) throw std::runtime_error("every logit is NaN: the model produced no usable output");
    return static_cast<int32_t>(*best);
  }
  // The distribution: most likely first (ties: lower id), summing to 1.
  std::vector<std::pair<int32_t, double>> cand;
  for (size_t i = 0; i < n; ++i)
    if (logits[i] == std::numeric_limits<float>::infinity()) cand.emplace_back(static_cast<int32_t>(i), 1.0);
  if (!cand.empty()) {  // +inf logits take all the mass, split evenly
    const size_t k = p_.top_k > 0 ? std::min(cand.size(), p_.top_k) : cand.size();
    cand.resize(k);
    for (auto& c : cand) c.second = 1.0 / static_cast<double>(k);
  } else {
    const double t = static_cast<double>(p_.temperature);
    for (size_t i = 0; i < n; ++i)
      if (std::isfinite(logits[i])) cand.emplace_back(static_cast<int32_t>(i), static_cast<double>(logits[i]) / t);
    if (cand.empty()) throw std::runtime_error("every logit is NaN or -inf: nothing to sample");
    // Rust's f64::total_cmp order (-0.0 below +0.0), descending, then the lower id.
    const auto total_key = [](double x) {
      int64_t b;
      std::memcpy(&b, &x, sizeof b);
      return b ^ static_cast<int64_t>(static_cast<uint64_t>(b >> 63) >> 1);
    };
    const auto order = [&](const std::pair<int32_t, double>& a, const std::pair<int32_t, double>& b) {
      const int64_t ka = total_key(a.second), kb = total_key(b.second);
      return ka > kb || (ka == kb && a.first < b.first);
    };
    if (p_.top_k > 0 && p_.top_k < cand.size()) {
      std::nth_element(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(p_.top_k - 1), cand.end(), order);
      cand.resize(p_.top_k);
    }
    std::sort(cand.begin(), cand.end(), order);
    const double max = cand[0].second;
    double sum = 0;
    for (auto& c : cand) {
      c.second = std::exp(c.second - max);
      sum += c.second;
    }
    for (auto& c : cand) c.second /= sum;
    if (p_.top_p < 1) {
      const double top_p = static_cast<double>(p_.top_p);
      double cum = 0;
      size_t keep = cand.size();
      for (size_t i = 0; i < cand.size(); ++i) {
        cum += cand[i].second;
        if (cum >= top_p - 1e-12) {
          keep = i + 1;
          break;
        }
      }
      cand.resize(keep);
      double kept = 0;
      for (const auto& c : cand) kept += c.second;
      for (auto& c : cand) c.second /= kept;
    }
  }
  const double u = next_f64();
  double cum = 0;
  for (const auto& [tok, prob] : cand) {
    cum += prob;
    if (u < cum) return tok;
  }
  return cand.back().first;  // u within rounding of 1
}

}  // namespace nibble_service
