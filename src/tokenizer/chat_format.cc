#include "tokenizer/chat_format.h"

#include <utf8proc.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace rowlm::tokenizer {

namespace {

// Python's str.isspace(): Unicode White_Space plus the C0 separators
// U+001C..U+001F (bidirectional class B or S).
bool python_isspace(utf8proc_int32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

bool valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t left = utf8proc_ssize_t(s.size());
  while (left > 0) {
    utf8proc_int32_t c;
    const utf8proc_ssize_t n = utf8proc_iterate(p, left, &c);
    if (n <= 0) return false;
    p += n, left -= n;
  }
  return true;
}

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }
bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

std::string role_error(const ChatFormat& f, std::size_t index, const std::string& what) {
  return "chat format " + f.name() + ": message " + std::to_string(index) + " " + what;
}

// Checks what every family needs: a non-empty conversation, simple role
// names, UTF-8 content.
void check_messages(const ChatFormat& f, std::span<const ChatMessage> messages) {
  if (messages.empty()) throw Error("chat format " + f.name() + ": the conversation has no messages");
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    const bool simple = !role.empty() && std::all_of(role.begin(), role.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    });
    if (!simple) throw Error(role_error(f, i, "has role '" + role + "'; a role is a non-empty [A-Za-z0-9_-] name"));
    if (!valid_utf8(messages[i].content)) throw Error(role_error(f, i, "has content that is not valid UTF-8"));
  }
}

bool is_system(const ChatMessage& m) { return m.role == "system" || m.role == "developer"; }

// Gemma 4 history drops thinking from model turns: every "<|channel>...<channel|>"
// span (and an unclosed "<|channel>..." tail) goes, then the text is trimmed.
std::string strip_gemma4_thinking(std::string_view text) {
  std::string out;
  std::size_t pos = 0;
  while (true) {
    const std::size_t close = text.find("<channel|>", pos);
    const std::string_view part = text.substr(pos, close == std::string_view::npos ? std::string_view::npos : close - pos);
    out.append(part.substr(0, part.find("<|channel>")));
    if (close == std::string_view::npos) break;
    pos = close + std::string_view("<channel|>").size();
  }
  return python_strip(out);
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read " + path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::json read_json(const std::filesystem::path& path) {
  try {
    return nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(path.string() + " is not valid JSON: " + e.what());
  }
}

// tokenizer_config.json's chat_template is a string, or a list of
// {name, template} of which "default" is the chat one.
std::string template_from_config(const nlohmann::json& config, const std::filesystem::path& path) {
  if (!config.contains("chat_template")) return "";
  const nlohmann::json& t = config["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array()) {
    for (const auto& entry : t)
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string())
        return entry["template"].get<std::string>();
    if (!t.empty() && t[0].is_object() && t[0].contains("template") && t[0]["template"].is_string())
      return t[0]["template"].get<std::string>();
  }
  if (t.is_null()) return "";
  throw Error(path.string() + ": chat_template is neither a string nor a list of named templates");
}

std::string token_text(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string())
    return value["content"].get<std::string>();
  return "";
}

}  // namespace

std::string python_strip(std::string_view text) {
  // Find the first and last non-space code points.
  const auto* base = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  std::size_t begin = text.size(), end = 0, pos = 0;
  while (pos < text.size()) {
    utf8proc_int32_t c;
    utf8proc_ssize_t n = utf8proc_iterate(base + pos, utf8proc_ssize_t(text.size() - pos), &c);
    if (n <= 0) n = 1, c = -1;  // not UTF-8: a non-space byte
    if (!python_isspace(c)) {
      begin = std::min(begin, pos);
      end = pos + std::size_t(n);
    }
    pos += std::size_t(n);
  }
  return begin >= end ? std::string() : std::string(text.substr(begin, end - begin));
}

ChatFormat::ChatFormat(std::string name, ChatFamily family, std::string bos, std::vector<std::string> stop_tokens)
    : name_(std::move(name)), family_(family), bos_(std::move(bos)), stop_tokens_(std::move(stop_tokens)) {}

const std::vector<std::string>& ChatFormat::names() {
  static const std::vector<std::string> all = {"gemma4", "gemma3", "chatml", "llama3"};
  return all;
}

ChatFormat ChatFormat::by_name(std::string_view name) {
  if (name == "gemma4") return ChatFormat("gemma4", ChatFamily::kGemma4, "<bos>", {"<turn|>", "<eos>"});
  if (name == "gemma3") return ChatFormat("gemma3", ChatFamily::kGemma3, "<bos>", {"<end_of_turn>", "<eos>"});
  if (name == "chatml") return ChatFormat("chatml", ChatFamily::kChatML, "", {"<|im_end|>", "<|endoftext|>"});
  if (name == "llama3")
    return ChatFormat("llama3", ChatFamily::kLlama3, "<|begin_of_text|>",
                      {"<|eot_id|>", "<|end_of_text|>", "<|eom_id|>"});
  std::string list;
  for (const auto& n : names()) list += (list.empty() ? "" : ", ") + n;
  throw Error("unknown chat format '" + std::string(name) + "' (known: " + list + ")");
}

