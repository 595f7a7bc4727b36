// A reply's reasoning, answer and tool calls, streamed and whole.

#include "server/reply.h"

namespace rowlm::server {

ReplyPartsStream::ReplyPartsStream(const ReplyContext& c) {
  if (c.reasoning) reasoning_.emplace(*c.reasoning, c.reasoning_starts_inside);
  if (c.tool_syntax) {
    tools_.emplace(*c.tool_syntax);
    tools_->push(c.forced_prefix);
  }
}

ReplyParts ReplyPartsStream::push(std::string_view text) {
  ReplyParts out;
  std::string content(text);
  if (reasoning_) {
    tokenizer::ReasoningSplit split = reasoning_->push(text);
    out.reasoning = std::move(split.reasoning);
    content = std::move(split.content);
  }
  out.content = tools_ ? tools_->push(content) : std::move(content);
  return out;
}

ReplyParts ReplyPartsStream::finish() {
  ReplyParts out;
  std::string content;
  if (reasoning_) {
    tokenizer::ReasoningSplit split = reasoning_->finish();
    out.reasoning = std::move(split.reasoning);
    content = std::move(split.content);
  }
  if (tools_) {
    out.content = tools_->push(content);
    ParsedReply rest = tools_->finish();
    out.content += rest.content;
    out.calls = std::move(rest.calls);
  } else {
    out.content = std::move(content);
  }
  return out;
}

ReplyParts parse_reply(const ReplyContext& c, std::string_view text) {
  ReplyParts out;
  std::string content(text);
  if (c.reasoning) {
    tokenizer::ReasoningSplit split = tokenizer::split_reasoning(*c.reasoning, text, c.reasoning_starts_inside);
    out.reasoning = std::move(split.reasoning);
    content = std::move(split.content);
  }
  if (c.tool_syntax) {
    ParsedReply parsed = parse_tool_calls(*c.tool_syntax, c.forced_prefix + content);
    out.content = std::move(parsed.content);
    out.calls = std::move(parsed.calls);
  } else {
    out.content = std::move(content);
  }
  return out;
}

}  // namespace rowlm::server
