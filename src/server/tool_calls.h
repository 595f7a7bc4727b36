#pragma once
// Tool calls in a model's native markup, both ways: parsing the calls out of
// generated text (into name + JSON arguments) and writing tool declarations,
// earlier calls and tool results into a prompt.
//
//   kGemma4    <|tool_call>call:NAME{key:value,...}<tool_call|>, values in
//              Gemma's argument syntax: strings quoted by <|"|> (no escapes),
//              bare keys, {k:v} objects, [v] arrays, JSON numbers, true,
//              false, null. Declarations are <|tool>declaration:NAME{...}<tool|>
//              in the system turn; results <|tool_response>response:NAME{...}
//              <tool_response|>, inside the model turn that made the call.
//   kJsonTags  <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>
//              (ChatML models such as Qwen, Hermes-style), declarations as
//              JSON lines in <tools></tools> in the system message, results in
//              <tool_response></tool_response> in a user turn.
//
// The prompt side follows the shape of those models' Hugging Face templates;
// it has not been compared byte for byte with them (rowlm's chat formats
// render plain conversations only).

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "constrain/json_constraint.h"

namespace rowlm::server {

enum class ToolSyntax { kGemma4, kJsonTags };

struct ToolSpec {
  std::string name;
  std::string description;
  nlohmann::json parameters = nlohmann::json::object();  // a JSON Schema object
  // Calls are held to `parameters` (OpenAI's and Anthropic's strict).
  bool strict = false;
  // How errors name the request's fields ("tools[0].function.parameters",
  // "tools[0].function.strict").
  std::string parameters_path, strict_path;
  // Strict because the API says so when the request does not (Responses):
  // held where rowlm can (a schema in the subset, Gemma 4's markup), else not.
  bool strict_by_default = false;
};

struct ToolCall {
  std::string id;                                         // assigned by the API layer
  std::string name;
  nlohmann::json arguments = nlohmann::json::object();   // a JSON object
  bool operator==(const ToolCall&) const = default;
};

// Generated text split into what the user reads and the calls it makes.
struct ParsedReply {
  std::string content;          // the text outside well-formed calls, in order
  std::vector<ToolCall> calls;  // in order; ids empty
};

// Well-formed calls become `calls`; anything else (including a call whose
// markup does not parse, or an unterminated one) stays in `content` verbatim.
ParsedReply parse_tool_calls(ToolSyntax syntax, std::string_view text);

// The texts that open and close a call.
std::string_view tool_call_opener(ToolSyntax syntax);
std::string_view tool_call_closer(ToolSyntax syntax);

// Streaming: content passes through until a call may begin; from the first
// possible opener on, text is held until finish(). The concatenation of
// push() results and finish().content equals parse_tool_calls(all).content.
class ToolCallStream {
 public:
  explicit ToolCallStream(ToolSyntax syntax) : syntax_(syntax) {}
  std::string push(std::string_view text);
  ParsedReply finish();

 private:
  ToolSyntax syntax_;
  std::string pending_;  // text that may be the start of an opener
  bool holding_ = false;
};

// Prompt side.
std::string format_tool_call(ToolSyntax syntax, const ToolCall& call);
std::string format_tool_declarations(ToolSyntax syntax, std::span<const ToolSpec> tools);
std::string format_tool_response(ToolSyntax syntax, const std::string& name, const std::string& content);

// Gemma's argument syntax for a JSON value (object keys bare, in key order).
std::string format_gemma4_value(const nlohmann::json& value);

// Strict tools: when one of `tools` is strict, the rules that hold the
// reply's calls to a declared tool's name and, for a strict tool, arguments
// valid for its parameters (any object for the others), in the markup's own
// syntax; null when none is strict. `forced` is the reply's forced start
// (ChatPrompt::forced_prefix) as tokens; `markup_is_tokens`: the model's
// vocabulary has the opener and the closer as tokens. Throws
// constrain::UnsupportedSchema naming the field: a parameters schema
// outside the supported subset or not an object, or markup that is not
// tokens; a tool strict_by_default is then not held instead.
std::shared_ptr<const constrain::ToolCallRules> strict_call_rules(ToolSyntax syntax, std::span<const ToolSpec> tools,
                                                                  std::vector<int32_t> forced, bool markup_is_tokens);

}  // namespace rowlm::server
