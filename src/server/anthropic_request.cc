// Anthropic's messages request body.

#include <cctype>
#include <limits>
#include <map>
#include <set>

#include "server/api_error.h"
#include "server/api_request.h"
#include "server/fields.h"

namespace rowlm::server {

namespace {

using Role = ChatTurn::Role;
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// The text of a content block list's text blocks (or a plain string).
std::string text_of(const Json& content, const std::string& path) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    throw_bad_field(path, "must be a string or an array of content blocks, got " + json_type_name(content));
  std::string out;
  for (std::size_t i = 0; i < content.size(); ++i) {
    Fields block(content[i], index_path(path, i));
    const std::string type = block.required_string("type");
    if (type != "text")
      throw_bad_field(block.path("type"), "must be 'text' here, got '" + type + "'");
    out += block.required_string("text");
  }
  return out;
}

void parse_message(const Fields& m, std::map<std::string, std::string>& tool_names,
                   std::vector<ChatTurn>& turns) {
  const std::string role = m.required_string("role");
  if (role != "user" && role != "assistant")
    throw_bad_field(m.path("role"), "must be 'user' or 'assistant', got '" + role + "'");
  const Json* content = m.find("content");
  if (!content) throw_bad_field(m.path("content"), "is required");
  if (content->is_string()) {
    turns.push_back({role == "user" ? Role::kUser : Role::kAssistant, content->get<std::string>(), {}, {}});
    return;
  }
  if (!content->is_array())
    throw_bad_field(m.path("content"), "must be a string or an array of content blocks, got " +
                                           json_type_name(*content));
  ChatTurn turn;
  turn.role = role == "user" ? Role::kUser : Role::kAssistant;
  bool has_text = false;
  for (std::size_t i = 0; i < content->size(); ++i) {
    const std::string block_path = index_path(m.path("content"), i);
    Fields block((*content)[i], block_path);
    const std::string type = block.required_string("type");
    if (type == "text") {
      turn.text += block.required_string("text");
      has_text = true;
    } else if (type == "tool_use" && role == "assistant") {
      ToolCall call;
      call.id = block.required_string("id");
      call.name = block.required_string("name");
      const Json* input = block.object("input");
      call.arguments = input ? *input : Json::object();
      tool_names[call.id] = call.name;
      turn.tool_calls.push_back(std::move(call));
    } else if (type == "tool_result" && role == "user") {
      const std::string id = block.required_string("tool_use_id");
      auto it = tool_names.find(id);
      if (it == tool_names.end())
        throw_bad_field(block.path("tool_use_id"), "'" + id + "' matches no tool_use block of an earlier message");
      ChatTurn result;
      result.role = Role::kTool;
      result.tool_name = it->second;
      if (const Json* c = block.find("content")) result.text = text_of(*c, block.path("content"));
      if (block.boolean("is_error").value_or(false)) result.text = "Error: " + result.text;
      turns.push_back(std::move(result));
    } else if (type == "thinking" || type == "redacted_thinking") {
      // Earlier thinking carries nothing this server's prompts use.
    } else {
      throw_bad_field(block.path("type"), "content blocks of type '" + type + "' are not supported in a " + role +
                                              " message (this server takes text and tools)");
    }
  }
  if (has_text || !turn.tool_calls.empty()) turns.push_back(std::move(turn));
}

void parse_tools(const Fields& f, GenerationRequest& r) {
  if (const Json* tools = f.array("tools")) {
    std::set<std::string> names;
    for (std::size_t i = 0; i < tools->size(); ++i) {
      Fields t((*tools)[i], index_path("tools", i));
      if (auto type = t.string("type"); type && *type != "custom")
        throw_bad_field(t.path("type"), "server tools ('" + *type + "') are not supported; declare custom tools");
      ToolSpec spec;
      spec.name = t.required_string("name");
      bool ok = !spec.name.empty() && spec.name.size() <= 128;
      for (char c : spec.name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-');
      if (!ok) throw_bad_field(t.path("name"), "must be 1 to 128 characters of a-z, A-Z, 0-9, '_' and '-'");
      if (!names.insert(spec.name).second) throw_bad_field(t.path("name"), "'" + spec.name + "' is declared twice");
      spec.description = t.string("description").value_or("");
      const Json* schema = t.object("input_schema");
      if (!schema) throw_bad_field(t.path("input_schema"), "is required");
      spec.parameters = *schema;
      spec.strict = t.boolean("strict").value_or(false);
      spec.parameters_path = t.path("input_schema");
      spec.strict_path = t.path("strict");
      r.tools.push_back(std::move(spec));
    }
  }
  if (const Json* choice = f.object("tool_choice")) {
    Fields c(*choice, "tool_choice");
    const std::string type = c.required_string("type");
    if (type == "auto") r.tool_choice.mode = ToolChoice::Mode::kAuto;
    else if (type == "any") r.tool_choice.mode = ToolChoice::Mode::kRequired;
    else if (type == "none") r.tool_choice.mode = ToolChoice::Mode::kNone;
    else if (type == "tool") {
      r.tool_choice.mode = ToolChoice::Mode::kNamed;
      r.tool_choice.name = c.required_string("name");
      bool declared = false;
      for (const ToolSpec& t : r.tools) declared = declared || t.name == r.tool_choice.name;
      if (!declared) throw_bad_field(c.path("name"), "'" + r.tool_choice.name + "' is not in tools");
    } else {
      throw_bad_field(c.path("type"), "must be 'auto', 'any', 'tool' or 'none', got '" + type + "'");
    }
    c.boolean("disable_parallel_tool_use");  // type-checked; calls are not limited
    if (r.tools.empty() && r.tool_choice.mode != ToolChoice::Mode::kNone)
      throw_bad_field("tool_choice", "needs tools");
  }
}

}  // namespace

GenerationRequest parse_messages_request(const Json& body, int64_t /*vocab_size: no token ids in this schema*/) {
  Fields f(body, "");
  GenerationRequest r;
  r.chat = true;
  r.model = f.string("model");
  check_depth(body, "");
  auto max_tokens = f.integer("max_tokens", 1, kInt32Max);
  if (!max_tokens) throw_bad_field("max_tokens", "is required");
  r.sampling.max_tokens = int32_t(*max_tokens);
  if (auto v = f.number("temperature", 0, 1)) r.sampling.temperature = float(*v);
  if (auto v = f.number("top_p", 0, 1)) {
    if (*v <= 0) throw_bad_field("top_p", "must be greater than 0");
    r.sampling.top_p = float(*v);
  }
  if (auto v = f.integer("top_k", 0, kInt32Max)) r.sampling.top_k = int32_t(*v);
  if (const Json* stops = f.array("stop_sequences")) {
    if (stops->size() > kMaxStopStrings)
      throw_bad_field("stop_sequences", "has " + std::to_string(stops->size()) + " entries, at most " +
                                            std::to_string(kMaxStopStrings));
    for (std::size_t i = 0; i < stops->size(); ++i) {
      const std::string path = index_path("stop_sequences", i);
      if (!(*stops)[i].is_string()) throw_bad_field(path, "must be a string, got " + json_type_name((*stops)[i]));
      if ((*stops)[i].get<std::string>().empty()) throw_bad_field(path, "must not be empty");
      r.sampling.stop.push_back((*stops)[i].get<std::string>());
    }
  }
  r.stream = f.boolean("stream").value_or(false);
  f.object("metadata");  // type-checked, otherwise unused
  if (const Json* thinking = f.object("thinking")) {
    Fields t(*thinking, "thinking");
    const std::string type = t.required_string("type");
    r.thinking_field = "thinking";
    if (type == "enabled") {
      // As Anthropic's API: the budget is required and below max_tokens.
      const auto budget = t.integer("budget_tokens", 1, kInt32Max);
      if (!budget) throw_bad_field("thinking.budget_tokens", "is required when thinking is enabled");
      if (*budget >= *max_tokens)
        throw_bad_field("thinking.budget_tokens", "must be less than max_tokens (" + std::to_string(*max_tokens) + ")");
      r.thinking = true;
      r.thinking_budget = int32_t(*budget);
    } else if (type == "disabled") {
      r.thinking = false;
    } else {
      throw_bad_field("thinking.type", "must be 'enabled' or 'disabled', got '" + type + "'");
    }
  }
  if (const Json* system = f.find("system")) {
    const std::string text = text_of(*system, "system");
    r.turns.push_back({Role::kSystem, text, {}, {}});
  }
  const Json* messages = f.array("messages");
  if (!messages) throw_bad_field("messages", "is required");
  if (messages->empty()) throw_bad_field("messages", "must not be empty");
  std::map<std::string, std::string> tool_names;
  for (std::size_t i = 0; i < messages->size(); ++i) {
    parse_message(Fields((*messages)[i], index_path("messages", i)), tool_names, r.turns);
  }
  parse_tools(f, r);
  return r;
}

}  // namespace rowlm::server