ChatFormat ChatFormat::detect(std::string_view chat_template, std::string_view model_type, std::string_view bos_token) {
  std::optional<ChatFormat> format;
  // Gemma 4 first: its templates may mention the Gemma 3 markers in comments.
  if (contains(chat_template, "<|turn>")) format = by_name("gemma4");
  else if (contains(chat_template, "<start_of_turn>")) format = by_name("gemma3");
  else if (contains(chat_template, "<|im_start|>")) format = by_name("chatml");
  else if (contains(chat_template, "<|start_header_id|>")) format = by_name("llama3");
  else if (starts_with(model_type, "gemma4")) format = by_name("gemma4");
  else if (starts_with(model_type, "gemma")) format = by_name("gemma3");  // gemma, gemma2, gemma3, gemma3n
  else if (starts_with(model_type, "qwen2") || starts_with(model_type, "qwen3")) format = by_name("chatml");
  else if (model_type == "llama" && bos_token == "<|begin_of_text|>") format = by_name("llama3");
  if (!format) {
    std::string list;
    for (const auto& n : names()) list += (list.empty() ? "" : ", ") + n;
    throw Error("cannot choose a chat format (model_type '" + std::string(model_type) + "', " +
                (chat_template.empty() ? "no chat template" : "a chat template rowlm does not recognise") +
                "); choose one of: " + list);
  }

  // Variants, recognised by what the template writes. The Jinja source
  // spells the newline as an escape or as itself.
  if (format->family_ == ChatFamily::kGemma4)
    format->empty_thought_channel_ = contains(chat_template, "<|channel>thought\\n<channel|>") ||
                                     contains(chat_template, "<|channel>thought\n<channel|>");
  if (format->family_ == ChatFamily::kChatML) {
    for (const char* known : {"You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
                              "You are a helpful assistant."}) {
      if (contains(chat_template, known)) {
        format->default_system_ = known;
        break;
      }
    }
    format->think_tags_ = contains(chat_template, "<think>");
  }
  return *format;
}

ChatFormat ChatFormat::from_model_dir(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir)) throw Error("model directory " + dir.string() + " does not exist");
  std::string chat_template, model_type, bos_token;
  const auto jinja = dir / "chat_template.jinja", tok_config = dir / "tokenizer_config.json",
             template_json = dir / "chat_template.json", config = dir / "config.json";
  if (std::filesystem::exists(tok_config)) {
    const nlohmann::json c = read_json(tok_config);
    if (!c.is_object()) throw Error(tok_config.string() + " is not a JSON object");
    chat_template = template_from_config(c, tok_config);
    if (c.contains("bos_token")) bos_token = token_text(c["bos_token"]);
  }
  if (std::filesystem::exists(jinja)) {
    chat_template = read_file(jinja);  // the standalone file wins, as in transformers
  } else if (chat_template.empty() && std::filesystem::exists(template_json)) {
    const nlohmann::json c = read_json(template_json);
    if (c.is_object()) chat_template = template_from_config(c, template_json);
  }
  if (std::filesystem::exists(config)) {
    const nlohmann::json c = read_json(config);
    if (c.is_object()) {
      if (c.contains("model_type") && c["model_type"].is_string()) model_type = c["model_type"].get<std::string>();
      if (model_type.empty() && c.contains("text_config") && c["text_config"].is_object())
        model_type = c["text_config"].value("model_type", "");
    }
  }
  try {
    return detect(chat_template, model_type, bos_token);
  } catch (const Error& e) {
    throw Error(dir.string() + ": " + e.what() + " with --chat-format");
  }
}

std::string ChatFormat::render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                               const ChatOptions& options) const {
  check_messages(*this, messages);
  switch (family_) {
    case ChatFamily::kGemma4: return render_gemma4(messages, add_generation_prompt, options);
    case ChatFamily::kGemma3: return render_gemma3(messages, add_generation_prompt);
    case ChatFamily::kChatML: return render_chatml(messages, add_generation_prompt, options);
    case ChatFamily::kLlama3: return render_llama3(messages, add_generation_prompt);
  }
  ROWLM_CHECK(false, "unknown chat family");
}

