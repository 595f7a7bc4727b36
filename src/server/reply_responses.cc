// OpenAI's Responses API response object, whole and as its event stream:
//
//   response.created, response.in_progress,
//   per output item: response.output_item.added, response.content_part.added,
//     response.reasoning_text.delta... / response.output_text.delta... /
//     response.function_call_arguments.delta, their .done events,
//     response.content_part.done, response.output_item.done,
//   response.completed (response.incomplete at max_output_tokens;
//   response.failed when generation failed).
//
// Every event carries a sequence_number. Output items: reasoning (when the
// model thought), then the message (omitted when the reply is only calls),
// then one function_call per call.

#include "server/reply.h"
#include "server/sse.h"

namespace rowlm::server {

namespace {

using Json = nlohmann::json;

Json reasoning_item(const std::string& id, const std::string& text, const char* status) {
  Json content = Json::array();
  if (!text.empty() || std::string_view(status) != "in_progress") content.push_back({{"type", "reasoning_text"}, {"text", text}});
  return {{"id", id}, {"type", "reasoning"}, {"summary", Json::array()}, {"content", std::move(content)}, {"status", status}};
}

Json text_part(const std::string& text) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", Json::array()}, {"logprobs", Json::array()}};
}

Json message_item(const std::string& id, const std::optional<std::string>& text, const char* status) {
  Json content = Json::array();
  if (text) content.push_back(text_part(*text));
  return {{"id", id}, {"type", "message"}, {"role", "assistant"}, {"status", status}, {"content", std::move(content)}};
}

Json call_item(const std::string& id, const std::string& call_id, const ToolCall& call, const std::string& arguments,
               const char* status) {
  return {{"id", id}, {"type", "function_call"}, {"call_id", call_id}, {"name", call.name},
          {"arguments", arguments}, {"status", status}};
}

class ResponsesWriter : public ResponsesReplyWriter {
 public:
  ResponsesWriter(ReplyContext c, Json echo) : c_(std::move(c)), echo_(std::move(echo)), parts_(c_) {
    const std::string_view id = c_.id;
    suffix_ = std::string(id.substr(id.find('_') == std::string_view::npos ? 0 : id.find('_') + 1));
  }

  std::string stream_start() override {
    const Json r = response_object("in_progress", Json::array(), nullptr);
    std::string out = event("response.created", {{"response", r}});  // (events in order: each takes a number)
    return out + event("response.in_progress", {{"response", r}});
  }

  std::string stream_token(std::size_t, const TokenEvent& ev) override {
    const ReplyParts parts = parts_.push(ev.text);
    std::string out = reasoning_delta(parts.reasoning);  // first: events are numbered in order
    return out + text_delta(parts.content);
  }

  std::string stream_finish(std::size_t, const RequestResult& r) override {
    if (result_failed(r)) {
      Json done = Json::array();  // the items that were complete
      for (const Json& item : output_)
        if (!item.is_null()) done.push_back(item);
      Json failed = response_object("failed", std::move(done), nullptr);
      failed["error"] = {{"code", "server_error"}, {"message", failure_message(r)}};
      response_ = failed;
      return event("response.failed", {{"response", std::move(failed)}});
    }
    const bool incomplete = r.finish == FinishReason::Length;
    ReplyParts rest = parts_.finish();
    std::string out = reasoning_delta(rest.reasoning);
    out += text_delta(rest.content);
    out += close_reasoning();
    if (!message_open_ && rest.calls.empty() && !message_done_) out += open_message();
    out += close_message(incomplete);
    for (const ToolCall& call : rest.calls) {
      const std::size_t index = output_.size();
      const std::string id = "fc_" + suffix_ + "_" + std::to_string(index);
      const std::string call_id = c_.make_tool_call_id();
      const std::string arguments = json_text(call.arguments);
      out += event("response.output_item.added",
                   {{"output_index", index}, {"item", call_item(id, call_id, call, "", "in_progress")}});
      out += event("response.function_call_arguments.delta",
                   {{"item_id", id}, {"output_index", index}, {"delta", arguments}});
      out += event("response.function_call_arguments.done",
                   {{"item_id", id}, {"output_index", index}, {"name", call.name}, {"arguments", arguments}});
      Json item = call_item(id, call_id, call, arguments, "completed");
      out += event("response.output_item.done", {{"output_index", index}, {"item", item}});
      output_.push_back(std::move(item));
    }
    response_ = response_object(incomplete ? "incomplete" : "completed", output_, usage(r, reasoning_text_));
    return out + event(incomplete ? "response.incomplete" : "response.completed", {{"response", response_}});
  }

  std::string stream_end() override { return {}; }

  Json body(const std::vector<const RequestResult*>& results) override {
    const RequestResult& r = *results.at(0);
    const bool incomplete = r.finish == FinishReason::Length;
    const ReplyParts parts = parse_reply(c_, r.text);
    Json output = Json::array();
    if (!parts.reasoning.empty()) output.push_back(reasoning_item("rs_" + suffix_, parts.reasoning, "completed"));
    if (!parts.content.empty() || parts.calls.empty())
      output.push_back(message_item("msg_" + suffix_, parts.content, incomplete ? "incomplete" : "completed"));
    for (const ToolCall& call : parts.calls) {
      const std::string id = "fc_" + suffix_ + "_" + std::to_string(output.size());
      output.push_back(call_item(id, c_.make_tool_call_id(), call, json_text(call.arguments), "completed"));
    }
    response_ = response_object(incomplete ? "incomplete" : "completed", std::move(output), usage(r, parts.reasoning));
    return response_;
  }

