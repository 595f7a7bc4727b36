// OpenAI's chat completions and completions request bodies.

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "server/api_error.h"
#include "server/api_request.h"
#include "server/fields.h"
#include "server/response_format.h"

namespace rowlm::server {

namespace {

using Role = ChatTurn::Role;
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

int32_t token_id(const Json& v, const std::string& path, int64_t vocab_size) {
  if (!v.is_number_integer()) throw_bad_field(path, "must be a token id (an integer), got " + json_type_name(v));
  const int64_t id = v.is_number_unsigned() ? int64_t(std::min<uint64_t>(v.get<uint64_t>(), uint64_t(kInt64Max)))
                                            : v.get<int64_t>();
  if (id < 0 || id >= vocab_size)
    throw_bad_field(path, "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                              std::to_string(vocab_size) + ")");
  return int32_t(id);
}

std::vector<std::string> stop_strings(const Fields& f, const char* name, std::size_t max_count) {
  std::vector<std::string> out;
  const Json* v = f.find(name);
  if (!v) return out;
  const std::string path = f.path(name);
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->size() > max_count)
      throw_bad_field(path, "has " + std::to_string(v->size()) + " entries, at most " + std::to_string(max_count));
    for (std::size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string())
        throw_bad_field(index_path(path, i), "must be a string, got " + json_type_name((*v)[i]));
      out.push_back((*v)[i].get<std::string>());
    }
  } else {
    throw_bad_field(path, "must be a string or an array of strings, got " + json_type_name(*v));
  }
  for (std::size_t i = 0; i < out.size(); ++i)
    if (out[i].empty()) throw_bad_field(v->is_array() ? index_path(path, i) : path, "must not be empty");
  return out;
}

// Fields shared by chat completions and completions.
void parse_common(const Fields& f, int64_t vocab_size, GenerationRequest& r) {
  r.model = f.string("model");
  auto& s = r.sampling;
  if (auto v = f.number("temperature", 0, 2)) s.temperature = float(*v);
  if (auto v = f.number("top_p", 0, 1)) {
    if (*v <= 0) throw_bad_field("top_p", "must be greater than 0 (use temperature 0 for greedy decoding)");
    s.top_p = float(*v);
  }
  if (auto v = f.integer("top_k", -1, kInt32Max)) s.top_k = int32_t(*v);
  if (auto v = f.number("min_p", 0, 1)) s.min_p = float(*v);
  if (auto v = f.number("repetition_penalty", 0, std::numeric_limits<double>::max())) {
    if (*v <= 0) throw_bad_field("repetition_penalty", "must be greater than 0");
    s.repetition_penalty = float(*v);
  }
  if (auto v = f.number("presence_penalty", -2, 2)) s.presence_penalty = float(*v);
  if (auto v = f.number("frequency_penalty", -2, 2)) s.frequency_penalty = float(*v);
  if (auto v = f.integer("seed", kInt64Min, kInt64Max)) s.seed = uint64_t(*v);
  if (const Json* bias = f.object("logit_bias")) {
    for (const auto& [key, value] : bias->items()) {
      const std::string path = "logit_bias." + key;
      const bool digits = !key.empty() && key.size() <= 10 &&
                          std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (!digits) throw_bad_field(path, "keys must be token ids");
      const int64_t id = std::stoll(key);
      token_id(Json(id), path, vocab_size);
      if (!value.is_number() || !std::isfinite(value.get<double>()) || std::fabs(value.get<double>()) > 100)
        throw_bad_field(path, "must be a number in [-100, 100], got " +
                                  (value.is_number() ? describe_value(value) : json_type_name(value)));
      s.logit_bias[int32_t(id)] = float(value.get<double>());
    }
  }
  s.stop = stop_strings(f, "stop", kMaxStopStrings);
  if (const Json* ids = f.array("stop_token_ids"))
    for (std::size_t i = 0; i < ids->size(); ++i)
      s.stop_token_ids.push_back(token_id((*ids)[i], index_path("stop_token_ids", i), vocab_size));
  if (auto v = f.integer("n", 1, kMaxChoices)) r.n = int(*v);
  if (auto v = f.boolean("ignore_eos")) r.ignore_eos = *v;
  r.stream = f.boolean("stream").value_or(false);
  if (const Json* so = f.object("stream_options")) {
    if (!r.stream) throw_bad_field("stream_options", "is only allowed when stream is true");
    r.include_usage = Fields(*so, "stream_options").boolean("include_usage").value_or(false);
  }
  if (f.has("best_of")) {
    const int64_t best_of = *f.integer("best_of", 1, kMaxChoices);
    if (best_of != r.n) f.unsupported("best_of", "only best_of equal to n (no ranking of extra samples)");
  }
}

}  // namespace

