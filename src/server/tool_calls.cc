#include "server/tool_calls.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>

#include "server/sse.h"

namespace rowlm::server {

namespace {

using Json = nlohmann::json;

constexpr std::string_view kGemmaQuote = constrain::kGemma4QuoteText;
constexpr std::string_view kGemmaCallOpen = "<|tool_call>";
constexpr std::string_view kGemmaCallClose = "<tool_call|>";
constexpr std::string_view kJsonCallOpen = "<tool_call>";
constexpr std::string_view kJsonCallClose = "</tool_call>";
// Model output is untrusted: nesting deeper than this is not a call.
constexpr int kMaxDepth = 64;

bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
}

// A recursive-descent reader of Gemma's argument syntax. Each method returns
// false (leaving the position unspecified) when the text is not well formed.
class GemmaValueReader {
 public:
  explicit GemmaValueReader(std::string_view text, std::size_t pos) : s_(text), pos_(pos) {}
  std::size_t pos() const { return pos_; }

  bool value(Json& out, int depth = 0) {
    if (depth > kMaxDepth) return false;
    skip_space();
    if (at(kGemmaQuote)) return gemma_string(out);
    if (pos_ >= s_.size()) return false;
    const char c = s_[pos_];
    if (c == '{') return object(out, depth);
    if (c == '[') return array(out, depth);
    if (c == '"') return json_string(out);
    if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) return number(out);
    for (auto [word, v] : {std::pair<std::string_view, Json>{"true", true}, {"false", false}, {"null", nullptr}}) {
      if (at(word) && !(pos_ + word.size() < s_.size() && is_name_char(s_[pos_ + word.size()]))) {
        pos_ += word.size();
        out = v;
        return true;
      }
    }
    return false;
  }

  bool object(Json& out, int depth) {
    if (!eat('{')) return false;
    out = Json::object();
    skip_space();
    if (eat('}')) return true;
    while (true) {
      std::string key;
      if (!object_key(key)) return false;
      skip_space();
      if (!eat(':')) return false;
      Json v;
      if (!value(v, depth + 1)) return false;
      out[key] = std::move(v);
      skip_space();
      if (eat('}')) return true;
      if (!eat(',')) return false;
      skip_space();
    }
  }

 private:
  bool array(Json& out, int depth) {
    if (!eat('[')) return false;
    out = Json::array();
    skip_space();
    if (eat(']')) return true;
    while (true) {
      Json v;
      if (!value(v, depth + 1)) return false;
      out.push_back(std::move(v));
      skip_space();
      if (eat(']')) return true;
      if (!eat(',')) return false;
    }
  }

  bool object_key(std::string& key) {
    skip_space();
    if (at(kGemmaQuote)) {
      Json k;
      if (!gemma_string(k)) return false;
      key = k.get<std::string>();
      return true;
    }
    if (pos_ < s_.size() && s_[pos_] == '"') {
      Json k;
      if (!json_string(k)) return false;
      key = k.get<std::string>();
      return true;
    }
    const std::size_t start = pos_;
    while (pos_ < s_.size() && (is_name_char(s_[pos_]) || s_[pos_] == '$')) ++pos_;
    key = std::string(s_.substr(start, pos_ - start));
    return !key.empty();
  }

  bool gemma_string(Json& out) {
    pos_ += kGemmaQuote.size();
    const std::size_t end = s_.find(kGemmaQuote, pos_);
    if (end == std::string_view::npos) return false;
    out = std::string(s_.substr(pos_, end - pos_));
    pos_ = end + kGemmaQuote.size();
    return true;
  }

  bool json_string(Json& out) {
    std::size_t i = pos_ + 1;
    while (i < s_.size() && s_[i] != '"') i += s_[i] == '\\' ? 2 : 1;
    if (i >= s_.size()) return false;
    Json parsed = Json::parse(s_.substr(pos_, i + 1 - pos_), nullptr, false);
    if (!parsed.is_string()) return false;
    out = std::move(parsed);
    pos_ = i + 1;
    return true;
  }

