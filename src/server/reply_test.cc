#include "server/reply.h"

#include <random>

#include <gtest/gtest.h>

#include "server/server_test_util.h"
#include "server/sse.h"

namespace rowlm::server {
namespace {

using Json = nlohmann::json;

using testing::tiny_tokenizer;

// One choice's scripted generation: its token events and its result.
struct Script {
  std::vector<TokenEvent> events;
  RequestResult result;
};

// Splits `text` into random token events (ids arbitrary but valid), with
// raw log-probabilities when asked; the result carries the same text.
Script script(const std::string& text, std::mt19937& rng, bool logprobs, FinishReason finish = FinishReason::Stop) {
  Script s;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t len = std::uniform_int_distribution<std::size_t>(0, 5)(rng);
    // Keep UTF-8 characters whole, as the engine does.
    while (pos + len < text.size() && (static_cast<unsigned char>(text[pos + len]) & 0xC0) == 0x80) ++len;
    TokenEvent ev;
    ev.token = std::uniform_int_distribution<int32_t>(200, 8000)(rng);
    ev.text = text.substr(pos, len);
    if (logprobs) ev.logprobs = sampling::RawLogprobs{-0.25f, {{ev.token, -0.25f}, {17, -2.0f}}};
    s.result.token_ids.push_back(ev.token);
    if (logprobs) s.result.logprobs.push_back(*ev.logprobs);
    s.events.push_back(std::move(ev));
    pos += len;
  }
  s.result.text = text;
  s.result.finish = finish;
  s.result.usage = {12, int64_t(s.events.size()), 4};
  return s;
}

ReplyContext context(std::size_t choices, std::optional<ToolSyntax> tools = std::nullopt) {
  ReplyContext c;
  c.id = "id-1";
  c.model = "tiny";
  c.created = 1700000000;
  c.tokenizer = &tiny_tokenizer();
  c.n = choices;
  c.prompt_tokens = {12};
  c.tool_syntax = tools;
  auto counter = std::make_shared<int>(0);
  c.make_tool_call_id = [counter] { return "call_" + std::to_string((*counter)++); };
  return c;
}

// Feeds the scripts' events to a writer, interleaving the choices at
// random, and returns the parsed events of the stream (data, event name).
std::vector<std::pair<std::string, Json>> stream(ReplyWriter& w, const std::vector<Script>& scripts, std::mt19937& rng,
                                                 std::string* raw = nullptr) {
  std::string out = w.stream_start();
  std::vector<std::size_t> next(scripts.size(), 0);
  std::vector<std::size_t> open;
  for (std::size_t i = 0; i < scripts.size(); ++i) open.push_back(i);
  while (!open.empty()) {
    const std::size_t k = std::uniform_int_distribution<std::size_t>(0, open.size() - 1)(rng);
    const std::size_t c = open[k];
    if (next[c] < scripts[c].events.size()) {
      out += w.stream_token(c, scripts[c].events[next[c]++]);
    } else {
      out += w.stream_finish(c, scripts[c].result);
      open.erase(open.begin() + std::ptrdiff_t(k));
    }
  }
  out += w.stream_end();
  if (raw) *raw = out;
  std::vector<std::pair<std::string, Json>> events;
  std::size_t pos = 0;
  while (pos < out.size()) {
    const std::size_t end = out.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos) << "unterminated event";
    if (end == std::string::npos) break;
    std::string block = out.substr(pos, end - pos), name;
    if (block.starts_with("event: ")) {
      name = block.substr(7, block.find('\n') - 7);
      block = block.substr(block.find('\n') + 1);
    }
    EXPECT_TRUE(block.starts_with("data: ")) << block;
    const std::string data = block.substr(6);
    events.emplace_back(name, data == "[DONE]" ? Json("[DONE]") : Json::parse(data));
    pos = end + 2;
  }
  return events;
}

std::vector<const RequestResult*> results_of(const std::vector<Script>& scripts) {
  std::vector<const RequestResult*> out;
  for (const Script& s : scripts) out.push_back(&s.result);
  return out;
}

// Tool call ids are random in the server; compare calls without them.
Json without_ids(Json calls) {
  for (Json& c : calls) {
    c.erase("id");
    c.erase("index");
  }
  return calls;
}

