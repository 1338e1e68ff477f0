#include "chat.hpp"

#include <stdexcept>

namespace nibble_service {
namespace {

// The text of a Jinja string literal's body with its escapes resolved (\n \t \r \' \" \\).
std::optional<std::string> unescape_jinja(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      out += s[i];
      continue;
    }
    if (++i == s.size()) return std::nullopt;
    switch (s[i]) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '\'': case '"': case '\\': out += s[i]; break;
      default: return std::nullopt;
    }
  }
  return out;
}

}  // namespace

ChatMl ChatMl::from_template(const std::string& t) {
  if (t.find("<|im_start|>") == std::string::npos || t.find("<|im_end|>") == std::string::npos ||
      t.find("message['role']") == std::string::npos || t.find("message['content']") == std::string::npos) {
    throw std::runtime_error(
        "the model's chat template is not ChatML (<|im_start|>role ... <|im_end|>); the C++ service renders only "
        "ChatML: pass --raw and give the whole prompt text");
  }
  ChatMl c;
  // A literal default system turn: '<|im_start|>system\n' TEXT '<|im_end|>' inside one quoted literal, the
  // newline written as a Jinja escape or (as model_config.json's JSON string decodes it) as itself.
  const std::string head = "<|im_start|>system";
  for (size_t at = t.find(head); at != std::string::npos; at = t.find(head, at + 1)) {
    size_t body = at + head.size();
    if (t.compare(body, 1, "\n") == 0) {
      body += 1;
    } else if (t.compare(body, 2, "\\n") == 0) {
      body += 2;
    } else {
      continue;
    }
    const size_t end = t.find("<|im_end|>", body);
    if (end == std::string::npos) break;
    const std::string raw = t.substr(body, end - body);
    // An unescaped quote or an expression: the literal ends before <|im_end|>, the text comes from a variable.
    bool literal = raw.find("{{") == std::string::npos && raw.find("{%") == std::string::npos;
    for (size_t i = 0; literal && i < raw.size(); ++i) {
      if (raw[i] == '\\') ++i;
      else if (raw[i] == '\'' || raw[i] == '"') literal = false;
    }
    if (!literal) continue;
    c.default_system_ = unescape_jinja(raw);
    if (!c.default_system_)
      throw std::runtime_error("the chat template's default system message uses a string escape the C++ service "
                               "does not read: pass --system TEXT");
    break;
  }
  return c;
}

std::string ChatMl::render(const std::vector<Message>& messages) const {
  std::string s;
  if (default_system_ && (messages.empty() || messages.front().role != "system"))
    s += "<|im_start|>system\n" + *default_system_ + "<|im_end|>\n";
  for (const Message& m : messages) s += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  s += "<|im_start|>assistant\n";
  return s;
}

}  // namespace nibble_service
