// OpenAI's Responses API request body.

#include "server/responses_request.h"

#include <cctype>
#include <limits>
#include <map>
#include <set>

#include "server/api_error.h"
#include "server/response_format.h"
#include "server/fields.h"
#include "server/sse.h"

namespace rowlm::server {

namespace {

using Role = ChatTurn::Role;
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// A message's content: a string, or text parts (input_text, output_text,
// refusal) joined by newlines, as chat completions' parts are.
std::string content_text(const Json& content, const std::string& path) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    throw_bad_field(path, "must be a string or an array of content parts, got " + json_type_name(content));
  std::string out;
  for (std::size_t i = 0; i < content.size(); ++i) {
    Fields part(content[i], index_path(path, i));
    const std::string type = part.required_string("type");
    if (i) out += "\n";
    if (type == "input_text" || type == "output_text" || type == "text") out += part.required_string("text");
    else if (type == "refusal") out += part.required_string("refusal");
    else throw_bad_field(part.path("type"), "content parts of type '" + type + "' are not supported (this server takes text only)");
  }
  return out;
}

bool valid_function_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

// The input items, appended to `turns`. `call_names` maps the call ids of
// earlier function calls (the history's, then the input's own) to names.
void parse_input(const Json& input, std::map<std::string, std::string>& call_names, std::vector<ChatTurn>& turns) {
  if (input.is_string()) {
    turns.push_back({Role::kUser, input.get<std::string>(), {}, {}});
    return;
  }
  if (!input.is_array()) throw_bad_field("input", "must be a string or an array of input items, got " + json_type_name(input));
  if (input.empty()) throw_bad_field("input", "must not be empty");
  for (std::size_t i = 0; i < input.size(); ++i) {
    const std::string path = index_path("input", i);
    Fields item(input[i], path);
    const std::string type = item.string("type").value_or("message");
    if (type == "message") {
      const std::string role = item.required_string("role");
      const Json* content = item.find("content");
      if (!content) throw_bad_field(item.path("content"), "is required");
      ChatTurn turn;
      if (role == "user") turn.role = Role::kUser;
      else if (role == "assistant") turn.role = Role::kAssistant;
      else if (role == "system" || role == "developer") turn.role = Role::kSystem;
      else throw_bad_field(item.path("role"), "must be one of user, assistant, system, developer; got '" + role + "'");
      turn.text = content_text(*content, item.path("content"));
      turns.push_back(std::move(turn));
    } else if (type == "function_call") {
      ToolCall call;
      call.id = item.required_string("call_id");
      call.name = item.required_string("name");
      const std::string args = item.required_string("arguments");
      Json parsed = Json::parse(args, nullptr, false);
      if (!parsed.is_object()) throw_bad_field(item.path("arguments"), "must be a JSON object encoded as a string");
      check_depth(parsed, item.path("arguments"));
      call.arguments = std::move(parsed);
      call_names[call.id] = call.name;
      // Calls that follow an assistant message (or each other) belong to it.
      if (turns.empty() || turns.back().role != Role::kAssistant) turns.push_back({Role::kAssistant, "", {}, {}});
      turns.back().tool_calls.push_back(std::move(call));
    } else if (type == "function_call_output") {
      const std::string id = item.required_string("call_id");
      const auto it = call_names.find(id);
      if (it == call_names.end())
        throw_bad_field(item.path("call_id"), "'" + id + "' matches no function_call before it (in input or the previous response)");
      const Json* output = item.find("output");
      if (!output) throw_bad_field(item.path("output"), "is required");
      turns.push_back({Role::kTool, content_text(*output, item.path("output")), {}, it->second});
    } else if (type == "reasoning") {
      // Earlier reasoning: the chat formats drop it from the prompt.
    } else {
      throw_bad_field(item.path("type"), "input items of type '" + type +
                                             "' are not supported (message, function_call, function_call_output, reasoning)");
    }
  }
}

void parse_tools(const Fields& f, GenerationRequest& r) {
  if (const Json* tools = f.array("tools")) {
    std::set<std::string> names;
    for (std::size_t i = 0; i < tools->size(); ++i) {
      Fields t((*tools)[i], index_path("tools", i));
      const std::string type = t.required_string("type");
      if (type != "function")
        throw_bad_field(t.path("type"), "tools of type '" + type + "' are not supported; declare function tools");
      ToolSpec spec;
      spec.name = t.required_string("name");
      if (!valid_function_name(spec.name))
        throw_bad_field(t.path("name"), "must be 1 to 64 characters of a-z, A-Z, 0-9, '_' and '-'");
      if (!names.insert(spec.name).second) throw_bad_field(t.path("name"), "'" + spec.name + "' is declared twice");
      spec.description = t.string("description").value_or("");
      if (const Json* params = t.object("parameters")) spec.parameters = *params;
      const std::optional<bool> strict = t.boolean("strict");
      spec.strict = strict.value_or(true);  // OpenAI's default for Responses
      spec.strict_by_default = !strict.has_value();
      spec.parameters_path = t.path("parameters");
      spec.strict_path = t.path("strict");
      r.tools.push_back(std::move(spec));
    }
  }
  const Json* choice = f.find("tool_choice");
  if (!choice) return;
  if (choice->is_string()) {
    const std::string c = choice->get<std::string>();
    if (c == "none") r.tool_choice.mode = ToolChoice::Mode::kNone;
    else if (c == "auto") r.tool_choice.mode = ToolChoice::Mode::kAuto;
    else if (c == "required") r.tool_choice.mode = ToolChoice::Mode::kRequired;
    else throw_bad_field("tool_choice", "must be 'none', 'auto', 'required' or a function, got '" + c + "'");
  } else {
    Fields c(*choice, "tool_choice");
    const std::string type = c.required_string("type");
    if (type != "function") throw_bad_field(c.path("type"), "must be 'function', got '" + type + "'");
    r.tool_choice.mode = ToolChoice::Mode::kNamed;
    r.tool_choice.name = c.required_string("name");
    bool declared = false;
    for (const ToolSpec& t : r.tools) declared = declared || t.name == r.tool_choice.name;
    if (!declared) throw_bad_field(c.path("name"), "'" + r.tool_choice.name + "' is not in tools");
  }
  if (r.tools.empty() && r.tool_choice.mode != ToolChoice::Mode::kNone) throw_bad_field("tool_choice", "needs tools");
}

}  // namespace