const char* kReplies[] = {
    "Plain words, é and 😀.",
    "Let me check.<|tool_call>call:weather{city:<|\"|>Paris<|\"|>}<tool_call|>",
    "<|tool_call>call:a{x:1}<tool_call|><|tool_call>call:b{y:[true,null]}<tool_call|>",
    "<|tool_call>call:broken{x:}<tool_call|> stays text",
    "",
};

// Replies of a model asked to think (Gemma 4's thought channel).
const char* kThinkingReplies[] = {
    "<|channel>thought\nWeigh it.<channel|>The answer.",
    "<|channel>thought\nCall it.<channel|><|tool_call>call:weather{city:<|\"|>Paris<|\"|>}<tool_call|>",
    "<|channel>thought\nunfinished \xc3\xa9",
    "No thinking at all.",
};

// The stream says what the whole response says: the deltas of each choice
// add up to its message content, its tool calls and finish reason agree,
// and log-probabilities come one per token.
TEST(ChatCompletionWriter, StreamAgreesWithBody) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 60; ++trial) {
    const std::size_t n = 1 + std::size_t(trial % 3);
    const bool logprobs = trial % 2 == 0;
    const bool thinking = trial % 3 == 1;
    std::vector<Script> scripts;
    for (std::size_t i = 0; i < n; ++i)
      scripts.push_back(script(thinking ? kThinkingReplies[std::uniform_int_distribution<int>(0, 3)(rng)]
                                        : kReplies[std::uniform_int_distribution<int>(0, 4)(rng)],
                               rng, logprobs, trial % 5 == 0 ? FinishReason::Length : FinishReason::Stop));
    ReplyContext c = context(n, ToolSyntax::kGemma4);
    if (thinking) c.reasoning = tokenizer::ReasoningSyntax::kGemma4Channel;
    c.logprobs = logprobs;
    c.include_usage = trial % 4 == 0;
    const Json body = make_chat_completion_writer(c)->body(results_of(scripts));
    auto writer = make_chat_completion_writer(c);
    const auto events = stream(*writer, scripts, rng);
    ASSERT_EQ(events.back().second, "[DONE]");
    std::vector<std::string> content(n), reasoning(n);
    std::vector<Json> calls(n, Json::array()), finish(n), lps(n, Json::array());
    for (std::size_t e = 0; e + 1 < events.size(); ++e) {
      const Json& chunk = events[e].second;
      EXPECT_EQ(chunk["object"], "chat.completion.chunk");
      EXPECT_EQ(chunk["id"], "id-1");
      EXPECT_EQ(chunk.contains("usage"), c.include_usage);
      if (chunk["choices"].empty()) {  // the usage chunk, last before [DONE]
        EXPECT_TRUE(c.include_usage);
        EXPECT_EQ(e + 2, events.size());
        EXPECT_EQ(chunk["usage"], body["usage"]);
        continue;
      }
      for (const Json& ch : chunk["choices"]) {
        const std::size_t i = ch["index"];
        if (ch["delta"].contains("content")) content[i] += ch["delta"]["content"].get<std::string>();
        if (ch["delta"].contains("reasoning_content"))
          reasoning[i] += ch["delta"]["reasoning_content"].get<std::string>();
        if (ch["delta"].contains("tool_calls"))
          for (const Json& tc : ch["delta"]["tool_calls"]) calls[i].push_back(tc);
        if (!ch["finish_reason"].is_null()) finish[i] = ch["finish_reason"];
        if (ch["logprobs"].is_object())
          for (const Json& l : ch["logprobs"]["content"]) lps[i].push_back(l);
      }
    }
    for (std::size_t i = 0; i < n; ++i) {
      const Json& choice = body["choices"][i];
      const Json& message = choice["message"];
      EXPECT_EQ(content[i], message["content"].is_null() ? "" : message["content"].get<std::string>());
      EXPECT_EQ(message.contains("reasoning_content"), thinking);
      if (thinking) {
        EXPECT_EQ(reasoning[i], message["reasoning_content"].is_null() ? "" : message["reasoning_content"].get<std::string>());
      }
      // Neither part holds the other's markup.
      EXPECT_EQ(content[i].find("<|channel>"), std::string::npos) << scripts[i].result.text;
      EXPECT_EQ(without_ids(calls[i]), without_ids(message.value("tool_calls", Json::array())));
      EXPECT_EQ(finish[i], choice["finish_reason"]);
      if (logprobs) {
        EXPECT_EQ(lps[i], choice["logprobs"]["content"]);
        EXPECT_EQ(lps[i].size(), scripts[i].events.size());
      }
    }
  }
}

