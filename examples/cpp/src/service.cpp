// nibble-llama-service: a small C++17 inference service on ONNX Runtime + nibble. It loads a Llama model directory
// (models/LLAMA_MODEL_DIR.md) into ONE session, puts N generation requests in a queue at once (a burst, as when N
// users ask together) and serves them from a pool of worker threads that share the session, then prints each
// request's queue wait, time to first token and decode tokens/s, and their p50/p95. See examples/cpp/README.md.
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <nibble_ort.h>

#include "chat.hpp"
#include "llama.hpp"
#include "tokenizer.hpp"

namespace {

using namespace nibble_service;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

#ifndef NIBBLE_ORT_DEFAULT_LIBRARY
#define NIBBLE_ORT_DEFAULT_LIBRARY ""
#endif

constexpr const char* kUsage = R"(usage: nibble-llama-service --model DIR [options]

Loads the Llama model directory DIR into one ONNX Runtime session with nibble's MatMulNBits kernels, serves
--requests generation requests (all queued at once) from --concurrency worker threads sharing that session, and
prints per-request queue wait, TTFT and decode tok/s with their p50/p95.

requests
  --prompt TEXT          a user message; repeat for several (requests cycle through them)
  --prompts-file FILE    one user message per line (blank lines skipped)
  --system TEXT          system message (default: the chat template's own)
  --raw                  no chat template: each prompt is the whole prompt text
  --requests N           how many requests (default: one per prompt)
  --concurrency C        worker threads, i.e. requests in flight at once (default 2)
  --max-new-tokens T     per request (default 64; generation also stops at EOS and the context length)
  --temperature X        0 = greedy (default); with --top-k K, --top-p P, --seed S (request i uses seed S + i)
model and runtime
  --lib PATH             libnibble_ort.so (default: $NIBBLE_LIB, else the library found at build time)
  --frontend F           auto (default: ep when the runtime and these headers have it, else custom-op) | ep | custom-op
  --no-nibble            ORT's own kernels (com.microsoft::MatMulNBits built in), for comparison
  --threads N            ORT intra-op threads of the session (default: ORT's, one per core)
output
  --usd-per-hour X       machine price for the cost figures (default 1.0)
  --json FILE            per-request results and the summary as JSON
  --quiet                do not print the answers
  --tokenize             test mode: per stdin line a JSON string (prints {"ids": [...], "text": "..."}) or id
                         array (prints {"text": "..."})
Environment: ORT_LOG = verbose|info|warning|error|fatal (default warning).
Metrics: TTFT = start of the prefill run to the first sampled token (queue wait and tokenization excluded);
decode tok/s = (generated - 1) / (last token - first token); latency = queue wait + tokenize + TTFT + decode;
aggregate tok/s = all generated tokens / wall time of the whole burst. p50/p95 interpolate linearly.
)";

const std::vector<std::string> kDefaultPrompts = {
    "What is the capital of France, and why is it famous?",
    "Write a haiku about autumn leaves.",
    "Explain in two sentences what a CPU cache is.",
    "Give me three tips for a good night's sleep.",
};

struct Options {
  std::string model;
  std::vector<std::string> prompts;
  std::optional<std::string> system;
  bool raw = false;
  size_t requests = 0;
  size_t concurrency = 2;
  size_t max_new_tokens = 64;
  Sampling sampling;
  std::string lib;
  std::string frontend = "auto";
  bool no_nibble = false;
  int threads = 0;
  double usd_per_hour = 1.0;
  std::string json_path;
  bool quiet = false;
  bool tokenize = false;
};

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "nibble-llama-service: %s\n(see --help)\n", msg.c_str());
  std::exit(2);
}

template <class T>
T parse_number(const std::string& flag, const std::string& v) {
  // istream reads "-1" into an unsigned type as its wrap-around: refuse signs where no negative value exists
  if (std::is_unsigned_v<T> && v.find('-') != std::string::npos) usage_error(flag + " " + v + ": must not be negative");
  std::istringstream in(v);
  T x{};
  if (!(in >> x) || !in.eof()) usage_error(flag + " " + v + ": not a number");
  return x;
}