std::optional<std::string> previous_response_id_of(const Json& body) {
  if (!body.is_object()) return std::nullopt;  // the parser names the problem
  return Fields(body, "").string("previous_response_id");
}

ResponsesRequest parse_responses_request(const Json& body, int64_t vocab_size, std::span<const ChatTurn> history) {
  Fields f(body, "");
  check_depth(body, "");
  ResponsesRequest out;
  GenerationRequest& r = out.generation;
  r.chat = true;
  parse_openai_common(f, vocab_size, r);
  if (r.n != 1) throw_bad_field("n", "must be 1: a response has one output");
  if (auto v = f.integer("max_output_tokens", 1, kInt32Max)) r.sampling.max_tokens = int32_t(*v);
  out.previous_response_id = f.string("previous_response_id");
  out.store = f.boolean("store").value_or(true);
  if (f.boolean("background").value_or(false)) f.unsupported("background", "responses run in the foreground");
  if (f.has("conversation")) f.unsupported("conversation", "continue a conversation with previous_response_id");
  if (f.has("prompt")) f.unsupported("prompt", "no stored prompt templates");
  if (auto top = f.integer("top_logprobs", 0, 20); top && *top > 0) f.unsupported("top_logprobs", "no log-probabilities here yet");
  if (auto truncation = f.string("truncation"); truncation && *truncation != "disabled" && *truncation != "auto")
    throw_bad_field("truncation", "must be 'disabled' or 'auto', got '" + *truncation + "'");
  if (const Json* include = f.array("include"))
    for (std::size_t i = 0; i < include->size(); ++i)
      if (!(*include)[i].is_string()) throw_bad_field(index_path("include", i), "must be a string");
  f.object("metadata");
  f.string("user");
  f.boolean("parallel_tool_calls");  // type-checked; calls are not limited
  f.integer("max_tool_calls", 1, kInt32Max);
  if (const Json* reasoning = f.object("reasoning")) {
    Fields rf(*reasoning, "reasoning");
    parse_reasoning_effort(rf, "effort", r);
    if (auto summary = rf.string("summary"); summary && *summary != "auto" && *summary != "concise" && *summary != "detailed")
      throw_bad_field("reasoning.summary", "must be 'auto', 'concise' or 'detailed', got '" + *summary + "'");
  }
  if (const Json* text = f.object("text")) {
    Fields tf(*text, "text");
    if (const Json* format = tf.object("format")) r.response_format = parse_response_format(*format, "text.format");
    tf.string("verbosity");
  }
  parse_tools(f, r);
  if (r.response_format && !r.tools.empty() && r.tool_choice.mode != ToolChoice::Mode::kNone)
    f.unsupported("text.format", "together with tools (a reply held to a schema cannot call a tool); "
                                 "set tool_choice to 'none' or leave the tools out");

  std::map<std::string, std::string> call_names;
  for (const ChatTurn& t : history)
    for (const ToolCall& c : t.tool_calls) call_names[c.id] = c.name;
  const Json* input = f.find("input");
  if (!input) throw_bad_field("input", "is required");
  parse_input(*input, call_names, out.input);
  if (auto instructions = f.string("instructions")) r.turns.push_back({Role::kSystem, *instructions, {}, {}});
  r.turns.insert(r.turns.end(), history.begin(), history.end());
  r.turns.insert(r.turns.end(), out.input.begin(), out.input.end());

  Json& e = out.echo;
  const auto echo = [&](const char* name, Json fallback) {
    const Json* v = f.find(name);
    e[name] = v ? *v : std::move(fallback);
  };
  echo("instructions", nullptr);
  echo("max_output_tokens", nullptr);
  echo("temperature", 1.0);
  echo("top_p", 1.0);
  echo("tools", Json::array());
  echo("tool_choice", "auto");
  echo("parallel_tool_calls", true);
  echo("metadata", Json::object());
  echo("previous_response_id", nullptr);
  echo("truncation", "disabled");
  echo("user", nullptr);
  echo("text", {{"format", {{"type", "text"}}}});
  const Json* reasoning = f.find("reasoning");
  e["reasoning"] = {{"effort", reasoning && reasoning->contains("effort") ? (*reasoning)["effort"] : Json(nullptr)},
                    {"summary", reasoning && reasoning->contains("summary") ? (*reasoning)["summary"] : Json(nullptr)}};
  e["store"] = out.store;
  return out;
}

}  // namespace rowlm::server