std::string ChatFormat::render_gemma4(std::span<const ChatMessage> m, bool gen, const ChatOptions& o) const {
  std::string out = bos_;
  std::size_t first = 0;
  const bool thinking = thinking_on(o);
  if (thinking || is_system(m[0])) {
    out += "<|turn>system\n";
    if (thinking) out += "<|think|>\n";
    if (is_system(m[0])) out += python_strip(m[0].content), first = 1;
    out += "<turn|>\n";
  }
  for (std::size_t i = first; i < m.size(); ++i) {
    if (m[i].role == "tool")
      throw Error(role_error(*this, i, "has role 'tool'; tool calls are not supported by rowlm's gemma4 format yet"));
    const bool model = m[i].role == "assistant";
    // As in the template: an assistant message right after another one
    // continues the same model turn (no second opener).
    const bool continues = model && i > first && m[i - 1].role == "assistant";
    if (!continues) out += "<|turn>" + (model ? std::string("model") : m[i].role) + "\n";
    out += model ? strip_gemma4_thinking(m[i].content) : python_strip(m[i].content);
    out += "<turn|>\n";
  }
  if (gen) {
    out += "<|turn>model\n";
    if (empty_thought_channel_ && !thinking) out += "<|channel>thought\n<channel|>";
  }
  return out;
}

std::string ChatFormat::render_gemma3(std::span<const ChatMessage> m, bool gen) const {
  std::string out = bos_, first_user_prefix;
  std::size_t first = 0;
  if (m[0].role == "system") first_user_prefix = m[0].content + "\n\n", first = 1;  // not trimmed
  for (std::size_t i = first; i < m.size(); ++i) {
    const bool user_turn = (i - first) % 2 == 0;
    if ((m[i].role == "user") != user_turn)
      throw Error(role_error(*this, i, "has role '" + m[i].role +
                                           "'; after an optional first system message, roles must alternate "
                                           "user/assistant/user/... starting with user"));
    out += "<start_of_turn>" + (m[i].role == "assistant" ? std::string("model") : m[i].role) + "\n";
    if (i == first) out += first_user_prefix;
    out += python_strip(m[i].content) + "<end_of_turn>\n";
  }
  if (gen) out += "<start_of_turn>model\n";
  return out;
}

std::string ChatFormat::render_chatml(std::span<const ChatMessage> m, bool gen, const ChatOptions& o) const {
  std::string out;
  if (!default_system_.empty() && m[0].role != "system")
    out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
  // Qwen 3: the last user message that is not a wrapped tool result.
  std::size_t last_query = 0;
  for (std::size_t i = 0; i < m.size(); ++i) {
    const std::string_view c = m[i].content;
    if (m[i].role == "user" && !(starts_with(c, "<tool_response>") && c.ends_with("</tool_response>"))) last_query = i;
  }
  for (std::size_t i = 0; i < m.size(); ++i) {
    const ChatMessage& msg = m[i];
    std::string content = msg.content;
    if (think_tags_ && msg.role == "assistant" && contains(content, "</think>")) {
      // As Qwen 3's template: reasoning = what precedes the last </think>
      // (after its <think>), content = what follows it.
      const std::size_t close = content.rfind("</think>");
      std::string_view before = std::string_view(content).substr(0, close);
      if (const std::size_t open = before.rfind("<think>"); open != std::string_view::npos)
        before.remove_prefix(open + std::string_view("<think>").size());
      while (!before.empty() && before.front() == '\n') before.remove_prefix(1);
      while (!before.empty() && before.back() == '\n') before.remove_suffix(1);
      std::string_view after = std::string_view(content).substr(close + std::string_view("</think>").size());
      while (!after.empty() && after.front() == '\n') after.remove_prefix(1);
      content = i > last_query ? "<think>\n" + std::string(before) + "\n</think>\n\n" + std::string(after)
                               : std::string(after);
    }
    out += "<|im_start|>" + msg.role + "\n" + content + "<|im_end|>\n";
  }
  if (gen) {
    out += "<|im_start|>assistant\n";
    if (think_tags_ && !thinking_on(o)) out += "<think>\n\n</think>\n\n";
  }
  return out;
}

std::string ChatFormat::render_llama3(std::span<const ChatMessage> m, bool gen) const {
  std::string out = bos_;
  for (const ChatMessage& msg : m)
    out += "<|start_header_id|>" + msg.role + "<|end_header_id|>\n\n" + python_strip(msg.content) + "<|eot_id|>";
  if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

std::optional<std::string> ChatFormat::continuation(std::string_view kv_text, std::span<const ChatMessage> conversation,
                                                    bool add_generation_prompt, const ChatOptions& options) const {
  std::string full = render(conversation, add_generation_prompt, options);
  if (!starts_with(full, kv_text)) return std::nullopt;
  return full.substr(kv_text.size());
}

}  // namespace rowlm::tokenizer