  bool number(Json& out) {
    const std::size_t start = pos_;
    bool integral = true;
    if (s_[pos_] == '-') ++pos_;
    if (!digits()) return false;
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_, integral = false;
      if (!digits()) return false;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_, integral = false;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (!digits()) return false;
    }
    const char* first = s_.data() + start;
    const char* last = s_.data() + pos_;
    if (integral) {
      int64_t i = 0;
      if (auto r = std::from_chars(first, last, i); r.ec == std::errc() && r.ptr == last) {
        out = i;
        return true;
      }
    }
    double d = 0;
    auto r = std::from_chars(first, last, d);
    if (r.ec != std::errc() || r.ptr != last) return false;
    out = d;
    return true;
  }

  bool digits() {
    const std::size_t start = pos_;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    return pos_ > start;
  }

  void skip_space() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool at(std::string_view word) const { return s_.substr(pos_).starts_with(word); }
  bool eat(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) return ++pos_, true;
    return false;
  }

  std::string_view s_;
  std::size_t pos_;
};

// A Gemma call whose opener ends at `pos`: "call:NAME{...}<tool_call|>".
// Returns the position after the closer.
std::optional<std::size_t> read_gemma_call(std::string_view text, std::size_t pos, ToolCall& call) {
  constexpr std::string_view kCall = "call:";
  if (!text.substr(pos).starts_with(kCall)) return std::nullopt;
  pos += kCall.size();
  const std::size_t name_start = pos;
  while (pos < text.size() && is_name_char(text[pos])) ++pos;
  if (pos == name_start) return std::nullopt;
  call.name = std::string(text.substr(name_start, pos - name_start));
  GemmaValueReader reader(text, pos);
  if (!reader.object(call.arguments, 0)) return std::nullopt;
  pos = reader.pos();
  while (pos < text.size() && std::isspace(static_cast<unsigned char>(text[pos]))) ++pos;
  if (!text.substr(pos).starts_with(kGemmaCallClose)) return std::nullopt;
  return pos + kGemmaCallClose.size();
}

bool json_call_fields(const Json& j, ToolCall& call) {
  if (!j.is_object()) return false;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) return false;
  call.name = name->get<std::string>();
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  if (args == j.end() || args->is_null()) {
    call.arguments = Json::object();
  } else if (args->is_object()) {
    call.arguments = *args;
  } else if (args->is_string()) {
    Json inner = Json::parse(args->get<std::string>(), nullptr, false);
    if (!inner.is_object()) return false;
    call.arguments = std::move(inner);
  } else {
    return false;
  }
  return true;
}

// A JSON call whose opener ends at `pos`: "{...}</tool_call>", or "{...}"
// running to the end of the text (a model may stop right after the object).
std::optional<std::size_t> read_json_call(std::string_view text, std::size_t pos, ToolCall& call) {
  const std::size_t close = text.find(kJsonCallClose, pos);
  const std::size_t end = close == std::string_view::npos ? text.size() : close;
  Json j = Json::parse(text.substr(pos, end - pos), nullptr, false);
  if (j.is_discarded() || !json_call_fields(j, call)) return std::nullopt;
  return close == std::string_view::npos ? text.size() : close + kJsonCallClose.size();
}

std::string upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// A JSON Schema in Gemma's declaration syntax: as format_gemma4_value, but
// type names upper-cased (STRING, OBJECT, ...) and nested schemas under
// "properties" and "items" formatted the same way.
std::string format_gemma4_schema(const Json& schema) {
  if (!schema.is_object()) return format_gemma4_value(schema);
  std::string out = "{";
  bool first = true;
  for (const auto& [key, v] : schema.items()) {
    if (v.is_null()) continue;
    if (!first) out += ',';
    first = false;
    out += key + ":";
    if (key == "type" && v.is_string()) {
      out += std::string(kGemmaQuote) + upper(v.get<std::string>()) + std::string(kGemmaQuote);
    } else if (key == "type" && v.is_array()) {
      Json types = Json::array();
      for (const Json& t : v) types.push_back(t.is_string() ? Json(upper(t.get<std::string>())) : t);
      out += format_gemma4_value(types);
    } else if (key == "properties" && v.is_object()) {
      out += '{';
      bool first_prop = true;
      for (const auto& [name, prop] : v.items()) {
        if (!first_prop) out += ',';
        first_prop = false;
        out += name + ":" + format_gemma4_schema(prop);
      }
      out += '}';
    } else if (key == "items") {
      out += format_gemma4_schema(v);
    } else {
      out += format_gemma4_value(v);
    }
  }
  return out + "}";
}

}  // namespace