Options parse_args(int argc, char** argv) {
  Options o;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (a == "--model") o.model = value();
    else if (a == "--prompt") o.prompts.push_back(value());
    else if (a == "--prompts-file") files.push_back(value());
    else if (a == "--system") o.system = value();
    else if (a == "--raw") o.raw = true;
    else if (a == "--requests") o.requests = parse_number<size_t>(a, value());
    else if (a == "--concurrency") o.concurrency = parse_number<size_t>(a, value());
    else if (a == "--max-new-tokens") o.max_new_tokens = parse_number<size_t>(a, value());
    else if (a == "--temperature") o.sampling.temperature = parse_number<float>(a, value());
    else if (a == "--top-k") o.sampling.top_k = parse_number<size_t>(a, value());
    else if (a == "--top-p") o.sampling.top_p = parse_number<float>(a, value());
    else if (a == "--seed") o.sampling.seed = parse_number<uint64_t>(a, value());
    else if (a == "--lib") o.lib = value();
    else if (a == "--frontend") o.frontend = value();
    else if (a == "--no-nibble") o.no_nibble = true;
    else if (a == "--threads") o.threads = parse_number<int>(a, value());
    else if (a == "--usd-per-hour") o.usd_per_hour = parse_number<double>(a, value());
    else if (a == "--json") o.json_path = value();
    else if (a == "--quiet") o.quiet = true;
    else if (a == "--tokenize") o.tokenize = true;
    else usage_error("unknown argument " + a);
  }
  if (o.model.empty()) usage_error("--model DIR is required");
  for (const std::string& f : files) {
    std::ifstream in(f);
    if (!in) usage_error("--prompts-file " + f + ": cannot open");
    size_t n = 0;
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line.back() == '\r') line.pop_back();  // CRLF files
      if (line.find_first_not_of(" \t") != std::string::npos) o.prompts.push_back(line), ++n;
    }
    if (n == 0) usage_error("--prompts-file " + f + ": no prompt in it (one user message per line)");
  }
  if (o.prompts.empty()) o.prompts = kDefaultPrompts;
  if (o.requests == 0) o.requests = o.prompts.size();
  if (o.concurrency == 0 || o.concurrency > 1024) usage_error("--concurrency must be in 1..1024");
  if (o.requests > 1000000) usage_error("--requests must be at most 1000000");
  if (o.max_new_tokens == 0) usage_error("--max-new-tokens must be at least 1");
  if (o.threads < 0) usage_error("--threads must be at least 1 (leave it out for ORT's default)");
  if (!(o.usd_per_hour >= 0)) usage_error("--usd-per-hour must be >= 0");
  if (o.frontend != "auto" && o.frontend != "ep" && o.frontend != "custom-op")
    usage_error("--frontend " + o.frontend + ": expected auto, ep or custom-op");
  if (o.no_nibble && o.frontend != "auto") usage_error("--no-nibble and --frontend exclude each other");
  if (o.no_nibble && !o.lib.empty()) usage_error("--no-nibble and --lib exclude each other");
  try {
    Sampler check(o.sampling);  // throws on a bad temperature / top_p
  } catch (const std::exception& e) {
    usage_error(e.what());
  }
  if (!o.no_nibble && o.lib.empty()) {
    const char* env = std::getenv("NIBBLE_LIB");
    o.lib = env && *env ? env : NIBBLE_ORT_DEFAULT_LIBRARY;
    if (o.lib.empty()) usage_error("no nibble library: pass --lib PATH/libnibble_ort.so or set NIBBLE_LIB");
  }
  return o;
}

OrtLoggingLevel ort_log_level() {
  const char* v = std::getenv("ORT_LOG");
  const std::string s = v ? v : "warning";
  if (s == "verbose") return ORT_LOGGING_LEVEL_VERBOSE;
  if (s == "info") return ORT_LOGGING_LEVEL_INFO;
  if (s == "error") return ORT_LOGGING_LEVEL_ERROR;
  if (s == "fatal") return ORT_LOGGING_LEVEL_FATAL;
  return ORT_LOGGING_LEVEL_WARNING;
}

// "1.31.1" >= "1.24"?
bool version_at_least(const std::string& have, const std::string& want) {
  std::istringstream a(have), b(want);
  for (;;) {
    int x = 0, y = 0;
    char dot;
    const bool ha = static_cast<bool>(a >> x), hb = static_cast<bool>(b >> y);
    if (!hb) return true;
    if (!ha || x != y) return ha && x > y;
    a >> dot;
    b >> dot;
  }
}

