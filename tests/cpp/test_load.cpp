// test_load.cpp — libnibble_ort.so loaded into ONNX Runtime through ORT's C++ API, end to end (the README's C++
// snippet). Built and run by tests/cpp/run.sh:
//
//   test_load LIBNIBBLE FIXTURES_DIR [ORT_VERSION [FRONTEND]]
//
// FIXTURES_DIR is the output of tests/fixtures/make_fixtures.py (manifest.txt, models, raw f32 golden data).
// FRONTEND: custom-op (default: Ort::SessionOptions::RegisterCustomOpsLibrary) or ep (ORT >= 1.24, the README's
// execution-provider snippet: Ort::Env::RegisterExecutionProviderLibrary once, then
// SessionOptions::AppendExecutionProvider_V2 with nibble's device; needs headers of API 22 or newer, the vendored
// third_party/onnxruntime-1.24/include). EP sessions turn ORT's CPU fallback off, so a node nibble did not claim
// fails instead of silently running on ORT's kernel (except where the override is off: there ORT must run them).
// Checks, one line each ("ok   ..." or "FAIL ..."); exit status 1 if any failed, 2 if it could not start:
//   * ORT reports ORT_VERSION (when given); with ep, one NibbleExecutionProvider device;
//   * a few fixture cases, node in domain nibble and in com.microsoft (our override), against the numpy golden
//     output with the fixtures' tolerances (tol=loose: abs 0.1 + rel 0.02, tol=tight: abs 1e-4 + rel 1e-4);
//   * AddConfigEntry("nibble.override_com_microsoft", "0") before registering keeps ORT's own kernel for
//     com.microsoft nodes: the same refusal as a session without nibble, or it runs without nibble's kernel (no
//     kernel-creation log line) and, where ORT's kernel defines the output (manifest builtin != none), the same
//     bits; domain nibble still ours (its log line seen);
//   * (custom-op) two sessions each registering the library through the v1 C call RegisterCustomOpsLibrary, as
//     Triton's onnxruntime backend does per model instance (examples/triton);
//   * every malformed fixture model throws Ort::Exception whose message contains "[MatMulNBits]".
// Logging: ORT_LOG=verbose|info|warning|error|fatal (default fatal: the malformed models make ORT log errors) is
// what is printed; the Env logs at INFO into log_sink, which keeps every message: the override-off check reads
// nibble's kernel-creation line (written when nibble creates its kernel for a node) to tell whose kernel ran.
#include <onnxruntime_cxx_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace {

std::string g_lib, g_dir;  // argv[1], argv[2]
bool g_ep = false;         // argv[4] == "ep"
int g_failed = 0;

void report(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  std::fflush(stdout);
  if (!ok) ++g_failed;
}

// ------------------------------------------------------------------------------------------------ fixtures

using Record = std::map<std::string, std::string>;  // one `key=value ...` line of manifest.txt

std::vector<Record> manifest(const std::string& kind) {
  std::ifstream in(g_dir + "/manifest.txt");
  if (!in) throw std::runtime_error("cannot read " + g_dir + "/manifest.txt (run make_fixtures.py)");
  std::vector<Record> out;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    Record r;
    std::istringstream fields(line);
    for (std::string kv; fields >> kv;) {
      const auto eq = kv.find('=');
      r[kv.substr(0, eq)] = eq == std::string::npos ? "" : kv.substr(eq + 1);
    }
    if (r["kind"] == kind) out.push_back(r);
  }
  return out;
}