TEST(ChatCompletionWriter, ToolCallsInTheBody) {
  std::mt19937 rng(1);
  std::vector<Script> s = {script(kReplies[1], rng, false)};
  const Json body = make_chat_completion_writer(context(1, ToolSyntax::kGemma4))->body(results_of(s));
  const Json& m = body["choices"][0]["message"];
  EXPECT_EQ(m["content"], "Let me check.");
  ASSERT_EQ(m["tool_calls"].size(), 1u);
  EXPECT_EQ(m["tool_calls"][0]["type"], "function");
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "weather");
  EXPECT_EQ(Json::parse(m["tool_calls"][0]["function"]["arguments"].get<std::string>()), Json({{"city", "Paris"}}));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 12);
  // Without tools the markup is just text.
  const Json plain = make_chat_completion_writer(context(1))->body(results_of(s));
  EXPECT_EQ(plain["choices"][0]["message"]["content"], kReplies[1]);
  EXPECT_EQ(plain["choices"][0]["finish_reason"], "stop");
}

TEST(ChatCompletionWriter, FailedChoiceStreamsAnError) {
  std::mt19937 rng(2);
  Script s = script("partial", rng, false, FinishReason::Error);
  s.result.error = "out of memory";
  auto w = make_chat_completion_writer(context(1));
  const auto events = stream(*w, {s}, rng);
  bool saw_error = false;
  for (const auto& [name, j] : events)
    if (j.is_object() && j.contains("error")) {
      saw_error = true;
      EXPECT_NE(j["error"]["message"].get<std::string>().find("out of memory"), std::string::npos);
    }
  EXPECT_TRUE(saw_error);
  EXPECT_EQ(events.back().second, "[DONE]");
}

TEST(CompletionWriter, StreamAgreesWithBody) {
  std::mt19937 rng(9);
  for (int trial = 0; trial < 40; ++trial) {
    const std::size_t n = 1 + std::size_t(trial % 2);
    ReplyContext c = context(n);
    c.prompt_tokens = {12, 5};  // two prompts, n choices each
    c.logprobs = trial % 3 == 0;
    if (trial % 2) c.echo = {"Prompt one", "Prompt two"};
    std::vector<Script> scripts;
    for (std::size_t i = 0; i < 2 * n; ++i) scripts.push_back(script(kReplies[trial % 5], rng, c.logprobs));
    const Json body = make_completion_writer(c)->body(results_of(scripts));
    auto w = make_completion_writer(c);
    const auto events = stream(*w, scripts, rng);
    std::vector<std::string> text(2 * n);
    std::vector<Json> tokens(2 * n, Json::array());
    for (const auto& [name, j] : events) {
      if (j == "[DONE]") continue;
      EXPECT_EQ(j["object"], "text_completion");
      for (const Json& ch : j["choices"]) {
        text[ch["index"].get<std::size_t>()] += ch["text"].get<std::string>();
        if (ch["logprobs"].is_object())
          for (const Json& t : ch["logprobs"]["tokens"]) tokens[ch["index"].get<std::size_t>()].push_back(t);
      }
    }
    for (std::size_t i = 0; i < 2 * n; ++i) {
      // Compared as strings: g++ 13 finds no operator== between std::string and json.
      EXPECT_EQ(text[i], body["choices"][i]["text"].get<std::string>());
      if (c.logprobs) {
        EXPECT_EQ(tokens[i], body["choices"][i]["logprobs"]["tokens"]);
      }
    }
    EXPECT_EQ(body["usage"]["prompt_tokens"], 17);
  }
}

