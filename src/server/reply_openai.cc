// OpenAI's chat completion and completion responses, whole and streamed.

#include "server/reply.h"
#include "server/sse.h"

namespace rowlm::server {

namespace {

using Json = nlohmann::json;

const char* finish_reason(const RequestResult& r, bool called_tools) {
  if (called_tools) return "tool_calls";
  return r.finish == FinishReason::Length ? "length" : "stop";
}

Json token_entry(const Tokenizer& tok, int32_t id, float logprob) {
  const std::string text = token_text(tok, id);
  return {{"token", text}, {"logprob", logprob}, {"bytes", token_bytes(text)}};
}

// One entry of chat's logprobs.content.
Json chat_logprob(const Tokenizer& tok, int32_t id, const sampling::RawLogprobs& lp) {
  Json e = token_entry(tok, id, lp.chosen);
  Json top = Json::array();
  for (const auto& alt : lp.top) top.push_back(token_entry(tok, alt.token, alt.logprob));
  e["top_logprobs"] = std::move(top);
  return e;
}

Json usage_json(const ReplyContext& c, const std::vector<Usage>& usage) {
  int64_t prompt = 0, completion = 0, cached = 0;
  for (int64_t p : c.prompt_tokens) prompt += p;
  for (std::size_t i = 0; i < usage.size(); ++i) {
    completion += usage[i].completion_tokens;
    if (i % c.n == 0) cached += usage[i].cached_prompt_tokens;  // once per prompt
  }
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

Json error_event(const RequestResult& r) {
  return {{"error", {{"message", failure_message(r)}, {"type", "server_error"}, {"param", nullptr}, {"code", nullptr}}}};
}

Json tool_calls_json(const ReplyContext& c, const std::vector<ToolCall>& calls, bool streaming) {
  Json out = Json::array();
  for (std::size_t k = 0; k < calls.size(); ++k) {
    Json call = {{"id", c.make_tool_call_id()},
                 {"type", "function"},
                 {"function", {{"name", calls[k].name}, {"arguments", json_text(calls[k].arguments)}}}};
    if (streaming) call["index"] = k;
    out.push_back(std::move(call));
  }
  return out;
}

class ChatCompletionWriter : public ReplyWriter {
 public:
  explicit ChatCompletionWriter(ReplyContext c) : c_(std::move(c)) {
    const std::size_t choices = c_.n * c_.prompt_tokens.size();
    usage_.resize(choices);
    parts_.reserve(choices);
    for (std::size_t i = 0; i < choices; ++i) parts_.emplace_back(c_);
  }

  std::string stream_start() override {
    const std::size_t choices = usage_.size();
    std::string out;
    for (std::size_t i = 0; i < choices; ++i)
      out += chunk({{"index", i}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr},
                    {"finish_reason", nullptr}});
    return out;
  }

  std::string stream_token(std::size_t choice, const TokenEvent& ev) override {
    const ReplyParts parts = parts_[choice].push(ev.text);
    const bool with_logprobs = c_.logprobs && ev.logprobs;
    if (parts.reasoning.empty() && parts.content.empty() && !with_logprobs) return {};
    Json lp = nullptr;
    if (with_logprobs) lp = {{"content", Json::array({chat_logprob(*c_.tokenizer, ev.token, *ev.logprobs)})}};
    return chunk({{"index", choice}, {"delta", delta(parts)}, {"logprobs", lp}, {"finish_reason", nullptr}});
  }

  std::string stream_finish(std::size_t choice, const RequestResult& r) override {
    if (result_failed(r)) return sse_data(error_event(r));
    usage_[choice] = r.usage;
    std::string out;
    const ReplyParts rest = parts_[choice].finish();
    if (!rest.reasoning.empty() || !rest.content.empty())
      out += chunk({{"index", choice}, {"delta", delta(rest)}, {"logprobs", nullptr}, {"finish_reason", nullptr}});
    const bool called = !rest.calls.empty();
    if (called)
      out += chunk({{"index", choice}, {"delta", {{"tool_calls", tool_calls_json(c_, rest.calls, true)}}},
                    {"logprobs", nullptr}, {"finish_reason", nullptr}});
    out += chunk({{"index", choice}, {"delta", Json::object()}, {"logprobs", nullptr},
                  {"finish_reason", finish_reason(r, called)}});
    return out;
  }

  std::string stream_end() override {
    std::string out;
    if (c_.include_usage) {
      Json j = base("chat.completion.chunk");
      j["choices"] = Json::array();
      j["usage"] = usage_json(c_, usage_);
      out += sse_data(j);
    }
    return out + std::string(kSseDone);
  }

  Json body(const std::vector<const RequestResult*>& results) override {
    Json j = base("chat.completion");
    Json choices = Json::array();
    std::vector<Usage> usage;
    for (std::size_t i = 0; i < results.size(); ++i) {
      const RequestResult& r = *results[i];
      usage.push_back(r.usage);
      Json message = {{"role", "assistant"}};
      const ReplyParts parsed = parse_reply(c_, r.text);
      const bool called = !parsed.calls.empty();
      message["content"] = parsed.content.empty() && called ? Json(nullptr) : Json(parsed.content);
      if (c_.reasoning) message["reasoning_content"] = parsed.reasoning.empty() ? Json(nullptr) : Json(parsed.reasoning);
      if (called) message["tool_calls"] = tool_calls_json(c_, parsed.calls, false);
      Json lp = nullptr;
      if (c_.logprobs) {
        Json content = Json::array();
        for (std::size_t t = 0; t < r.logprobs.size() && t < r.token_ids.size(); ++t)
          content.push_back(chat_logprob(*c_.tokenizer, r.token_ids[t], r.logprobs[t]));
        lp = {{"content", std::move(content)}};
      }
      choices.push_back({{"index", i}, {"message", std::move(message)}, {"logprobs", std::move(lp)},
                         {"finish_reason", finish_reason(r, called)}});
    }
    j["choices"] = std::move(choices);
    j["usage"] = usage_json(c_, usage);
    return j;
  }

 private:
  Json base(const char* object) const {
    return {{"id", c_.id}, {"object", object}, {"created", c_.created}, {"model", c_.model},
            {"system_fingerprint", nullptr}};
  }
  // A delta's text: the answer's, and the reasoning's apart.
  static Json delta(const ReplyParts& parts) {
    Json d = Json::object();
    if (!parts.reasoning.empty()) d["reasoning_content"] = parts.reasoning;
    if (!parts.content.empty() || parts.reasoning.empty()) d["content"] = parts.content;
    return d;
  }
  std::string chunk(Json choice) const {
    Json j = base("chat.completion.chunk");
    j["choices"] = Json::array({std::move(choice)});
    if (c_.include_usage) j["usage"] = nullptr;
    return sse_data(j);
  }

  ReplyContext c_;
  std::vector<ReplyPartsStream> parts_;
  std::vector<Usage> usage_;
};

// Completions' logprobs object for tokens starting at text offset `offset`.
struct CompletionLogprobs {
  Json tokens = Json::array(), token_logprobs = Json::array(), top = Json::array(), offsets = Json::array();
  void add(const Tokenizer& tok, int32_t id, const sampling::RawLogprobs& lp, std::size_t& offset) {
    const std::string text = token_text(tok, id);
    tokens.push_back(text);
    token_logprobs.push_back(lp.chosen);
    Json alts = Json::object();
    for (const auto& alt : lp.top) alts[token_text(tok, alt.token)] = alt.logprob;
    top.push_back(std::move(alts));
    offsets.push_back(offset);
    offset += text.size();
  }
  Json json() const {
    return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
  }
};

class CompletionWriter : public ReplyWriter {
 public:
  explicit CompletionWriter(ReplyContext c) : c_(std::move(c)) {
    const std::size_t choices = c_.n * c_.prompt_tokens.size();
    usage_.resize(choices);
    offsets_.assign(choices, 0);
  }