  const Json& response() const override { return response_; }

 private:
  std::string event(const char* type, Json fields) {
    fields["type"] = type;
    fields["sequence_number"] = sequence_++;
    return sse_event(type, fields);
  }

  Json response_object(const char* status, Json output, Json usage) const {
    Json r = {{"id", c_.id},
              {"object", "response"},
              {"created_at", c_.created},
              {"status", status},
              {"error", nullptr},
              {"incomplete_details", nullptr},
              {"model", c_.model},
              {"output", std::move(output)},
              {"usage", std::move(usage)}};
    if (std::string_view(status) == "incomplete") r["incomplete_details"] = {{"reason", "max_output_tokens"}};
    r.update(echo_);
    return r;
  }

  Json usage(const RequestResult& r, const std::string& reasoning) const {
    const int64_t input = c_.prompt_tokens.empty() ? 0 : c_.prompt_tokens[0];
    // The reasoning's tokens, counted by tokenizing its text again.
    const int64_t reasoning_tokens =
        reasoning.empty() || !c_.tokenizer ? 0 : int64_t(c_.tokenizer->encode(reasoning, false).size());
    return {{"input_tokens", input},
            {"input_tokens_details", {{"cached_tokens", r.usage.cached_prompt_tokens}}},
            {"output_tokens", r.usage.completion_tokens},
            {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens}}},
            {"total_tokens", input + r.usage.completion_tokens}};
  }

  std::string reasoning_delta(const std::string& text) {
    if (text.empty()) return {};
    std::string out;
    if (!reasoning_open_) {
      reasoning_open_ = true;
      reasoning_index_ = output_.size();
      output_.push_back(nullptr);  // its place; filled when it closes
      out += event("response.output_item.added",
                   {{"output_index", reasoning_index_}, {"item", reasoning_item("rs_" + suffix_, "", "in_progress")}});
      out += event("response.content_part.added", {{"item_id", "rs_" + suffix_},
                                                   {"output_index", reasoning_index_},
                                                   {"content_index", 0},
                                                   {"part", {{"type", "reasoning_text"}, {"text", ""}}}});
    }
    reasoning_text_ += text;
    return out + event("response.reasoning_text.delta",
                       {{"item_id", "rs_" + suffix_}, {"output_index", reasoning_index_}, {"content_index", 0}, {"delta", text}});
  }

  std::string close_reasoning() {
    if (!reasoning_open_) return {};
    reasoning_open_ = false;
    const std::string id = "rs_" + suffix_;
    Json item = reasoning_item(id, reasoning_text_, "completed");
    std::string out = event("response.reasoning_text.done",
                            {{"item_id", id}, {"output_index", reasoning_index_}, {"content_index", 0}, {"text", reasoning_text_}});
    out += event("response.content_part.done", {{"item_id", id},
                                                 {"output_index", reasoning_index_},
                                                 {"content_index", 0},
                                                 {"part", item["content"][0]}});
    out += event("response.output_item.done", {{"output_index", reasoning_index_}, {"item", item}});
    output_[reasoning_index_] = std::move(item);
    return out;
  }

  std::string open_message() {
    message_open_ = true;
    message_index_ = output_.size();
    output_.push_back(nullptr);
    const std::string id = "msg_" + suffix_;
    std::string out = event("response.output_item.added",
                            {{"output_index", message_index_}, {"item", message_item(id, std::nullopt, "in_progress")}});
    return out + event("response.content_part.added",
                       {{"item_id", id}, {"output_index", message_index_}, {"content_index", 0}, {"part", text_part("")}});
  }

  std::string text_delta(const std::string& text) {
    if (text.empty()) return {};
    std::string out = close_reasoning();
    if (!message_open_) out += open_message();
    message_text_ += text;
    return out + event("response.output_text.delta", {{"item_id", "msg_" + suffix_},
                                                      {"output_index", message_index_},
                                                      {"content_index", 0},
                                                      {"delta", text},
                                                      {"logprobs", Json::array()}});
  }

  std::string close_message(bool incomplete) {
    if (!message_open_) return {};
    message_open_ = false;
    message_done_ = true;
    const std::string id = "msg_" + suffix_;
    Json item = message_item(id, message_text_, incomplete ? "incomplete" : "completed");
    std::string out = event("response.output_text.done", {{"item_id", id},
                                                          {"output_index", message_index_},
                                                          {"content_index", 0},
                                                          {"text", message_text_},
                                                          {"logprobs", Json::array()}});
    out += event("response.content_part.done",
                 {{"item_id", id}, {"output_index", message_index_}, {"content_index", 0}, {"part", text_part(message_text_)}});
    out += event("response.output_item.done", {{"output_index", message_index_}, {"item", item}});
    output_[message_index_] = std::move(item);
    return out;
  }

  ReplyContext c_;
  Json echo_;
  ReplyPartsStream parts_;
  std::string suffix_;  // of the response id, shared by its items' ids
  int64_t sequence_ = 0;
  Json output_ = Json::array();  // the items so far
  bool reasoning_open_ = false, message_open_ = false, message_done_ = false;
  std::size_t reasoning_index_ = 0, message_index_ = 0;
  std::string reasoning_text_, message_text_;
  Json response_;
};

}  // namespace

std::unique_ptr<ResponsesReplyWriter> make_responses_writer(ReplyContext context, Json request_echo) {
  return std::make_unique<ResponsesWriter>(std::move(context), std::move(request_echo));
}

}  // namespace rowlm::server