std::string_view tool_call_opener(ToolSyntax syntax) {
  return syntax == ToolSyntax::kGemma4 ? kGemmaCallOpen : kJsonCallOpen;
}

ParsedReply parse_tool_calls(ToolSyntax syntax, std::string_view text) {
  const std::string_view opener = tool_call_opener(syntax);
  ParsedReply out;
  std::size_t pos = 0;
  while (true) {
    const std::size_t k = text.find(opener, pos);
    if (k == std::string_view::npos) {
      out.content += text.substr(pos);
      return out;
    }
    out.content += text.substr(pos, k - pos);
    ToolCall call;
    const std::size_t body = k + opener.size();
    const auto end = syntax == ToolSyntax::kGemma4 ? read_gemma_call(text, body, call) : read_json_call(text, body, call);
    if (end) {
      out.calls.push_back(std::move(call));
      pos = *end;
    } else {
      out.content += opener;  // not a call: the markup stays text
      pos = body;
    }
  }
}

std::string ToolCallStream::push(std::string_view text) {
  pending_ += text;
  if (holding_) return {};
  const std::string_view opener = tool_call_opener(syntax_);
  if (const std::size_t k = pending_.find(opener); k != std::string::npos) {
    std::string out = pending_.substr(0, k);
    pending_.erase(0, k);
    holding_ = true;
    return out;
  }
  // Keep back the longest tail that could still grow into the opener.
  std::size_t keep = std::min(opener.size() - 1, pending_.size());
  while (keep > 0 && !std::string_view(pending_).ends_with(opener.substr(0, keep))) --keep;
  std::string out = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

ParsedReply ToolCallStream::finish() {
  ParsedReply out = parse_tool_calls(syntax_, pending_);
  pending_.clear();
  holding_ = false;
  return out;
}

std::string format_gemma4_value(const Json& value) {
  switch (value.type()) {
    case Json::value_t::string:
      return std::string(kGemmaQuote) + value.get<std::string>() + std::string(kGemmaQuote);
    case Json::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (const auto& [key, v] : value.items()) {
        if (!first) out += ',';
        first = false;
        out += key + ":" + format_gemma4_value(v);
      }
      return out + "}";
    }
    case Json::value_t::array: {
      std::string out = "[";
      for (std::size_t i = 0; i < value.size(); ++i) out += (i ? "," : "") + format_gemma4_value(value[i]);
      return out + "]";
    }
    default:
      return json_text(value);  // numbers, true, false, null
  }
}

namespace {

// What precedes a call's arguments, as the parsers read it (read_gemma_call,
// read_json_call) and format_tool_call writes it.
std::string call_prefix(ToolSyntax syntax, const std::string& name) {
  return syntax == ToolSyntax::kGemma4 ? "call:" + name : "\n{\"name\": " + json_text(name) + ", \"arguments\": ";
}

constrain::Grammar::CallMarkup call_markup(ToolSyntax syntax) {
  if (syntax == ToolSyntax::kGemma4) return {constrain::Syntax::kGemma4, "", ""};
  return {constrain::Syntax::kJson, "}\n", std::string(kJsonCallClose)};
}

}  // namespace

std::string_view tool_call_closer(ToolSyntax syntax) {
  return syntax == ToolSyntax::kGemma4 ? kGemmaCallClose : kJsonCallClose;
}