  std::string stream_start() override {
    const std::size_t choices = usage_.size();
    std::string out;
    for (std::size_t i = 0; i < choices && !c_.echo.empty(); ++i) {
      const std::string& echo = c_.echo[i / c_.n];
      offsets_[i] = echo.size();
      out += chunk({{"index", i}, {"text", echo}, {"logprobs", nullptr}, {"finish_reason", nullptr}});
    }
    return out;
  }

  std::string stream_token(std::size_t choice, const TokenEvent& ev) override {
    const bool with_logprobs = c_.logprobs && ev.logprobs;
    if (ev.text.empty() && !with_logprobs) return {};
    Json lp = nullptr;
    if (with_logprobs) {
      CompletionLogprobs l;
      l.add(*c_.tokenizer, ev.token, *ev.logprobs, offsets_[choice]);
      lp = l.json();
    }
    return chunk({{"index", choice}, {"text", ev.text}, {"logprobs", lp}, {"finish_reason", nullptr}});
  }

  std::string stream_finish(std::size_t choice, const RequestResult& r) override {
    if (result_failed(r)) return sse_data(error_event(r));
    usage_[choice] = r.usage;
    return chunk({{"index", choice}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", finish_reason(r, false)}});
  }

  std::string stream_end() override {
    std::string out;
    if (c_.include_usage) {
      Json j = base();
      j["choices"] = Json::array();
      j["usage"] = usage_json(c_, usage_);
      out += sse_data(j);
    }
    return out + std::string(kSseDone);
  }

  Json body(const std::vector<const RequestResult*>& results) override {
    Json j = base();
    Json choices = Json::array();
    std::vector<Usage> usage;
    for (std::size_t i = 0; i < results.size(); ++i) {
      const RequestResult& r = *results[i];
      usage.push_back(r.usage);
      const std::string echo = c_.echo.empty() ? "" : c_.echo[i / c_.n];
      Json lp = nullptr;
      if (c_.logprobs) {
        CompletionLogprobs l;
        std::size_t offset = echo.size();
        for (std::size_t t = 0; t < r.logprobs.size() && t < r.token_ids.size(); ++t)
          l.add(*c_.tokenizer, r.token_ids[t], r.logprobs[t], offset);
        lp = l.json();
      }
      choices.push_back({{"index", i}, {"text", echo + r.text}, {"logprobs", std::move(lp)},
                         {"finish_reason", finish_reason(r, false)}});
    }
    j["choices"] = std::move(choices);
    j["usage"] = usage_json(c_, usage);
    return j;
  }

 private:
  Json base() const {
    return {{"id", c_.id}, {"object", "text_completion"}, {"created", c_.created}, {"model", c_.model},
            {"system_fingerprint", nullptr}};
  }
  std::string chunk(Json choice) const {
    Json j = base();
    j["choices"] = Json::array({std::move(choice)});
    if (c_.include_usage) j["usage"] = nullptr;
    return sse_data(j);
  }

  ReplyContext c_;
  std::vector<Usage> usage_;
  std::vector<std::size_t> offsets_;
};

}  // namespace

std::unique_ptr<ReplyWriter> make_chat_completion_writer(ReplyContext context) {
  return std::make_unique<ChatCompletionWriter>(std::move(context));
}

std::unique_ptr<ReplyWriter> make_completion_writer(ReplyContext context) {
  return std::make_unique<CompletionWriter>(std::move(context));
}

bool result_failed(const RequestResult& r) {
  return r.finish == FinishReason::Error || r.finish == FinishReason::Cancelled;
}

std::string failure_message(const RequestResult& r) {
  if (r.finish == FinishReason::Cancelled) return "the request was cancelled by the server (shutting down)";
  return "generation failed: " + (r.error.empty() ? std::string("unknown error") : r.error);
}

std::string token_text(const Tokenizer& tokenizer, int32_t id) {
  const int32_t ids[] = {id};
  return tokenizer.decode(ids, /*skip_special_tokens=*/false);
}

std::vector<int> token_bytes(const std::string& text) {
  std::vector<int> out;
  out.reserve(text.size());
  for (unsigned char c : text) out.push_back(c);
  return out;
}

}  // namespace rowlm::server
