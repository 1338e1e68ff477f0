#include "tokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace nibble_service {
namespace {

using nlohmann::json;

// Unicode White_Space (what `\s` means in the Rust regex `tokenizers` uses): U+0009..000D, U+0085, \p{Z}.
#define WS "\\t\\n\\x{0B}\\f\\r\\x{85}\\p{Z}"
// The GPT-2 split pattern of `tokenizers`' ByteLevel pre-tokenizer, `\s` spelled as White_Space.
constexpr const char* kByteLevelPattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|[" WS "]+(?![^" WS "])|[" WS "]+";
#undef WS
// Digits pre-tokenizer: Rust's char::is_numeric, general categories Nd, Nl, No.
constexpr const char* kNumericPattern = "\\p{N}";

void append_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes for U+0100 onwards.
struct ByteMap {
  std::array<std::string, 256> to_char;           // byte -> UTF-8 of its stand-in character
  std::unordered_map<uint32_t, uint8_t> to_byte;  // stand-in code point -> byte
  ByteMap() {
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const uint32_t cp = printable ? b : next++;
      append_utf8(to_char[b], cp);
      to_byte[cp] = static_cast<uint8_t>(b);
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

// Decodes one UTF-8 code point of a valid string at s[i], advancing i.
uint32_t next_code_point(std::string_view s, size_t& i) {
  const auto b = static_cast<unsigned char>(s[i]);
  const int len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  uint32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
  for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += len;
  return cp;
}

[[noreturn]] void refuse(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what +
                           " (the C++ service reads the byte-level BPE tokenizers that models/gguf_to_onnx.py "
                           "writes; see models/LLAMA_MODEL_DIR.md)");
}

bool is_null_or_missing(const json& j, const char* key) { return !j.contains(key) || j.at(key).is_null(); }

}  // namespace

std::string utf8_lossy(std::string_view s) {
  static const char kReplacement[] = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  const auto at = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  while (i < s.size()) {
    const unsigned char b = at(i);
    if (b < 0x80) {
      out += static_cast<char>(b);
      ++i;
      continue;
    }
    int len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the valid range of the second byte
    if (b >= 0xC2 && b <= 0xDF) {
      len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      len = 3;
      if (b == 0xE0) lo = 0xA0;
      if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      len = 4;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;
    }
    if (len == 0) {  // 0x80..0xC1, 0xF5..0xFF: never valid
      out += kReplacement;
      ++i;
      continue;
    }
    // The longest valid prefix of the sequence; a broken one becomes one U+FFFD (a maximal subpart).
    size_t k = 1;
    while (k < static_cast<size_t>(len) && i + k < s.size()) {
      const unsigned char c = at(i + k);
      const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
      if (c < l || c > h) break;
      ++k;
    }
    if (k == static_cast<size_t>(len)) {
      out.append(s.substr(i, k));
    } else {
      out += kReplacement;
    }
    i += k;
  }
  return out;
}

struct Tokenizer::Regex {
  pcre2_code* split = nullptr;
  pcre2_code* numeric = nullptr;
  ~Regex() {
    pcre2_code_free(split);
    pcre2_code_free(numeric);
  }
  static pcre2_code* compile(const char* pattern) {
    int err = 0;
    PCRE2_SIZE at = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                                     PCRE2_UTF | PCRE2_UCP, &err, &at, nullptr);
    if (!code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      throw std::runtime_error(std::string("PCRE2 cannot compile the pre-tokenizer pattern at offset ") +
                               std::to_string(at) + ": " + reinterpret_cast<const char*>(msg));
    }
    return code;
  }
  // Splits `text` into the matches of `code` and the text between them, in order (tokenizers' "Isolated").
  template <class F>
  static void split_isolated(pcre2_code* code, std::string_view text, F&& piece) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
    if (!md) throw std::bad_alloc();
    size_t pos = 0, last = 0;
    try {
      while (pos < text.size()) {
        // encode() checked the text is UTF-8 once; PCRE2 would otherwise re-check it from `pos` on every call.
        const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), pos,
                                   PCRE2_NO_UTF_CHECK, md, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          PCRE2_UCHAR msg[256];
          pcre2_get_error_message(rc, msg, sizeof msg);
          throw std::runtime_error(std::string("pre-tokenizer: ") + reinterpret_cast<const char*>(msg));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        if (ov[0] > last) piece(text.substr(last, ov[0] - last));
        if (ov[1] > ov[0]) piece(text.substr(ov[0], ov[1] - ov[0]));
        last = ov[1];
        pos = ov[1] > ov[0] ? ov[1] : ov[1] + 1;  // the patterns never match empty; guard anyway
      }
      if (last < text.size()) piece(text.substr(last));
    } catch (...) {
      pcre2_match_data_free(md);
      throw;
    }
    pcre2_match_data_free(md);
  }
};

