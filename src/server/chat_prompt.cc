#include "server/chat_prompt.h"

#include <algorithm>

#include "server/api_error.h"

namespace rowlm::server {

namespace {

using tokenizer::ChatFamily;
using tokenizer::ChatMessage;
using Role = ChatTurn::Role;

const char* role_name(Role r) {
  switch (r) {
    case Role::kSystem: return "system";
    case Role::kUser: return "user";
    case Role::kAssistant: return "assistant";
    case Role::kTool: return "tool";
  }
  return "user";
}

bool uses_tool_markup(std::span<const ChatTurn> turns) {
  return std::any_of(turns.begin(), turns.end(),
                     [](const ChatTurn& t) { return t.role == Role::kTool || !t.tool_calls.empty(); });
}

[[noreturn]] void tool_result_without_call(std::size_t i) {
  throw_bad_field("messages[" + std::to_string(i) + "]",
                  "a tool result must follow an assistant message that made tool calls");
}

// Gemma 4 keeps a tool exchange inside one model turn: the reply's text, its
// calls, the results, and the text the model wrote after them. A
// conversation that ends with results leaves that turn open for the model to
// continue.
std::string render_gemma4(const tokenizer::ChatFormat& format, std::span<const ChatTurn> turns,
                          const std::string& declarations, const tokenizer::ChatOptions& options) {
  std::vector<ChatMessage> messages;
  std::size_t first = 0;
  if (!declarations.empty()) {
    const bool has_system = !turns.empty() && turns[0].role == Role::kSystem;
    messages.push_back({"system", (has_system ? tokenizer::python_strip(turns[0].text) : "") + declarations});
    first = has_system ? 1 : 0;
  }
  std::string block;
  bool in_block = false, block_has_calls = false;
  Role previous = Role::kSystem;
  auto close_block = [&] {
    if (in_block) messages.push_back({"assistant", block});
    in_block = block_has_calls = false;
    block.clear();
  };
  for (std::size_t i = first; i < turns.size(); ++i) {
    const ChatTurn& t = turns[i];
    switch (t.role) {
      case Role::kSystem:
      case Role::kUser:
        close_block();
        messages.push_back({role_name(t.role), t.text});
        break;
      case Role::kAssistant:
        if (!(in_block && previous == Role::kTool)) close_block();
        in_block = true;
        block += tokenizer::python_strip(t.text);
        for (const ToolCall& c : t.tool_calls) block += format_tool_call(ToolSyntax::kGemma4, c);
        block_has_calls = block_has_calls || !t.tool_calls.empty();
        break;
      case Role::kTool:
        if (!in_block || !block_has_calls) tool_result_without_call(i);
        block += format_tool_response(ToolSyntax::kGemma4, t.tool_name, t.text);
        break;
    }
    previous = t.role;
  }
  if (in_block && previous == Role::kTool) {
    std::string prompt = format.render(messages, /*add_generation_prompt=*/true, options);
    constexpr std::string_view kEmptyThought = "<|channel>thought\n<channel|>";
    if (format.empty_thought_channel() && std::string_view(prompt).ends_with(kEmptyThought))
      prompt.resize(prompt.size() - kEmptyThought.size());
    return prompt + block;
  }
  close_block();
  return format.render(messages, /*add_generation_prompt=*/true, options);
}

// ChatML models take declarations in the system message, calls as JSON in
// the assistant's message, and results as a user turn.
std::string render_json_tags(const tokenizer::ChatFormat& format, std::span<const ChatTurn> turns,
                             const std::string& declarations, const tokenizer::ChatOptions& options) {
  std::vector<ChatMessage> messages;
  std::size_t first = 0;
  if (!declarations.empty()) {
    const bool has_system = !turns.empty() && turns[0].role == Role::kSystem;
    const std::string system = has_system ? turns[0].text : format.default_system();
    messages.push_back({"system", system.empty() ? declarations : system + "\n\n" + declarations});
    first = has_system ? 1 : 0;
  }
  Role previous = Role::kSystem;
  bool previous_had_calls = false;
  for (std::size_t i = first; i < turns.size(); ++i) {
    const ChatTurn& t = turns[i];
    if (t.role == Role::kTool) {
      if (!previous_had_calls) tool_result_without_call(i);
      const std::string response = format_tool_response(ToolSyntax::kJsonTags, t.tool_name, t.text);
      if (previous == Role::kTool)
        messages.back().content += "\n" + response;
      else
        messages.push_back({"user", response});
    } else if (t.role == Role::kAssistant) {
      std::string content = t.text;
      for (const ToolCall& c : t.tool_calls)
        content += (content.empty() ? "" : "\n") + format_tool_call(ToolSyntax::kJsonTags, c);
      messages.push_back({"assistant", content});
      previous_had_calls = !t.tool_calls.empty();
    } else {
      messages.push_back({role_name(t.role), t.text});
      previous_had_calls = false;
    }
    previous = t.role;
  }
  return format.render(messages, /*add_generation_prompt=*/true, options);
}

}  // namespace

std::optional<ToolSyntax> tool_syntax_for(ChatFamily family) {
  switch (family) {
    case ChatFamily::kGemma4: return ToolSyntax::kGemma4;
    case ChatFamily::kChatML: return ToolSyntax::kJsonTags;
    default: return std::nullopt;
  }
}

ChatPrompt render_chat_prompt(const tokenizer::ChatFormat& format, std::span<const ChatTurn> turns,
                              std::span<const ToolSpec> tools, const ToolChoice& choice,
                              const tokenizer::ChatOptions& options) {
  ChatPrompt out;
  const bool tools_active = !tools.empty() && choice.mode != ToolChoice::Mode::kNone;
  if (!tools_active && !uses_tool_markup(turns)) {
    std::vector<ChatMessage> messages;
    messages.reserve(turns.size());
    for (const ChatTurn& t : turns) messages.push_back({role_name(t.role), t.text});
    out.text = format.render(messages, /*add_generation_prompt=*/true, options);
    return out;
  }
  const auto syntax = tool_syntax_for(format.family());
  if (!syntax)
    throw_bad_field(tools_active ? "tools" : "messages",
                    "tool calling is not supported with the model's chat format (" + format.name() +
                        "); rowlm knows the tool markup of gemma4 and chatml models");
  const std::string declarations = tools_active ? format_tool_declarations(*syntax, tools) : "";
  if (*syntax == ToolSyntax::kGemma4) {
    out.text = render_gemma4(format, turns, declarations, options);
    if (tools_active) out.stop_tokens.push_back("<|tool_response>");
  } else {
    out.text = render_json_tags(format, turns, declarations, options);
  }
  if (tools_active) {
    out.tool_syntax = syntax;
    const bool gemma = *syntax == ToolSyntax::kGemma4;
    if (choice.mode == ToolChoice::Mode::kRequired)
      out.forced_prefix = gemma ? "<|tool_call>call:" : "<tool_call>\n{\"name\": \"";
    else if (choice.mode == ToolChoice::Mode::kNamed)
      out.forced_prefix = gemma ? "<|tool_call>call:" + choice.name + "{"
                                : "<tool_call>\n{\"name\": \"" + choice.name + "\", \"arguments\": ";
    out.text += out.forced_prefix;
  }
  return out;
}

}  // namespace rowlm::server