std::vector<float> read_f32(const std::string& name) {  // raw little-endian float32
  std::ifstream in(g_dir + "/" + name, std::ios::binary | std::ios::ate);
  if (!in) throw std::runtime_error("cannot read " + g_dir + "/" + name);
  std::vector<float> v(static_cast<size_t>(in.tellg()) / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  return v;
}

std::vector<int64_t> parse_shape(const std::string& s) {  // "2x3x128"; "scalar" -> {}
  std::vector<int64_t> dims;
  std::istringstream in(s == "scalar" ? "" : s);
  for (std::string d; std::getline(in, d, 'x');) dims.push_back(std::stoll(d));
  return dims;
}

// ------------------------------------------------------------------------------------------------ ORT

struct Opts {
  bool nibble = true;                                                 // register libnibble_ort.so
  GraphOptimizationLevel opt = ORT_DISABLE_ALL;
  std::vector<std::pair<const char*, const char*>> config;           // set before registering
};

// ORT's log messages, through the Env's logging function: every message is kept (what the checks read: nibble's
// INFO line "nibble [MatMulNBits] node '...': ..." is written exactly when nibble creates its kernel for a node),
// those at or above ORT_LOG are also printed to stderr as ORT's default sink would.
std::mutex g_log_mutex;
std::vector<std::string> g_log;
OrtLoggingLevel g_print_level = ORT_LOGGING_LEVEL_FATAL;

void ORT_API_CALL log_sink(void*, OrtLoggingLevel severity, const char* category, const char* logid,
                           const char* code_location, const char* message) {
  std::lock_guard<std::mutex> lock(g_log_mutex);
  g_log.emplace_back(message ? message : "");
  if (severity >= g_print_level)
    std::fprintf(stderr, "[ORT %s %s %s] %s\n", logid ? logid : "", category ? category : "",
                 code_location ? code_location : "", message ? message : "");
}

size_t log_mark() {
  std::lock_guard<std::mutex> lock(g_log_mutex);
  return g_log.size();
}

// nibble's kernel-creation lines logged since `mark`: one per node nibble took.
std::vector<std::string> nibble_kernel_lines(size_t mark) {
  std::lock_guard<std::mutex> lock(g_log_mutex);
  std::vector<std::string> out;
  for (size_t i = mark; i < g_log.size(); ++i)
    if (g_log[i].rfind("nibble [MatMulNBits] node '", 0) == 0) out.push_back(g_log[i]);
  return out;
}

#if ORT_API_VERSION >= 22
// nibble's devices in `env` (registered by main): the README's C++ EP snippet.
std::vector<Ort::ConstEpDevice> nibble_devices(Ort::Env& env) {
  std::vector<Ort::ConstEpDevice> ours;
  for (const auto& d : env.GetEpDevices())
    if (std::string(d.EpName()) == "NibbleExecutionProvider") ours.push_back(d);
  return ours;
}
#endif

Ort::Session make_session(Ort::Env& env, const std::string& model, const Opts& o) {
  Ort::SessionOptions so;
  so.SetIntraOpNumThreads(2);
  so.SetGraphOptimizationLevel(o.opt);
  bool override_off = false;
  for (const auto& [k, v] : o.config) {
    so.AddConfigEntry(k, v);
    override_off |= std::string(k) == "nibble.override_com_microsoft" && std::string(v) == "0";
  }
  if (o.nibble && g_ep) {
#if ORT_API_VERSION >= 22
    so.AppendExecutionProvider_V2(env, nibble_devices(env), std::unordered_map<std::string, std::string>{});
    if (!override_off) so.AddConfigEntry("session.disable_cpu_ep_fallback", "1");
#endif
  } else if (o.nibble) {
    so.RegisterCustomOpsLibrary(g_lib.c_str(), Ort::CustomOpConfigs{});
  }
  return Ort::Session(env, (g_dir + "/" + model).c_str(), so);
}

// One inference: input "A" -> output "Y"; the output shape goes to *y_shape.
std::vector<float> run(Ort::Session& s, std::vector<int64_t> shape, std::vector<float> a,
                       std::vector<int64_t>* y_shape = nullptr) {
  const auto mem = Ort::MemoryInfo::CreateCpu(OrtArenaAllocator, OrtMemTypeDefault);
  Ort::Value in = Ort::Value::CreateTensor<float>(mem, a.data(), a.size(), shape.data(), shape.size());
  const char* in_names[] = {"A"};
  const char* out_names[] = {"Y"};
  auto out = s.Run(Ort::RunOptions{nullptr}, in_names, &in, 1, out_names, 1);
  const auto info = out[0].GetTensorTypeAndShapeInfo();
  if (y_shape) *y_shape = info.GetShape();
  const float* y = out[0].GetTensorData<float>();
  return std::vector<float>(y, y + info.GetElementCount());
}

// Session + run; an Ort::Exception becomes its message. What "behaves like ORT's kernel" compares. `nibble_lines`:
// nibble's kernel-creation log lines of that session.
struct Outcome {
  std::vector<float> y;
  std::string error;
  std::vector<std::string> nibble_lines;
};
Outcome try_run(Ort::Env& env, const std::string& model, const Opts& o, const std::vector<int64_t>& shape,
                const std::vector<float>& a) {
  const size_t mark = log_mark();
  Outcome out;
  try {
    auto s = make_session(env, model, o);
    out.y = run(s, shape, a);
  } catch (const Ort::Exception& e) {
    out.error = e.what();
  }
  out.nibble_lines = nibble_kernel_lines(mark);
  return out;
}

// "" when every |got - want| <= abs + rel*|want| (numpy.allclose), else the worst element.
std::string compare(const std::vector<float>& got, const std::vector<float>& want, const std::string& tol) {
  const double abs_tol = tol == "loose" ? 0.1 : 1e-4, rel_tol = tol == "loose" ? 0.02 : 1e-4;
  if (got.size() != want.size())
    return std::to_string(got.size()) + " values, expected " + std::to_string(want.size());
  size_t bad = 0, worst = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double excess = std::fabs(double(got[i]) - want[i]) - (abs_tol + rel_tol * std::fabs(want[i]));
    if (excess > 0 || std::isnan(excess)) {
      ++bad;
      if (std::isnan(excess) || excess > worst_excess) worst = i, worst_excess = std::isnan(excess) ? 1e30 : excess;
    }
  }
  if (!bad) return "";
  char buf[160];
  std::snprintf(buf, sizeof buf, "%zu/%zu outside tol=%s; worst at %zu: got %g want %g", bad, got.size(),
                tol.c_str(), worst, got[worst], want[worst]);
  return buf;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::fmax(d, std::fabs(double(a[i]) - b[i]));
  return d;
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

const Record& find_case(const std::vector<Record>& cases, const std::string& prefix) {
  for (const auto& r : cases)
    if (r.at("name").rfind(prefix, 0) == 0) return r;
  throw std::runtime_error("manifest: no case " + prefix + "*");
}

// ------------------------------------------------------------------------------------------------ checks

// Ours in both domains vs the numpy golden output: int8 path (M=1 and M>1), fp32 path with padded K, an empty
// optional input before bias, rank-3 A, and block_size 512 (beyond ORT's own kernel).
void check_cases(Ort::Env& env, const std::vector<Record>& cases) {
  const char* picked[] = {"acc4_zp_k256_n64_bs32", "acc1_sym_k93_n33_bs16", "acc1_zp_bias_k256_n32_bs64",
                          "acc4_batch3d_k128_n48_bs16", "acc4_bs512_k1024_n16"};
  for (const auto& r : cases) {
    bool wanted = false;
    for (const char* p : picked) wanted |= r.at("name") == p;
    if (!wanted) continue;
    const auto a_shape = parse_shape(r.at("a_shape"));
    std::string line = r.at("name") + " A=" + r.at("a_shape") + " (tol=" + r.at("tol") + "):";
    bool ok = true;
    try {
      const auto a = read_f32(r.at("a")), want = read_f32(r.at("y"));
      for (const auto& [domain, model, opt] : {std::tuple{"nibble", r.at("nibble"), ORT_DISABLE_ALL},
                                               std::tuple{"com.microsoft", r.at("com"), ORT_ENABLE_ALL}}) {
        auto s = make_session(env, model, Opts{true, opt, {}});
        std::vector<int64_t> y_shape;
        const auto y = run(s, a_shape, a, &y_shape);
        const std::string err = y_shape == parse_shape(r.at("y_shape")) ? compare(y, want, r.at("tol"))
                                                                        : "output shape is not " + r.at("y_shape");
        char d[32];
        std::snprintf(d, sizeof d, "%.2e", max_abs_diff(y, want));
        line += std::string(" ") + domain + (err.empty() ? std::string(" |ours - numpy| ") + d : " " + err);
        ok &= err.empty();
      }
    } catch (const std::exception& e) {
      line += std::string(" ") + first_line(e.what()), ok = false;
    }
    report(ok, line);
  }
}

void check_override_off(Ort::Env& env, const std::vector<Record>& cases) {
  const Opts off{true, ORT_DISABLE_ALL, {{"nibble.override_com_microsoft", "0"}}};
  const Opts builtin{false, ORT_DISABLE_ALL, {}};
  const auto said = [](const Outcome& o) { return o.error.empty() ? "ran it" : "refused it: " + first_line(o.error); };
  // A model ORT's kernel computes (builtin=required: bit-identical result) and one whose values it does not define
  // (builtin=none, block_size 512: ORT 1.31 refuses it; 1.24 accepts it and returns uninitialised memory, whatever
  // the allocator hands back). In both, the override-off session must do what ORT's does (run, or refuse with the
  // same error) without nibble's kernel (no kernel-creation line); values are compared only where ORT defines them.
  for (const char* name : {"acc4_zp_k256_n64_bs32", "acc4_bs512_k1024_n16"}) {
    const Record& r = find_case(cases, name);
    const auto shape = parse_shape(r.at("a_shape"));
    const auto a = read_f32(r.at("a"));
    const Outcome got = try_run(env, r.at("com"), off, shape, a), ort = try_run(env, r.at("com"), builtin, shape, a);
    const bool defined = r.at("builtin") != "none";
    std::string why;
    if (got.error != ort.error)
      why = "ORT's kernel " + said(ort) + "; with the override off, ORT " + said(got);
    else if (!got.nibble_lines.empty())
      why = "nibble's kernel ran with the override off: " + got.nibble_lines[0];
    else if (defined && got.y != ort.y)
      why = "output differs from ORT's kernel by up to " + std::to_string(max_abs_diff(got.y, ort.y));
    const std::string how = !ort.error.empty() ? ""
                            : defined          ? ", bit-identical output"
                                               : " (its output is undefined here: compared that it ran, not the values)";
    report(why.empty(), std::string("override off: com.microsoft ") + name +
                            (why.empty() ? " behaves like ORT's kernel, which " + said(ort) + how +
                                               ", and nibble's kernel did not run"
                                         : " does not: " + why));
  }
  // Domain nibble is still served by nibble, and its kernel-creation line is seen (so the absence above means
  // something: the log capture works).
  const Record& r = find_case(cases, "acc4_zp_k256_n64_bs32");
  const Outcome nib = try_run(env, r.at("nibble"), off, parse_shape(r.at("a_shape")), read_f32(r.at("a")));
  std::string err = nib.error.empty() ? compare(nib.y, read_f32(r.at("y")), r.at("tol")) : nib.error;
  if (err.empty() && nib.nibble_lines.size() != 1)
    err = std::to_string(nib.nibble_lines.size()) + " nibble kernel-creation log lines, expected 1";
  report(err.empty(), "override off: domain nibble still runs nibble's kernel" +
                          (err.empty() ? " (its log line: " + nib.nibble_lines[0].substr(0, 60) + "...)" : ": " + err));
}

void check_malformed(Ort::Env& env) {
  for (const auto& r : manifest("malformed")) {
    std::string msg = "no error";
    bool ort_exception = false;
    try {
      auto s = make_session(env, r.at("model"), Opts{});
      run(s, {1, 64}, std::vector<float>(64, 0.5f));  // some errors can only show at the first run
    } catch (const Ort::Exception& e) {
      ort_exception = true, msg = e.what();
    } catch (const std::exception& e) {
      msg = std::string("not an Ort::Exception: ") + e.what();
    }
    const bool ok = ort_exception && msg.find("[MatMulNBits]") != std::string::npos;
    report(ok, "malformed " + r.at("name") + " throws Ort::Exception: " + first_line(msg) +
                   (ok ? "" : " (expected [MatMulNBits]; " + r.at("why") + ")"));
  }
}

// What Triton Inference Server's onnxruntime backend does with `model_operations { op_library_filename }`
// (examples/triton): per model instance, its own session options, the v1 C call
// OrtApi::RegisterCustomOpsLibrary(options, path, &handle) (the handle is kept, never closed), then the session.
// Two instances in one process, as instance_group { count: 2 } makes them.
void check_triton_style(Ort::Env& env, const std::vector<Record>& cases) {
  const Record& r = find_case(cases, "acc4_zp_k256_n64_bs32");
  const auto shape = parse_shape(r.at("a_shape"));
  const auto a = read_f32(r.at("a")), want = read_f32(r.at("y"));
  std::vector<Ort::Session> instances;
  std::string err;
  try {
    for (int i = 0; i < 2; ++i) {
      Ort::SessionOptions so;
      so.SetIntraOpNumThreads(1);
      void* handle = nullptr;  // Triton leaks it ("no harm"): the library stays loaded for the process
      Ort::ThrowOnError(Ort::GetApi().RegisterCustomOpsLibrary(so, g_lib.c_str(), &handle));
      if (!handle) throw std::runtime_error("RegisterCustomOpsLibrary returned no library handle");
      instances.emplace_back(env, (g_dir + "/" + r.at("com")).c_str(), so);
    }
    for (auto& s : instances) {
      const std::string e = compare(run(s, shape, a), want, r.at("tol"));
      if (!e.empty()) err = e;
    }
  } catch (const std::exception& e) {
    err = first_line(e.what());
  }
  report(err.empty(), "Triton-style loading: v1 RegisterCustomOpsLibrary per instance, 2 instances, com.microsoft " +
                          r.at("name") + (err.empty() ? " matches numpy" : ": " + err));
}

OrtLoggingLevel log_level() {  // ORT_LOG, default fatal
  const std::string v = std::getenv("ORT_LOG") ? std::getenv("ORT_LOG") : "";
  return v == "verbose" ? ORT_LOGGING_LEVEL_VERBOSE : v == "info"  ? ORT_LOGGING_LEVEL_INFO
       : v == "warning" ? ORT_LOGGING_LEVEL_WARNING : v == "error" ? ORT_LOGGING_LEVEL_ERROR
                        : ORT_LOGGING_LEVEL_FATAL;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string frontend = argc > 4 ? argv[4] : "custom-op";
  if (argc < 3 || (frontend != "custom-op" && frontend != "ep")) {
    std::fprintf(stderr, "usage: %s LIBNIBBLE FIXTURES_DIR [ORT_VERSION [custom-op|ep]]\n", argv[0]);
    return 2;
  }
  g_lib = argv[1], g_dir = argv[2], g_ep = frontend == "ep";
#if ORT_API_VERSION < 22
  if (g_ep) {
    std::fprintf(stderr, "test_load: built against ORT_API_VERSION %d headers, which have no EP libraries (22+)\n",
                 ORT_API_VERSION);
    return 2;
  }
#endif
  try {
    g_print_level = log_level();
    // The Env's level is the most verbose any session asks for (INFO); log_sink prints only what ORT_LOG asks.
    Ort::Env env(ORT_LOGGING_LEVEL_INFO, "nibble-cpp-test", log_sink, nullptr);
    const std::string version = Ort::GetVersionString();
    const bool right = argc < 4 || version == argv[3];
    report(right, "ONNX Runtime " + version + (right ? "" : std::string(", expected ") + argv[3]) +
                      " (C++ API, headers ORT_API_VERSION " + std::to_string(ORT_API_VERSION) + "), nibble " +
                      frontend + ": " + g_lib);
#if ORT_API_VERSION >= 22
    if (g_ep) {
      env.RegisterExecutionProviderLibrary("nibble", g_lib);
      const auto devices = nibble_devices(env);
      report(devices.size() == 1, "execution-provider library registered: " + std::to_string(devices.size()) +
                                      " NibbleExecutionProvider device(s), expected 1");
    }
#endif
    const auto cases = manifest("case");
    check_cases(env, cases);
    check_override_off(env, cases);
    if (!g_ep) check_triton_style(env, cases);
    check_malformed(env);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "test_load: %s\n", e.what());
    return 2;
  }
  std::printf("%s\n", g_failed ? "C++ test: FAILED" : "C++ test: all checks passed");
  return g_failed ? 1 : 0;
}