Tokenizer::Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(path + ": cannot open the tokenizer");
  json j;
  try {
    j = json::parse(f);
  } catch (const json::exception& e) {
    throw std::runtime_error(path + ": not JSON: " + e.what());
  }
  Tokenizer t;
  t.path_ = path;
  try {
    if (!is_null_or_missing(j, "normalizer")) refuse(path, "normalizer " + j["normalizer"].dump() + " is not supported");
    // pre_tokenizer: ByteLevel, or Sequence[Digits, ByteLevel]
    const json& pre = j.at("pre_tokenizer");
    const json* byte_level = &pre;
    if (pre.at("type") == "Sequence") {
      const json& seq = pre.at("pretokenizers");
      if (seq.size() == 2 && seq[0].at("type") == "Digits" && seq[1].at("type") == "ByteLevel") {
        t.digits_individual_ = seq[0].value("individual_digits", false);
        if (!t.digits_individual_) refuse(path, "pre_tokenizer Digits without individual_digits is not supported");
        byte_level = &seq[1];
      } else {
        refuse(path, "pre_tokenizer " + pre.dump() + " is not supported");
      }
    }
    if (byte_level->at("type") != "ByteLevel") refuse(path, "pre_tokenizer " + pre.dump() + " is not supported");
    if (byte_level->value("add_prefix_space", false)) refuse(path, "ByteLevel add_prefix_space=true is not supported");
    t.use_regex_ = byte_level->value("use_regex", true);
    if (!is_null_or_missing(j, "decoder") && j["decoder"].at("type") != "ByteLevel")
      refuse(path, "decoder " + j["decoder"].dump() + " is not supported");
    if (!is_null_or_missing(j, "post_processor") && j["post_processor"].at("type") != "ByteLevel")
      refuse(path, "post_processor " + j["post_processor"].dump() + " is not supported");

    const json& model = j.at("model");
    if (model.at("type") != "BPE") refuse(path, "model.type " + model["type"].dump() + " is not BPE");
    for (const char* k : {"dropout", "continuing_subword_prefix", "end_of_word_suffix"})
      if (!is_null_or_missing(model, k)) refuse(path, std::string("model.") + k + " " + model[k].dump() + " is not supported");
    if (model.value("byte_fallback", false)) refuse(path, "model.byte_fallback=true is not supported");
    if (model.value("ignore_merges", false)) refuse(path, "model.ignore_merges=true is not supported");

    for (const auto& [tok, id_json] : model.at("vocab").items()) {
      const int64_t id = id_json.get<int64_t>();
      if (id < 0 || id > std::numeric_limits<int32_t>::max()) refuse(path, "vocab id " + std::to_string(id) + " out of range");
      t.vocab_[tok] = static_cast<int32_t>(id);
    }
    const auto add_vocab_entry = [&](const std::string& tok, int32_t id) {
      if (t.id_to_token_.size() <= static_cast<size_t>(id)) t.id_to_token_.resize(static_cast<size_t>(id) + 1);
      t.id_to_token_[static_cast<size_t>(id)] = tok;
    };
    for (const auto& [tok, id] : t.vocab_) add_vocab_entry(tok, id);

    if (j.contains("added_tokens")) {
      for (const json& a : j["added_tokens"]) {
        const std::string content = a.at("content").get<std::string>();
        const int32_t id = a.at("id").get<int32_t>();
        for (const char* flag : {"single_word", "lstrip", "rstrip"})
          if (a.value(flag, false))
            refuse(path, "added token " + json(content).dump() + " has " + flag + "=true, which is not supported");
        // tokenizers matches normalized added tokens in a second pass; the converter writes none
        if (a.value("normalized", false))
          refuse(path, "added token " + json(content).dump() + " is normalized, which is not supported");
        t.added_.push_back({content, id, a.value("special", false)});
        add_vocab_entry(content, id);
      }
    }
    // Longest first: the leftmost match that is longest wins (tokenizers' Aho-Corasick LeftmostLongest).
    std::stable_sort(t.added_.begin(), t.added_.end(),
                     [](const Added& a, const Added& b) { return a.content.size() > b.content.size(); });
    t.special_.assign(t.id_to_token_.size(), false);
    for (const Added& a : t.added_) {
      if (a.content.empty()) refuse(path, "an added token is empty");
      t.special_[static_cast<size_t>(a.id)] = a.special;
    }

    int32_t rank = 0;
    for (const json& m : model.at("merges")) {
      std::string left, right;
      if (m.is_array() && m.size() == 2) {  // ["a", "b"] (tokenizers >= 0.20)
        left = m[0].get<std::string>();
        right = m[1].get<std::string>();
      } else if (m.is_string()) {  // "a b"
        const std::string s = m.get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) refuse(path, "merge " + m.dump() + " is not \"a b\"");
        left = s.substr(0, sp);
        right = s.substr(sp + 1);
      } else {
        refuse(path, "merge " + m.dump() + " is neither [a, b] nor \"a b\"");
      }
      const auto merged = t.vocab_.find(left + right);
      if (merged == t.vocab_.end()) refuse(path, "merge " + m.dump() + " makes a token that is not in the vocabulary");
      // a repeated merge takes its last rank, as tokenizers' map of merges does
      t.merges_[left + '\0' + right] = std::make_pair(rank++, merged->second);
    }
    if (!is_null_or_missing(model, "unk_token")) {
      const auto u = t.vocab_.find(model["unk_token"].get<std::string>());
      if (u != t.vocab_.end()) t.unk_ = u->second;
    }
    for (int b = 0; b < 256; ++b)
      if (!t.vocab_.count(byte_map().to_char[static_cast<size_t>(b)]) && !t.unk_)
        refuse(path, "the vocabulary lacks byte " + std::to_string(b) + "'s token and there is no unk_token");
  } catch (const json::exception& e) {
    throw std::runtime_error(path + ": unexpected tokenizer.json structure: " + e.what());
  }
  t.re_ = std::make_unique<Regex>();
  t.re_->split = Regex::compile(kByteLevelPattern);
  t.re_->numeric = Regex::compile(kNumericPattern);
  return t;
}