std::shared_ptr<const constrain::ToolCallRules> strict_call_rules(ToolSyntax syntax, std::span<const ToolSpec> tools,
                                                                  std::vector<int32_t> forced, bool markup_is_tokens) {
  // Which tools are held: the strict ones, less those strict by default
  // whose calls cannot be (a schema outside the subset, markup that is no
  // single token).
  std::vector<bool> held(tools.size());
  for (std::size_t i = 0; i < tools.size(); ++i) {
    const ToolSpec& t = tools[i];
    held[i] = t.strict;
    if (!t.strict || !t.strict_by_default) continue;
    const constrain::Grammar::CallSchema one[] = {{call_prefix(syntax, t.name), &t.parameters, t.parameters_path}};
    try {
      (void)constrain::Grammar::for_tool_calls(one, call_markup(syntax));
    } catch (const constrain::UnsupportedSchema&) {
      held[i] = false;
    }
    held[i] = held[i] && markup_is_tokens;
  }
  const auto first = std::find(held.begin(), held.end(), true);
  if (first == held.end()) return nullptr;
  const ToolSpec& strict = tools[std::size_t(first - held.begin())];
  // The constraint wakes on the opening token: text that spells it in
  // pieces would open a call the constraint never sees.
  if (!markup_is_tokens)
    throw constrain::UnsupportedSchema(strict.strict_path, strict.strict_path + ": strict tool calls need " +
                                                               std::string(tool_call_opener(syntax)) + " and " +
                                                               std::string(tool_call_closer(syntax)) +
                                                               " to be tokens of the model's vocabulary");
  std::vector<constrain::Grammar::CallSchema> calls;
  for (std::size_t i = 0; i < tools.size(); ++i)
    calls.push_back({call_prefix(syntax, tools[i].name), held[i] ? &tools[i].parameters : nullptr,
                     tools[i].parameters_path});
  auto rules = std::make_shared<constrain::ToolCallRules>();
  rules->grammar = constrain::Grammar::for_tool_calls(calls, call_markup(syntax));
  rules->open = std::string(tool_call_opener(syntax));
  rules->close = std::string(tool_call_closer(syntax));
  rules->forced = std::move(forced);
  return rules;
}

std::string format_tool_call(ToolSyntax syntax, const ToolCall& call) {
  if (syntax == ToolSyntax::kGemma4)
    return std::string(kGemmaCallOpen) + "call:" + call.name + format_gemma4_value(call.arguments) +
           std::string(kGemmaCallClose);
  return std::string(kJsonCallOpen) + "\n{\"name\": " + json_text(call.name) +
         ", \"arguments\": " + json_text(call.arguments) + "}\n" + std::string(kJsonCallClose);
}

std::string format_tool_declarations(ToolSyntax syntax, std::span<const ToolSpec> tools) {
  std::string out;
  if (syntax == ToolSyntax::kGemma4) {
    for (const ToolSpec& t : tools) {
      out += "<|tool>declaration:" + t.name + "{description:" + std::string(kGemmaQuote) + t.description +
             std::string(kGemmaQuote);
      if (t.parameters.is_object() && !t.parameters.empty()) out += ",parameters:" + format_gemma4_schema(t.parameters);
      out += "}<tool|>";
    }
    return out;
  }
  out = "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
  for (const ToolSpec& t : tools) {
    nlohmann::ordered_json fn = {{"name", t.name}, {"description", t.description}, {"parameters", t.parameters}};
    out += "\n" + nlohmann::ordered_json{{"type", "function"}, {"function", fn}}.dump(
                      -1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  out += "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
         "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
         "<args-json-object>}\n</tool_call>";
  return out;
}

std::string format_tool_response(ToolSyntax syntax, const std::string& name, const std::string& content) {
  if (syntax == ToolSyntax::kGemma4)
    return "<|tool_response>response:" + name + "{value:" + std::string(kGemmaQuote) + content +
           std::string(kGemmaQuote) + "}<tool_response|>";
  return "<tool_response>\n" + content + "\n</tool_response>";
}

}  // namespace rowlm::server
