// Chat prompts for the C++ service. model_config.json carries the model's Jinja chat template; C++ has no Jinja
// engine we could take from Debian, so the service renders the one template family its models use, ChatML
// (<|im_start|>role\ncontent<|im_end|>\n ... <|im_start|>assistant\n, as SmolLM2's template writes it), and refuses any other
// template with a message pointing to --raw. The template's own default system message (the literal
// '<|im_start|>system\n...<|im_end|>\n' it adds when the conversation has none) is read out of the template.
// tests/cpp/service/run.sh checks the result token for token against the Rust driver, which renders the template
// with a real Jinja engine (minijinja).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace nibble_service {

struct Message {
  std::string role;
  std::string content;
};

class ChatMl {
 public:
  // Throws std::runtime_error when `jinja_template` is not a ChatML template.
  static ChatMl from_template(const std::string& jinja_template);
  // The prompt for `messages`, ending with the assistant's header (add_generation_prompt).
  std::string render(const std::vector<Message>& messages) const;
  const std::optional<std::string>& default_system() const { return default_system_; }

 private:
  std::optional<std::string> default_system_;
};

}  // namespace nibble_service