void Tokenizer::bpe(std::string_view word, std::vector<int32_t>& out) const {
  // Symbols: one stand-in character per byte, then merged pair by pair, lowest rank first (leftmost on ties).
  std::vector<std::string> sym;
  sym.reserve(word.size());
  for (unsigned char b : word) sym.push_back(byte_map().to_char[b]);
  std::vector<int32_t> rank(sym.size() > 1 ? sym.size() - 1 : 0);
  const auto pair_rank = [&](size_t i) {
    const auto m = merges_.find(sym[i] + '\0' + sym[i + 1]);
    return m == merges_.end() ? std::numeric_limits<int32_t>::max() : m->second.first;
  };
  for (size_t i = 0; i + 1 < sym.size(); ++i) rank[i] = pair_rank(i);
  while (!rank.empty()) {
    const auto best = std::min_element(rank.begin(), rank.end());
    if (*best == std::numeric_limits<int32_t>::max()) break;
    const size_t i = static_cast<size_t>(best - rank.begin());
    sym[i] += sym[i + 1];
    sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    rank.erase(rank.begin() + static_cast<std::ptrdiff_t>(i));
    if (i > 0) rank[i - 1] = pair_rank(i - 1);
    if (i < rank.size()) rank[i] = pair_rank(i);
  }
  for (const std::string& s : sym) {
    const auto v = vocab_.find(s);
    if (v != vocab_.end()) {
      out.push_back(v->second);
    } else if (unk_) {
      out.push_back(*unk_);
    } else {
      throw std::runtime_error(path_ + ": token " + json(s).dump() + " is not in the vocabulary");
    }
  }
}

void Tokenizer::pre_tokenize_and_bpe(std::string_view text, std::vector<int32_t>& out) const {
  const auto byte_level = [&](std::string_view piece) {
    if (use_regex_) {
      Regex::split_isolated(re_->split, piece, [&](std::string_view word) { bpe(word, out); });
    } else {
      bpe(piece, out);
    }
  };
  if (digits_individual_) {
    Regex::split_isolated(re_->numeric, text, byte_level);
  } else {
    byte_level(text);
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  if (utf8_lossy(text) != text) throw std::runtime_error("the text to tokenize is not valid UTF-8");
  std::vector<int32_t> out;
  size_t start = 0;  // text[start, i) is plain text waiting for the pre-tokenizer
  size_t i = 0;
  while (i < text.size()) {
    const Added* hit = nullptr;
    for (const Added& a : added_) {  // longest first
      if (text.compare(i, a.content.size(), a.content) == 0) {
        hit = &a;
        break;
      }
    }
    if (!hit) {
      ++i;
      continue;
    }
    if (i > start) pre_tokenize_and_bpe(text.substr(start, i - start), out);
    out.push_back(hit->id);
    i += hit->content.size();
    start = i;
  }
  if (start < text.size()) pre_tokenize_and_bpe(text.substr(start), out);
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    // ids the tokenizer does not know (a model whose logits are padded past the vocabulary) decode to nothing,
    // as in tokenizers
    if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size()) continue;
    if (skip_special && special_[static_cast<size_t>(id)]) continue;
    const std::string& tok = id_to_token_[static_cast<size_t>(id)];
    // Each character back to its byte; a token with a character outside the byte map keeps its UTF-8 bytes.
    std::string mapped;
    bool all_mapped = true;
    for (size_t k = 0; k < tok.size();) {
      const auto b = byte_map().to_byte.find(next_code_point(tok, k));
      if (b == byte_map().to_byte.end()) {
        all_mapped = false;
        break;
      }
      mapped += static_cast<char>(b->second);
    }
    bytes += all_mapped ? mapped : tok;
  }
  return utf8_lossy(bytes);
}

std::optional<int32_t> Tokenizer::token_id(const std::string& token) const {
  for (const Added& a : added_)
    if (a.content == token) return a.id;
  const auto v = vocab_.find(token);
  if (v == vocab_.end()) return std::nullopt;
  return v->second;
}

std::string Tokenizer::token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size()) return {};
  return id_to_token_[static_cast<size_t>(id)];
}

}  // namespace nibble_service
