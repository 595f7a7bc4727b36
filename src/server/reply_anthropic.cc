// Anthropic's messages response, whole and as its streaming event sequence:
// message_start, ping, per block content_block_start / _delta... / _stop,
// message_delta (stop reason, output tokens), message_stop. Reasoning is a
// thinking block (thinking_delta events) ahead of the text.

#include <algorithm>

#include "server/reply.h"
#include "server/sse.h"

namespace rowlm::server {

namespace {

using Json = nlohmann::json;

class MessagesWriter : public ReplyWriter {
 public:
  explicit MessagesWriter(ReplyContext c) : c_(std::move(c)), parts_(c_) {}

  std::string stream_start() override {
    Json message = {{"id", c_.id},
                    {"type", "message"},
                    {"role", "assistant"},
                    {"content", Json::array()},
                    {"model", c_.model},
                    {"stop_reason", nullptr},
                    {"stop_sequence", nullptr},
                    {"usage", {{"input_tokens", prompt_tokens()}, {"output_tokens", 0}}}};
    return sse_event("message_start", {{"type", "message_start"}, {"message", message}}) +
           sse_event("ping", {{"type", "ping"}});
  }

  std::string stream_token(std::size_t, const TokenEvent& ev) override {
    const ReplyParts parts = parts_.push(ev.text);
    std::string out = thinking_delta(parts.reasoning);  // first: its block closes before the text's opens
    return out + text_delta(parts.content);
  }

  std::string stream_finish(std::size_t, const RequestResult& r) override {
    if (result_failed(r))
      return sse_event("error", {{"type", "error"}, {"error", {{"type", "api_error"}, {"message", failure_message(r)}}}});
    ReplyParts rest = parts_.finish();
    std::string out = thinking_delta(rest.reasoning);
    out += text_delta(rest.content);
    const std::vector<ToolCall> calls = std::move(rest.calls);
    out += close_thinking_block();
    if (!text_open_ && !text_seen_ && calls.empty()) out += open_text_block();
    if (text_open_) {
      out += sse_event("content_block_stop", {{"type", "content_block_stop"}, {"index", next_index_}});
      ++next_index_;
      text_open_ = false;
    }
    for (const ToolCall& call : calls) {
      Json block = {{"type", "tool_use"}, {"id", c_.make_tool_call_id()}, {"name", call.name}, {"input", Json::object()}};
      out += sse_event("content_block_start",
                       {{"type", "content_block_start"}, {"index", next_index_}, {"content_block", block}});
      out += sse_event("content_block_delta",
                       {{"type", "content_block_delta"},
                        {"index", next_index_},
                        {"delta", {{"type", "input_json_delta"}, {"partial_json", json_text(call.arguments)}}}});
      out += sse_event("content_block_stop", {{"type", "content_block_stop"}, {"index", next_index_}});
      ++next_index_;
    }
    const auto [reason, sequence] = stop_reason(r, !calls.empty());
    out += sse_event("message_delta", {{"type", "message_delta"},
                                       {"delta", {{"stop_reason", reason}, {"stop_sequence", sequence}}},
                                       {"usage", {{"output_tokens", r.usage.completion_tokens}}}});
    out += sse_event("message_stop", {{"type", "message_stop"}});
    return out;
  }

  std::string stream_end() override { return {}; }

  Json body(const std::vector<const RequestResult*>& results) override {
    const RequestResult& r = *results.at(0);
    Json content = Json::array();
    ReplyParts parsed = parse_reply(c_, r.text);
    const std::string& text = parsed.content;
    const std::vector<ToolCall>& calls = parsed.calls;
    if (!parsed.reasoning.empty())
      content.push_back({{"type", "thinking"}, {"thinking", parsed.reasoning}, {"signature", ""}});
    if (!text.empty() || calls.empty()) content.push_back({{"type", "text"}, {"text", text}});
    for (const ToolCall& call : calls)
      content.push_back({{"type", "tool_use"}, {"id", c_.make_tool_call_id()}, {"name", call.name}, {"input", call.arguments}});
    const auto [reason, sequence] = stop_reason(r, !calls.empty());
    return {{"id", c_.id},
            {"type", "message"},
            {"role", "assistant"},
            {"model", c_.model},
            {"content", std::move(content)},
            {"stop_reason", reason},
            {"stop_sequence", sequence},
            {"usage", {{"input_tokens", prompt_tokens()}, {"output_tokens", r.usage.completion_tokens}}}};
  }

 private:
  int64_t prompt_tokens() const { return c_.prompt_tokens.empty() ? 0 : c_.prompt_tokens[0]; }

  std::pair<std::string, Json> stop_reason(const RequestResult& r, bool called) const {
    if (called) return {"tool_use", nullptr};
    if (r.finish == FinishReason::Length) return {"max_tokens", nullptr};
    if (!r.stop.empty() && std::find(c_.stop.begin(), c_.stop.end(), r.stop) != c_.stop.end())
      return {"stop_sequence", r.stop};
    return {"end_turn", nullptr};
  }

  // Thinking comes first: its block closes before any text or call.
  std::string thinking_delta(const std::string& text) {
    if (text.empty()) return {};
    std::string out;
    if (!thinking_open_) {
      thinking_open_ = true;
      out += sse_event("content_block_start", {{"type", "content_block_start"},
                                               {"index", next_index_},
                                               {"content_block", {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}}});
    }
    return out + sse_event("content_block_delta", {{"type", "content_block_delta"},
                                                   {"index", next_index_},
                                                   {"delta", {{"type", "thinking_delta"}, {"thinking", text}}}});
  }

  std::string close_thinking_block() {
    if (!thinking_open_) return {};
    thinking_open_ = false;
    return sse_event("content_block_stop", {{"type", "content_block_stop"}, {"index", next_index_++}});
  }

  std::string open_text_block() {
    text_open_ = true;
    text_seen_ = true;
    return sse_event("content_block_start", {{"type", "content_block_start"},
                                             {"index", next_index_},
                                             {"content_block", {{"type", "text"}, {"text", ""}}}});
  }

  std::string text_delta(const std::string& text) {
    if (text.empty()) return {};
    std::string out = close_thinking_block();
    if (!text_open_) out += open_text_block();
    out += sse_event("content_block_delta", {{"type", "content_block_delta"},
                                             {"index", next_index_},
                                             {"delta", {{"type", "text_delta"}, {"text", text}}}});
    return out;
  }

  ReplyContext c_;
  ReplyPartsStream parts_;
  bool thinking_open_ = false;
  bool text_open_ = false;
  bool text_seen_ = false;  // a text block was opened (the reply has one)
  int next_index_ = 0;
};

}  // namespace

std::unique_ptr<ReplyWriter> make_messages_writer(ReplyContext context) {
  return std::make_unique<MessagesWriter>(std::move(context));
}

}  // namespace rowlm::server