void parse_openai_common(const Fields& f, int64_t vocab_size, GenerationRequest& r) { parse_common(f, vocab_size, r); }

void parse_reasoning_effort(const Fields& f, const char* name, GenerationRequest& r) {
  const auto effort = f.string(name);
  if (!effort) return;
  // rowlm's chat formats have one thinking mode: any effort but none turns it on.
  static const std::set<std::string> kEfforts = {"none", "minimal", "low", "medium", "high", "xhigh"};
  if (!kEfforts.contains(*effort))
    throw_bad_field(f.path(name), "must be one of none, minimal, low, medium, high, xhigh; got '" + *effort + "'");
  r.thinking = *effort != "none";
  r.thinking_field = f.path(name);
}

namespace {

void check_max_tokens(const Fields& f, const char* name, GenerationRequest& r) {
  if (auto v = f.integer(name, 1, kInt32Max)) r.sampling.max_tokens = int32_t(*v);
}

// Text of message content: a string, or an array of text parts (joined by
// newlines, as vLLM does).
std::string content_text(const Json& content, const std::string& path) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) throw_bad_field(path, "must be a string or an array of content parts, got " +
                                                     json_type_name(content));
  std::string out;
  for (std::size_t i = 0; i < content.size(); ++i) {
    const std::string part_path = index_path(path, i);
    Fields part(content[i], part_path);
    const std::string type = part.required_string("type");
    if (type == "text") {
      if (i) out += "\n";
      out += part.required_string("text");
    } else if (type == "refusal") {
      if (i) out += "\n";
      out += part.required_string("refusal");
    } else {
      throw_bad_field(part.path("type"), "content parts of type '" + type +
                                             "' are not supported (this server takes text only)");
    }
  }
  return out;
}

ToolCall parse_openai_tool_call(const Json& j, const std::string& path) {
  Fields f(j, path);
  ToolCall call;
  call.id = f.required_string("id");
  if (auto type = f.string("type"); type && *type != "function")
    throw_bad_field(f.path("type"), "must be 'function', got '" + *type + "'");
  const Json* fn = f.object("function");
  if (!fn) throw_bad_field(f.path("function"), "is required");
  Fields ff(*fn, f.path("function"));
  call.name = ff.required_string("name");
  const std::string args = ff.string("arguments").value_or("{}");
  Json parsed = Json::parse(args, nullptr, false);
  if (!parsed.is_object()) throw_bad_field(ff.path("arguments"), "must be a JSON object encoded as a string");
  check_depth(parsed, ff.path("arguments"));
  call.arguments = std::move(parsed);
  return call;
}

void parse_messages(const Fields& f, GenerationRequest& r) {
  const Json* messages = f.array("messages");
  if (!messages) throw_bad_field("messages", "is required");
  if (messages->empty()) throw_bad_field("messages", "must not be empty");
  std::map<std::string, std::string> call_names;  // tool call id -> function name
  for (std::size_t i = 0; i < messages->size(); ++i) {
    const std::string path = index_path("messages", i);
    Fields m((*messages)[i], path);
    const std::string role = m.required_string("role");
    ChatTurn turn;
    const Json* content = m.find("content");
    if (role == "system" || role == "developer" || role == "user") {
      turn.role = role == "user" ? Role::kUser : Role::kSystem;
      if (!content) throw_bad_field(m.path("content"), "is required");
      turn.text = content_text(*content, m.path("content"));
    } else if (role == "assistant") {
      turn.role = Role::kAssistant;
      if (content) turn.text = content_text(*content, m.path("content"));
      if (const Json* calls = m.array("tool_calls")) {
        for (std::size_t j = 0; j < calls->size(); ++j) {
          turn.tool_calls.push_back(parse_openai_tool_call((*calls)[j], index_path(m.path("tool_calls"), j)));
          call_names[turn.tool_calls.back().id] = turn.tool_calls.back().name;
        }
      }
      if (m.has("function_call")) m.unsupported("function_call", "use tool_calls");
      if (!content && turn.tool_calls.empty())
        throw_bad_field(m.path("content"), "is required unless the message has tool_calls");
    } else if (role == "tool") {
      turn.role = Role::kTool;
      const std::string id = m.required_string("tool_call_id");
      auto it = call_names.find(id);
      if (it == call_names.end())
        throw_bad_field(m.path("tool_call_id"), "'" + id + "' matches no tool call of an earlier assistant message");
      turn.tool_name = it->second;
      if (!content) throw_bad_field(m.path("content"), "is required");
      turn.text = content_text(*content, m.path("content"));
    } else {
      throw_bad_field(m.path("role"), "must be one of system, developer, user, assistant, tool; got '" + role + "'");
    }
    r.turns.push_back(std::move(turn));
  }
}