// Anthropic's event grammar: message_start, then blocks (each start, deltas,
// stop, indexes counting up from 0), then message_delta and message_stop;
// the blocks rebuild the content of the whole response.
TEST(MessagesWriter, StreamFollowsTheEventGrammarAndAgreesWithBody) {
  std::mt19937 rng(4);
  for (int trial = 0; trial < 60; ++trial) {
    ReplyContext c = context(1, trial % 2 ? std::optional(ToolSyntax::kGemma4) : std::nullopt);
    c.stop = {"END"};
    const bool thinking = trial % 4 == 3;
    if (thinking) c.reasoning = tokenizer::ReasoningSyntax::kGemma4Channel;
    const char* reply = thinking ? kThinkingReplies[trial % 4] : kReplies[trial % 5];
    std::vector<Script> scripts = {script(reply, rng, false, trial % 7 == 0 ? FinishReason::Length : FinishReason::Stop)};
    if (trial % 3 == 0) scripts[0].result.stop = "END";
    const Json body = make_messages_writer(c)->body(results_of(scripts));
    auto w = make_messages_writer(c);
    const auto events = stream(*w, scripts, rng);
    ASSERT_GE(events.size(), 4u);
    EXPECT_EQ(events[0].first, "message_start");
    EXPECT_EQ(events[0].second["message"]["id"], "id-1");
    Json content = Json::array();
    int open = -1;
    std::size_t e = 1;
    for (; e < events.size(); ++e) {
      const auto& [name, j] = events[e];
      EXPECT_EQ(j["type"], name);
      if (name == "ping") continue;
      if (name == "content_block_start") {
        EXPECT_EQ(open, -1);
        open = j["index"];
        EXPECT_EQ(std::size_t(open), content.size());
        content.push_back(j["content_block"]);
      } else if (name == "content_block_delta") {
        EXPECT_EQ(j["index"], open);
        Json& block = content.back();
        if (j["delta"]["type"] == "text_delta") block["text"] = block["text"].get<std::string>() + j["delta"]["text"].get<std::string>();
        else if (j["delta"]["type"] == "thinking_delta")
          block["thinking"] = block["thinking"].get<std::string>() + j["delta"]["thinking"].get<std::string>();
        else block["input"] = Json::parse(j["delta"]["partial_json"].get<std::string>());
      } else if (name == "content_block_stop") {
        EXPECT_EQ(j["index"], open);
        open = -1;
      } else {
        break;
      }
    }
    EXPECT_EQ(open, -1);
    ASSERT_EQ(e + 2, events.size());
    EXPECT_EQ(events[e].first, "message_delta");
    EXPECT_EQ(events[e].second["delta"]["stop_reason"], body["stop_reason"]);
    EXPECT_EQ(events[e].second["delta"]["stop_sequence"], body["stop_sequence"]);
    EXPECT_EQ(events[e].second["usage"]["output_tokens"], body["usage"]["output_tokens"]);
    EXPECT_EQ(events[e + 1].first, "message_stop");
    for (Json& b : content) b.erase("id");
    Json expected = body["content"];
    for (Json& b : expected) b.erase("id");
    EXPECT_EQ(content, expected) << reply;
    if (thinking && trial % 4 < 3) {
      EXPECT_EQ(expected[0]["type"], "thinking") << reply;
    }
  }
}

TEST(MessagesWriter, StopReasons) {
  std::mt19937 rng(6);
  ReplyContext c = context(1, ToolSyntax::kGemma4);
  c.stop = {"END"};
  auto reason = [&](const char* text, FinishReason f, const std::string& stop) {
    std::vector<Script> s = {script(text, rng, false, f)};
    s[0].result.stop = stop;
    return make_messages_writer(c)->body(results_of(s));
  };
  EXPECT_EQ(reason("hi", FinishReason::Stop, "<turn|>")["stop_reason"], "end_turn");
  EXPECT_EQ(reason("hi", FinishReason::Length, "")["stop_reason"], "max_tokens");
  const Json seq = reason("hi", FinishReason::Stop, "END");
  EXPECT_EQ(seq["stop_reason"], "stop_sequence");
  EXPECT_EQ(seq["stop_sequence"], "END");
  const Json tool = reason(kReplies[1], FinishReason::Stop, "");
  EXPECT_EQ(tool["stop_reason"], "tool_use");
  EXPECT_EQ(tool["content"][1]["type"], "tool_use");
  EXPECT_EQ(tool["content"][1]["input"], Json({{"city", "Paris"}}));
  EXPECT_TRUE(tool["content"][1]["id"].get<std::string>().starts_with("call_"));  // from make_tool_call_id
}

}  // namespace
}  // namespace rowlm::server
