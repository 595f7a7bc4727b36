#pragma once
// A chat request's conversation, protocol-neutral (OpenAI's and Anthropic's
// request parsers both produce it), and its rendering into prompt text: plain
// conversations through the model's ChatFormat, tool declarations, calls and
// results in the model's native tool markup around it.

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "server/tool_calls.h"
#include "tokenizer/chat_format.h"

namespace rowlm::server {

struct ChatTurn {
  enum class Role { kSystem, kUser, kAssistant, kTool };
  Role role = Role::kUser;
  std::string text;
  std::vector<ToolCall> tool_calls;  // kAssistant: the calls it made
  std::string tool_name;             // kTool: the function whose result this is
};

struct ToolChoice {
  enum class Mode { kNone, kAuto, kRequired, kNamed };
  Mode mode = Mode::kAuto;
  std::string name;  // kNamed
};

struct ChatPrompt {
  std::string text;  // the prompt, BOS included where the format writes one
  // Text appended after the generation prompt to make the model call a tool
  // (tool_choice required or named); it belongs in front of the generated
  // text when that is parsed.
  std::string forced_prefix;
  // Whether replies are parsed for tool calls, and in which markup.
  std::optional<ToolSyntax> tool_syntax;
  // Token strings that end a reply besides the format's own (Gemma 4 stops
  // at <|tool_response> after a call, for the caller to run the tool).
  std::vector<std::string> stop_tokens;
};

// The tool markup a chat family uses, if rowlm knows one.
std::optional<ToolSyntax> tool_syntax_for(tokenizer::ChatFamily family);

// Renders the conversation with a generation prompt. Tools are declared and
// replies parsed unless `tools` is empty or the choice is kNone. Throws
// ApiError (400, naming "tools" or "messages") for tools with a format that
// has no tool markup, and rowlm::Error from ChatFormat for conversations the
// format rejects.
// `options` reach the chat format (thinking).
ChatPrompt render_chat_prompt(const tokenizer::ChatFormat& format, std::span<const ChatTurn> turns,
                              std::span<const ToolSpec> tools, const ToolChoice& choice,
                              const tokenizer::ChatOptions& options = {});

}  // namespace rowlm::server