bool valid_function_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

void parse_tools(const Fields& f, GenerationRequest& r) {
  if (const Json* tools = f.array("tools")) {
    std::set<std::string> names;
    for (std::size_t i = 0; i < tools->size(); ++i) {
      const std::string path = index_path("tools", i);
      Fields t((*tools)[i], path);
      const std::string type = t.required_string("type");
      if (type != "function") throw_bad_field(t.path("type"), "must be 'function', got '" + type + "'");
      const Json* fn = t.object("function");
      if (!fn) throw_bad_field(t.path("function"), "is required");
      Fields ff(*fn, t.path("function"));
      ToolSpec spec;
      spec.name = ff.required_string("name");
      if (!valid_function_name(spec.name))
        throw_bad_field(ff.path("name"), "must be 1 to 64 characters of a-z, A-Z, 0-9, '_' and '-'");
      if (!names.insert(spec.name).second) throw_bad_field(ff.path("name"), "'" + spec.name + "' is declared twice");
      spec.description = ff.string("description").value_or("");
      if (const Json* params = ff.object("parameters")) spec.parameters = *params;
      spec.strict = ff.boolean("strict").value_or(false);
      spec.parameters_path = ff.path("parameters");
      spec.strict_path = ff.path("strict");
      r.tools.push_back(std::move(spec));
    }
  }
  const Json* choice = f.find("tool_choice");
  if (!choice) {
    r.tool_choice.mode = ToolChoice::Mode::kAuto;
    return;
  }
  if (choice->is_string()) {
    const std::string c = choice->get<std::string>();
    if (c == "none") r.tool_choice.mode = ToolChoice::Mode::kNone;
    else if (c == "auto") r.tool_choice.mode = ToolChoice::Mode::kAuto;
    else if (c == "required") r.tool_choice.mode = ToolChoice::Mode::kRequired;
    else throw_bad_field("tool_choice", "must be 'none', 'auto', 'required' or a named function, got '" + c + "'");
  } else {
    Fields c(*choice, "tool_choice");
    const std::string type = c.required_string("type");
    if (type != "function") throw_bad_field(c.path("type"), "must be 'function', got '" + type + "'");
    const Json* fn = c.object("function");
    if (!fn) throw_bad_field(c.path("function"), "is required");
    r.tool_choice.mode = ToolChoice::Mode::kNamed;
    r.tool_choice.name = Fields(*fn, c.path("function")).required_string("name");
    bool declared = false;
    for (const ToolSpec& t : r.tools) declared = declared || t.name == r.tool_choice.name;
    if (!declared) throw_bad_field("tool_choice.function.name", "'" + r.tool_choice.name + "' is not in tools");
  }
  if (r.tools.empty() && r.tool_choice.mode != ToolChoice::Mode::kNone)
    throw_bad_field("tool_choice", "needs tools");
}

}  // namespace