// nibble's own report (NibbleInfo(1), include/nibble_ort.h): version, EP floor, kernel selection.
json nibble_info(const std::string& lib) {
  void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) throw std::runtime_error("cannot load the nibble library " + lib + ": " + dlerror());
  const auto info = reinterpret_cast<decltype(&NibbleInfo)>(dlsym(h, "NibbleInfo"));
  if (!info) {
    dlclose(h);
    throw std::runtime_error(lib + " has no NibbleInfo: not libnibble_ort.so, or one older than 0.1");
  }
  const char* text = info(1);
  json j = json::parse(text ? text : "null", nullptr, false);
  dlclose(h);  // the text lived in the library: parsed before closing
  if (!j.is_object()) throw std::runtime_error(lib + ": NibbleInfo(1) did not return a JSON object");
  return j;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const double at = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(at));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

std::atomic<bool> g_stop{false};
// The first SIGINT/SIGTERM ends the burst cleanly; the handler then steps aside so a second one kills the process
// (a prefill cannot be interrupted).
extern "C" void on_signal(int sig) {
  g_stop.store(true);
  std::signal(sig, SIG_DFL);
}

struct Result {
  size_t id = 0;
  std::string prompt;
  std::vector<int32_t> prompt_ids;
  Generation gen;
  std::string text;
  std::string error;
  double wait_s = 0, tokenize_s = 0, latency_s = 0;
  bool ran = false;
  std::optional<double> decode_tps() const {
    if (gen.ids.size() < 2 || gen.decode_s <= 0) return std::nullopt;
    return static_cast<double>(gen.ids.size() - 1) / gen.decode_s;
  }
};

double secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// --tokenize: each stdin line is JSON, a string (-> {"ids": encode, "text": decode(ids)}) or an array of ids
// (-> {"text": decode}); special tokens are left out of decoded text.
int tokenize_mode(const Tokenizer& tok) {
  for (std::string line; std::getline(std::cin, line);) {
    if (line.empty()) continue;
    const json in = json::parse(line);
    if (in.is_array()) {
      std::cout << json{{"text", tok.decode(in.get<std::vector<int32_t>>(), true)}}.dump() << "\n";
    } else {
      const std::vector<int32_t> ids = tok.encode(in.get<std::string>());
      std::cout << json{{"ids", ids}, {"text", tok.decode(ids, true)}}.dump() << "\n";
    }
  }
  return 0;
}

