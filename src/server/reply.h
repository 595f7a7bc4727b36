#pragma once
// Turning a generation's events into a protocol's response: a whole JSON
// body, or a stream of server-sent events. One writer per protocol (OpenAI
// chat completions, OpenAI completions, Anthropic messages); the HTTP layer
// feeds it events and sends what it returns.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rowlm/engine.h"
#include "tokenizer/reasoning.h"
#include "server/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace rowlm::server {

struct ReplyContext {
  std::string id;        // the response's id ("chatcmpl-...", "msg_...")
  std::string model;     // the served model name
  int64_t created = 0;   // Unix seconds
  const Tokenizer* tokenizer = nullptr;  // token text for log-probabilities
  // Choices are prompt-major: choice c answers prompt c / n.
  std::size_t n = 1;
  std::vector<int64_t> prompt_tokens;  // per prompt
  std::vector<std::string> echo;       // completions with echo: per prompt text
  bool logprobs = false;
  bool include_usage = false;          // OpenAI streams: a final usage chunk
  // Chat: text forced in front of the reply, and the tool markup to parse.
  std::string forced_prefix;
  std::optional<ToolSyntax> tool_syntax;
  std::vector<std::string> stop;        // the request's stop strings (Anthropic's stop_sequence)
  std::function<std::string()> make_tool_call_id;
  // Thinking: the reply's reasoning is split from its answer (before tool
  // calls are parsed from the answer).
  std::optional<tokenizer::ReasoningSyntax> reasoning;
  bool reasoning_starts_inside = false;  // the prompt opened the span
};

// A choice's generated text as its reader sees it: reasoning, answer text
// and tool calls, split as the context says (reasoning first, then calls
// from the answer). Streams push() each token's text; what comes out adds up
// to what parse_reply() finds in the whole text.
struct ReplyParts {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> calls;  // ids empty
};

class ReplyPartsStream {
 public:
  explicit ReplyPartsStream(const ReplyContext& context);
  // Reasoning and answer text now known (calls come only from finish()).
  ReplyParts push(std::string_view text);
  ReplyParts finish();

 private:
  std::optional<tokenizer::ReasoningStream> reasoning_;
  std::optional<ToolCallStream> tools_;
};

ReplyParts parse_reply(const ReplyContext& context, std::string_view text);

// A choice that ended with FinishReason::Error or was cancelled by the
// engine (not by its client) fails the whole response.
class ReplyWriter {
 public:
  virtual ~ReplyWriter() = default;
  // Streams: the bytes to send first, per token, when a choice ends, last.
  virtual std::string stream_start() = 0;
  virtual std::string stream_token(std::size_t choice, const TokenEvent& event) = 0;
  virtual std::string stream_finish(std::size_t choice, const RequestResult& result) = 0;
  virtual std::string stream_end() = 0;
  // Not streaming: the body, once every choice has finished.
  virtual nlohmann::json body(const std::vector<const RequestResult*>& results) = 0;
};

std::unique_ptr<ReplyWriter> make_chat_completion_writer(ReplyContext context);
std::unique_ptr<ReplyWriter> make_completion_writer(ReplyContext context);
std::unique_ptr<ReplyWriter> make_messages_writer(ReplyContext context);
// OpenAI's Responses API (reply_responses.cc; one choice). `request_echo`:
// the request's fields the response object repeats (responses_request.h).
class ResponsesReplyWriter : public ReplyWriter {
 public:
  // The response object as last written: body()'s, or the stream's final
  // (completed, incomplete or failed) one.
  virtual const nlohmann::json& response() const = 0;
};
std::unique_ptr<ResponsesReplyWriter> make_responses_writer(ReplyContext context, nlohmann::json request_echo);

// Whether a result failed (an engine error, or cancelled by the engine).
bool result_failed(const RequestResult& result);
// The message a failed result reports.
std::string failure_message(const RequestResult& result);

// A token's text for log-probability listings (possibly a lone byte of a
// multi-byte character), and its bytes as OpenAI lists them.
std::string token_text(const Tokenizer& tokenizer, int32_t id);
std::vector<int> token_bytes(const std::string& text);

}  // namespace rowlm::server