GenerationRequest parse_chat_completion_request(const Json& body, int64_t vocab_size) {
  Fields f(body, "");
  check_depth(body, "");
  GenerationRequest r;
  r.chat = true;
  parse_common(f, vocab_size, r);
  check_max_tokens(f, "max_tokens", r);
  check_max_tokens(f, "max_completion_tokens", r);  // the newer name wins
  parse_messages(f, r);
  parse_tools(f, r);
  if (f.has("functions") || f.has("function_call"))
    f.unsupported(f.has("functions") ? "functions" : "function_call", "use tools and tool_choice");
  const bool logprobs = f.boolean("logprobs").value_or(false);
  const auto top = f.integer("top_logprobs", 0, sampling::kMaxTopLogprobs);
  if (top && !logprobs) throw_bad_field("top_logprobs", "needs logprobs set to true");
  if (logprobs) r.sampling.logprobs = int32_t(top.value_or(0));
  parse_reasoning_effort(f, "reasoning_effort", r);
  if (const Json* kwargs = f.object("chat_template_kwargs")) {
    // vLLM's switch for templates' variables; enable_thinking is the one
    // rowlm's chat formats know (others are ignored, as unknown fields are).
    if (auto on = Fields(*kwargs, "chat_template_kwargs").boolean("enable_thinking")) {
      r.thinking = *on;
      r.thinking_field = "chat_template_kwargs.enable_thinking";
    }
  }
  if (const Json* format = f.object("response_format")) {
    r.response_format = parse_response_format(*format, "response_format");
    if (r.response_format && !r.tools.empty() && r.tool_choice.mode != ToolChoice::Mode::kNone)
      f.unsupported("response_format", "together with tools (a reply held to a schema cannot call a tool); "
                                       "set tool_choice to 'none' or leave out the tools");
  }
  if (const Json* modalities = f.array("modalities"))
    for (const Json& m : *modalities)
      if (m != "text") f.unsupported("modalities", "only text output");
  if (f.has("audio")) f.unsupported("audio", "no audio output");
  return r;
}

GenerationRequest parse_completion_request(const Json& body, int64_t vocab_size) {
  Fields f(body, "");
  check_depth(body, "");
  GenerationRequest r;
  r.chat = false;
  r.sampling.max_tokens = 16;  // OpenAI's default for completions
  parse_common(f, vocab_size, r);
  check_max_tokens(f, "max_tokens", r);
  const Json* prompt = f.find("prompt");
  if (!prompt) throw_bad_field("prompt", "is required");
  auto ids_of = [&](const Json& arr, const std::string& path) {
    PromptInput p;
    if (arr.empty()) throw_bad_field(path, "must not be empty");
    for (std::size_t i = 0; i < arr.size(); ++i) p.ids.push_back(token_id(arr[i], index_path(path, i), vocab_size));
    return p;
  };
  if (prompt->is_string()) {
    r.prompts.push_back({prompt->get<std::string>(), {}});
  } else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number()) {
    r.prompts.push_back(ids_of(*prompt, "prompt"));
  } else if (prompt->is_array() && !prompt->empty()) {
    for (std::size_t i = 0; i < prompt->size(); ++i) {
      const Json& p = (*prompt)[i];
      if (p.is_string()) r.prompts.push_back({p.get<std::string>(), {}});
      else if (p.is_array()) r.prompts.push_back(ids_of(p, index_path("prompt", i)));
      else throw_bad_field(index_path("prompt", i), "must be a string or an array of token ids, got " + json_type_name(p));
    }
  } else {
    throw_bad_field("prompt", prompt->is_array() ? "must not be empty"
                                                 : "must be a string, an array of strings, or token ids; got " +
                                                       json_type_name(*prompt));
  }
  if (r.prompts.size() * std::size_t(r.n) > std::size_t(kMaxChoices))
    throw_bad_field("n", "prompts times n is " + std::to_string(r.prompts.size() * std::size_t(r.n)) +
                             ", at most " + std::to_string(kMaxChoices));
  if (auto v = f.integer("logprobs", 0, sampling::kMaxTopLogprobs)) r.sampling.logprobs = int32_t(*v);
  r.echo = f.boolean("echo").value_or(false);
  if (r.echo && r.sampling.logprobs) f.unsupported("echo", "together with logprobs (no prompt log-probabilities)");
  if (auto suffix = f.string("suffix"); suffix && !suffix->empty()) f.unsupported("suffix", "no fill-in-the-middle");
  return r;
}

}  // namespace rowlm::server