int run(const Options& o) {
  const ModelDir model = ModelDir::open(o.model);
  const Tokenizer tok = Tokenizer::load(model.tokenizer);
  if (o.tokenize) return tokenize_mode(tok);
  const ModelConfig& cfg = model.config;
  std::optional<ChatMl> chat;
  if (!o.raw) {
    if (!cfg.chat_template)
      std::fprintf(stderr, "note: %s has no chat_template: using the prompts as they are (--raw)\n", model.dir.c_str());
    else
      chat = ChatMl::from_template(*cfg.chat_template);
  }

  // The C++ API asks the runtime for the headers' API version; an older runtime has none to give.
  const OrtApi* api = OrtGetApiBase()->GetApi(ORT_API_VERSION);
  if (!api)
    throw std::runtime_error(std::string("this binary was built with ORT_API_VERSION ") +
                             std::to_string(ORT_API_VERSION) + " headers; the ONNX Runtime it runs on (" +
                             OrtGetApiBase()->GetVersionString() +
                             ") is older: rebuild against that runtime's headers, or run on a newer runtime");
  Ort::InitApi(api);
  const std::string ort_version = Ort::GetVersionString();
  Ort::Env env(ort_log_level(), "nibble-llama-service");
  SessionSettings settings;
  settings.intra_threads = o.threads;
  settings.frontend = Frontend::kNone;
  std::string kernel_note;
  if (!o.no_nibble) {
    const json info = nibble_info(o.lib);
    const std::string ep_min = info.at("ort").at("ep_min").get<std::string>();
    const bool runtime_ep = version_at_least(ort_version, ep_min);
    const bool headers_ep = ORT_API_VERSION >= 22;
    if (o.frontend == "ep" && !runtime_ep)
      throw std::runtime_error("--frontend ep needs ONNX Runtime >= " + ep_min + "; this one is " + ort_version +
                               ": use --frontend custom-op (or auto)");
    settings.frontend = (o.frontend == "ep" || (o.frontend == "auto" && runtime_ep && headers_ep)) ? Frontend::kEp
                                                                                                  : Frontend::kCustomOp;
    settings.nibble_lib = o.lib;
    if (settings.frontend == Frontend::kEp) register_nibble_ep(env, o.lib);
    for (const json& s : info.at("selection"))
      if (cfg.bits && cfg.block_size && s.at("bits") == *cfg.bits && s.at("block_size") == *cfg.block_size)
        kernel_note += " " + s.at("path").get<std::string>() + "->" +
                       (s.at("family").is_null() ? "(" + s.at("error").dump() + ")" : s.at("family").get<std::string>());
    std::printf("nibble %s (%s), frontend %s;%s%s\n", info.at("version").get<std::string>().c_str(), o.lib.c_str(),
                frontend_name(settings.frontend), kernel_note.empty() ? "" : " kernels:", kernel_note.c_str());
  }
  std::printf("ONNX Runtime %s; model %s: %s, %lld layers, context %lld\n", ort_version.c_str(), cfg.name.c_str(),
              cfg.weights.c_str(), static_cast<long long>(cfg.num_layers), static_cast<long long>(cfg.context_length));
  Llama llama(env, model, settings);
  const size_t workers = std::min(o.concurrency, o.requests);
  std::printf("session created in %.2f s; serving %zu request(s) with %zu worker(s), up to %zu new tokens each\n",
              llama.create_s(), o.requests, workers, o.max_new_tokens);
  std::fflush(stdout);

  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);

  // The burst: every request queued at t0; workers take them in order.
  std::vector<Result> results(o.requests);
  std::deque<size_t> queue;
  for (size_t i = 0; i < o.requests; ++i) {
    results[i].id = i;
    results[i].prompt = o.prompts[i % o.prompts.size()];
    queue.push_back(i);
  }
  std::mutex mu;  // guards `queue` and stdout
  const auto t0 = Clock::now();
  const auto serve = [&](Result& r) {
    const auto begin = Clock::now();
    r.wait_s = secs(t0, begin);
    r.ran = true;
    std::string text = r.prompt;
    if (chat) {
      std::vector<Message> msgs;
      if (o.system) msgs.push_back({"system", *o.system});
      msgs.push_back({"user", r.prompt});
      text = chat->render(msgs);
    }
    r.prompt_ids = tok.encode(text);
    if (cfg.add_bos_token && cfg.bos_token_id && (r.prompt_ids.empty() || r.prompt_ids[0] != *cfg.bos_token_id))
      r.prompt_ids.insert(r.prompt_ids.begin(), *cfg.bos_token_id);
    r.tokenize_s = secs(begin, Clock::now());
    Sampling s = o.sampling;
    s.seed += r.id;
    r.gen = llama.generate(r.prompt_ids, o.max_new_tokens, s, [](int32_t) { return !g_stop.load(); });
    r.text = tok.decode(r.gen.ids, true);
    r.latency_s = secs(t0, Clock::now());
  };
  const auto worker = [&]() {
    for (;;) {
      size_t i;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (queue.empty() || g_stop.load()) return;
        i = queue.front();
        queue.pop_front();
      }
      Result& r = results[i];
      try {
        serve(r);
      } catch (const std::exception& e) {
        r.error = e.what();
      }
      std::lock_guard<std::mutex> lock(mu);
      if (!r.error.empty()) {
        std::printf("request %zu: ERROR %s\n", r.id, r.error.c_str());
      } else {
        char tps[32] = "-";
        if (const auto d = r.decode_tps()) std::snprintf(tps, sizeof tps, "%.1f", *d);
        std::printf("request %zu: wait %.3f s, TTFT %.3f s, %zu+%zu tokens, decode %s tok/s, %s\n", r.id, r.wait_s,
                    r.gen.ttft_s, r.prompt_ids.size(), r.gen.ids.size(), tps, stop_name(r.gen.stop));
        if (!o.quiet) std::printf("  Q: %s\n  A: %s\n", r.prompt.c_str(), r.text.c_str());
      }
      std::fflush(stdout);
    }
  };
  std::vector<std::thread> pool;
  for (size_t w = 0; w < workers; ++w) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  const double wall_s = secs(t0, Clock::now());

  // Summary.
  std::vector<double> wait, ttft, tps, tpot, latency;
  size_t generated = 0, prompt_tokens = 0, failed = 0, not_run = 0;
  for (const Result& r : results) {
    if (!r.ran) {
      ++not_run;
      continue;
    }
    if (!r.error.empty()) {
      ++failed;
      continue;
    }
    wait.push_back(r.wait_s);
    ttft.push_back(r.gen.ttft_s);
    latency.push_back(r.latency_s);
    if (const auto d = r.decode_tps()) tps.push_back(*d), tpot.push_back(1e3 / *d);
    generated += r.gen.ids.size();
    prompt_tokens += r.prompt_ids.size();
  }
  const double agg = wall_s > 0 ? static_cast<double>(generated) / wall_s : 0;
  const double usd_per_s = o.usd_per_hour / 3600.0;
  std::printf("\n%-16s %10s %10s\n", "", "p50", "p95");
  const auto row = [](const char* name, const std::vector<double>& v, const char* unit) {
    std::printf("%-16s %10.3f %10.3f %s\n", name, percentile(v, 50), percentile(v, 95), unit);
  };
  row("queue wait", wait, "s");
  row("TTFT", ttft, "s");
  row("decode", tps, "tok/s per request (p95: the fastest 5%)");
  row("time per token", tpot, "ms per request (p95: the slowest 5%)");
  row("latency", latency, "s");
  std::printf("%zu requests (%zu failed, %zu not run), %zu prompt + %zu generated tokens in %.2f s wall: "
              "%.1f tok/s aggregate, $%.4f per 1M generated tokens at $%.2f/h\n",
              o.requests, failed, not_run, prompt_tokens, generated, wall_s, agg,
              agg > 0 ? usd_per_s / agg * 1e6 : 0.0, o.usd_per_hour);

  if (!o.json_path.empty()) {
    json reqs = json::array();
    for (const Result& r : results) {
      json j = {{"id", r.id}, {"prompt", r.prompt}, {"ran", r.ran}};
      if (!r.error.empty()) j["error"] = r.error;
      if (r.ran && r.error.empty()) {
        const auto d = r.decode_tps();
        j.update({{"prompt_token_ids", r.prompt_ids}, {"generated_token_ids", r.gen.ids}, {"text", r.text},
                  {"stop", stop_name(r.gen.stop)}, {"queue_wait_s", r.wait_s}, {"tokenize_s", r.tokenize_s},
                  {"prefill_s", r.gen.prefill_s}, {"ttft_s", r.gen.ttft_s}, {"decode_s", r.gen.decode_s},
                  {"decode_tok_s", d ? json(*d) : json(nullptr)}, {"latency_s", r.latency_s}});
      }
      reqs.push_back(j);
    }
    const auto pct = [&](const std::vector<double>& v) {
      return json{{"p50", v.empty() ? json(nullptr) : json(percentile(v, 50))},
                  {"p95", v.empty() ? json(nullptr) : json(percentile(v, 95))}};
    };
    const json doc = {
        {"model", cfg.name}, {"weights", cfg.weights}, {"ort_version", ort_version},
        {"frontend", o.no_nibble ? "none" : frontend_name(settings.frontend)}, {"session_create_s", llama.create_s()},
        {"requests", o.requests}, {"concurrency", o.concurrency}, {"max_new_tokens", o.max_new_tokens},
        {"failed", failed}, {"not_run", not_run}, {"wall_s", wall_s}, {"generated_tokens", generated},
        {"aggregate_tok_s", agg}, {"queue_wait_s", pct(wait)}, {"ttft_s", pct(ttft)}, {"decode_tok_s", pct(tps)},
        {"time_per_token_ms", pct(tpot)}, {"latency_s", pct(latency)}, {"results", reqs}};
    // replace: a prompt given in invalid UTF-8 is reported (its request failed), not a reason to lose the file
    const std::string text = doc.dump(2, ' ', false, json::error_handler_t::replace);
    std::ofstream out(o.json_path);
    out << text << "\n";
    if (!out) throw std::runtime_error("writing " + o.json_path + " failed");
  }
  if (g_stop.load()) std::printf("interrupted: in-flight answers ended early, %zu requests not run\n", not_run);
  return failed > 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_args(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nibble-llama-service: error: %s\n", e.what());
    return 1;
  }
}
