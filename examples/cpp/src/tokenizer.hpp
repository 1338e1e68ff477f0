// The tokenizer of a nibble-llama/1 model directory (models/LLAMA_MODEL_DIR.md): tokenizer.json in Hugging Face
// `tokenizers` format, the byte-level BPE family that models/gguf_to_onnx.py writes (GPT-2 byte map, no
// normalizer, pre-tokenizer ByteLevel(add_prefix_space=false, use_regex) optionally after Digits(individual_digits),
// ByteLevel decoder). Added tokens (e.g. <|im_start|>) are matched in the text before pre-tokenization, longest
// first. Anything outside that family is refused at load time with the file, the field and the value.
// Thread-safe after load: encode/decode only read.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace nibble_service {

class Tokenizer {
 public:
  // Reads and checks `path`; throws std::runtime_error naming the file and what is unsupported.
  static Tokenizer load(const std::string& path);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids of `text` (no special tokens added; added tokens in the text are matched as such).
  std::vector<int32_t> encode(std::string_view text) const;
  // The text of `ids`: byte-level decoded, invalid UTF-8 replaced by U+FFFD; special tokens left out when
  // `skip_special`; ids outside the vocabulary are skipped.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = true) const;
  // The id of a token string (vocabulary or added token).
  std::optional<int32_t> token_id(const std::string& token) const;
  // The string of a token id (empty when out of range).
  std::string token(int32_t id) const;
  // One more than the largest id.
  size_t size() const { return id_to_token_.size(); }

 private:
  struct Regex;  // PCRE2 objects (the GPT-2 split pattern, the numeric class)
  struct Added {
    std::string content;
    int32_t id;
    bool special;
  };

  Tokenizer();
  void bpe(std::string_view word, std::vector<int32_t>& out) const;
  void pre_tokenize_and_bpe(std::string_view text, std::vector<int32_t>& out) const;

  std::string path_;
  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> special_;  // per id: a special added token
  // merge of "left\0right" -> (rank, id of the merged token)
  std::unordered_map<std::string, std::pair<int32_t, int32_t>> merges_;
  std::vector<Added> added_;  // longest content first
  std::optional<int32_t> unk_;
  bool digits_individual_ = false;
  bool use_regex_ = true;
  std::unique_ptr<Regex> re_;
};

// Bytes -> UTF-8 text, each maximal invalid subsequence replaced by U+FFFD (as Rust's String::from_utf8_lossy).
std::string utf8_lossy(std::string_view bytes);

}  // namespace nibble_service
