#pragma once
// Chat formats: how a conversation becomes the prompt text a chat model was
// trained on. Four built-in families, each reproducing its Hugging Face Jinja
// chat template for plain-text conversations (no tools, no images):
//
//   gemma4  <bos>[<|turn>system\n{system}<turn|>\n]<|turn>user\n{user}<turn|>\n
//           <|turn>model\n{reply}<turn|>\n ... <|turn>model\n
//           (assistant renders as "model"; contents trimmed; earlier model
//           turns lose <|channel>...<channel|> thinking; enable_thinking puts
//           <|think|> in the system turn; 12B/26B/31B templates add an empty
//           thought channel after the generation prompt, see below)
//   gemma3  <bos><start_of_turn>user\n{system}\n\n{user}<end_of_turn>\n
//           <start_of_turn>model\n{reply}<end_of_turn>\n ...
//           (a system message is folded into the first user turn; roles must
//           alternate user/assistant starting with user)
//   chatml  <|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
//           (Qwen; contents verbatim; Qwen2/2.5 templates add a default
//           system message, detected from the template; Qwen 3 templates,
//           recognised by <think>, think by default: enable_thinking false
//           appends <think>\n\n</think>\n\n to the generation prompt, and
//           assistant turns before the last user query lose their
//           <think>...</think>, later ones keep it rewritten as the template
//           writes it)
//   llama3  <|begin_of_text|><|start_header_id|>{role}<|end_header_id|>\n\n
//           {content}<|eot_id|> ... (contents trimmed; Llama 3.1+'s dated
//           system preamble is not reproduced)
//
// "Trimmed" is Jinja's trim filter, i.e. Python's str.strip(): Unicode
// whitespace at both ends.
//
// The rendered text writes the format's BOS itself: encode it with special
// tokens parsed and without adding BOS again.
//
// Multi-turn prefix property: rendering a conversation's first k messages is
// a prefix of rendering all of them, and render(history, generation prompt)
// is a prefix of render(history + reply), so a chat can keep its KV and
// prefill only the new text (see continuation()). Where it breaks:
//   - gemma4 with the empty thought channel: the generation prompt ends in
//     "<|channel>thought\n<channel|>", which the rendered model turn lacks;
//   - gemma4 replies holding thinking: history drops the thinking;
//   - gemma4/gemma3/llama3 replies with whitespace at either end: history
//     holds the trimmed reply, the KV the raw one.
// continuation() detects all of these (it returns nullopt).

#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rowlm::tokenizer {

struct ChatMessage {
  std::string role;  // system (or developer), user, assistant, or a family-specific role
  std::string content;
};

struct ChatOptions {
  // Ask the model to think before it answers (formats that support_thinking()
  // only); nullopt: the template's default (gemma4: off, Qwen 3: on).
  std::optional<bool> enable_thinking;
};

enum class ChatFamily { kGemma4, kGemma3, kChatML, kLlama3 };

class ChatFormat {
 public:
  // One of names(); throws rowlm::Error listing them otherwise.
  static ChatFormat by_name(std::string_view name);
  static const std::vector<std::string>& names();

  // Chooses from a model directory: the chat template's markers (from
  // chat_template.jinja, tokenizer_config.json's chat_template, or
  // chat_template.json), else config.json's model_type. Throws rowlm::Error
  // naming the directory when neither decides.
  static ChatFormat from_model_dir(const std::filesystem::path& dir);
  // The same choice from the template text and model_type alone.
  static ChatFormat detect(std::string_view chat_template, std::string_view model_type,
                           std::string_view bos_token = "");

  const std::string& name() const { return name_; }
  ChatFamily family() const { return family_; }

  // Renders the conversation; add_generation_prompt appends the opening of a
  // model turn. Throws rowlm::Error for an empty conversation, a bad role, a
  // role order the family's template rejects, or content that is not UTF-8.
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                     const ChatOptions& options = {}) const;

  // For a chat that keeps its KV between turns: the KV holds `kv_text` (the
  // last rendered prompt plus the model's reply, without the end-of-turn
  // token it stopped on). Returns the text still to prefill so that the KV
  // holds render(conversation, add_generation_prompt), or nullopt when
  // kv_text is not a prefix of that rendering (then prefill it all again).
  std::optional<std::string> continuation(std::string_view kv_text, std::span<const ChatMessage> conversation,
                                          bool add_generation_prompt, const ChatOptions& options = {}) const;

  // The BOS text render() writes ("" when the family writes none).
  const std::string& bos() const { return bos_; }
  // The token that closes a model turn; generation of a reply stops on it.
  const std::string& end_of_turn() const { return stop_tokens_.front(); }
  // Every token string that ends a reply (end_of_turn first). A string the
  // tokenizer's vocabulary lacks should be skipped.
  const std::vector<std::string>& stop_tokens() const { return stop_tokens_; }

  // gemma4: the generation prompt ends with an empty thought channel when
  // thinking is off (the 12B/26B/31B templates).
  bool empty_thought_channel() const { return empty_thought_channel_; }
  // chatml: the system message used when the conversation has none ("" = none).
  const std::string& default_system() const { return default_system_; }
  // Whether the format knows a thinking mode (gemma4; chatml with Qwen 3's
  // <think> template), and whether `options` turn it on.
  bool supports_thinking() const { return family_ == ChatFamily::kGemma4 || think_tags_; }
  bool thinking_on(const ChatOptions& options) const {
    return supports_thinking() && options.enable_thinking.value_or(think_tags_);
  }

 private:
  ChatFormat(std::string name, ChatFamily family, std::string bos, std::vector<std::string> stop_tokens);

  std::string render_gemma4(std::span<const ChatMessage> m, bool gen, const ChatOptions& o) const;
  std::string render_gemma3(std::span<const ChatMessage> m, bool gen) const;
  std::string render_chatml(std::span<const ChatMessage> m, bool gen, const ChatOptions& o) const;
  std::string render_llama3(std::span<const ChatMessage> m, bool gen) const;

  std::string name_;
  ChatFamily family_;
  std::string bos_;
  std::vector<std::string> stop_tokens_;
  bool empty_thought_channel_ = false;
  std::string default_system_;
  bool think_tags_ = false;  // chatml: Qwen 3's <think> reasoning
};

// Python's str.strip() on UTF-8 text (what Jinja's trim filter does):
// removes the code points for which str.isspace() is true from both ends.
std::string python_strip(std::string_view text);

}  // namespace rowlm::tokenizer
