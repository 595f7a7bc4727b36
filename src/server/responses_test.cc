// The Responses API's pieces: the bounded response store, the request
// parser, and the response writer (its event stream against its body).

#include <random>

#include <gtest/gtest.h>

#include "server/api_error.h"
#include "server/reply.h"
#include "server/response_store.h"
#include "server/responses_request.h"
#include "server/server_test_util.h"
#include "server/sse.h"

namespace rowlm::server {
namespace {

using Json = nlohmann::json;
using Role = ChatTurn::Role;
using namespace std::chrono_literals;
using testing::kRemove;
using testing::kTinyVocab;

StoredResponse stored(const std::string& id, std::size_t text_bytes) {
  StoredResponse s;
  s.id = id;
  s.turns.push_back({Role::kUser, std::string(text_bytes, 'x'), {}, {}});
  return s;
}

TEST(ResponseStore, KeepsWithinItsBytesOldestGoFirst) {
  const std::size_t one = stored("a", 1000).bytes();
  ResponseStore store(3 * one, 3600s);
  for (const char* id : {"a", "b", "c"}) EXPECT_TRUE(store.put(stored(id, 1000)));
  EXPECT_EQ(store.size(), 3u);
  EXPECT_EQ(store.bytes(), 3 * one);
  EXPECT_TRUE(store.put(stored("d", 1000)));  // evicts a, the oldest
  EXPECT_EQ(store.get("a"), nullptr);
  for (const char* id : {"b", "c", "d"}) EXPECT_NE(store.get(id), nullptr) << id;
  EXPECT_TRUE(store.put(stored("b", 1000)));  // replacing b makes it the newest
  EXPECT_TRUE(store.put(stored("e", 1000)));  // so c goes
  EXPECT_EQ(store.get("c"), nullptr);
  EXPECT_NE(store.get("b"), nullptr);
  EXPECT_LE(store.bytes(), 3 * one);
  EXPECT_FALSE(store.put(stored("huge", 10 * 1000)));  // larger than the whole budget: not kept, nothing evicted
  EXPECT_EQ(store.size(), 3u);
  EXPECT_TRUE(store.erase("b"));
  EXPECT_FALSE(store.erase("b"));
  EXPECT_EQ(store.bytes(), 2 * one);
  ResponseStore none(0, 3600s);
  EXPECT_FALSE(none.put(stored("a", 1)));
}

TEST(ResponseStore, ResponsesExpire) {
  auto now = ResponseStore::Clock::time_point{};
  ResponseStore store(1u << 20, 60s, [&] { return now; });
  store.put(stored("a", 10));
  now += 30s;
  store.put(stored("b", 10));
  now += 29s;
  EXPECT_NE(store.get("a"), nullptr);
  now += 1s;  // a is 60 s old
  EXPECT_EQ(store.get("a"), nullptr);
  EXPECT_NE(store.get("b"), nullptr);
  now += 30s;
  EXPECT_EQ(store.get("b"), nullptr);
  EXPECT_EQ(store.size(), 0u);
  EXPECT_EQ(store.bytes(), 0u);
}

Json body() { return {{"model", "m"}, {"input", "Hi"}}; }

ApiError rejection(const Json& b, std::span<const ChatTurn> history = {}) {
  try {
    parse_responses_request(b, kTinyVocab, history);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << b.dump();
  return ApiError(0, "");
}

TEST(ResponsesRequest, EveryBadFieldIsNamed) {
  const std::vector<std::tuple<const char*, Json, const char*>> cases = {
      {"/input", kRemove, "input"},
      {"/input", 5, "input"},
      {"/input", Json::array(), "input"},
      {"/input", {{{"role", "robot"}, {"content", "x"}}}, "input[0].role"},
      {"/input", {{{"role", "user"}}}, "input[0].content"},
      {"/input", {{{"role", "user"}, {"content", {{{"type", "input_image"}}}}}}, "input[0].content[0].type"},
      {"/input", {{{"type", "function_call"}, {"call_id", "c1"}, {"name", "f"}, {"arguments", "[1]"}}}, "input[0].arguments"},
      {"/input", {{{"type", "function_call_output"}, {"call_id", "nope"}, {"output", "x"}}}, "input[0].call_id"},
      {"/input", {{{"type", "item_reference"}, {"id", "x"}}}, "input[0].type"},
      {"/instructions", 3, "instructions"},
      {"/max_output_tokens", 0, "max_output_tokens"},
      {"/temperature", 3, "temperature"},
      {"/n", 2, "n"},
      {"/store", "yes", "store"},
      {"/previous_response_id", 7, "previous_response_id"},
      {"/tools", {{{"type", "web_search"}}}, "tools[0].type"},
      {"/tools", {{{"type", "function"}, {"name", "a b"}}}, "tools[0].name"},
      {"/tool_choice", "auto", "tool_choice"},  // without tools
      {"/reasoning", {{"effort", "max"}}, "reasoning.effort"},
      {"/reasoning", {{"summary", "long"}}, "reasoning.summary"},
      {"/text", {{"format", {{"type", "json_schema"}}}}, "text.format.schema"},
      {"/text", {{"format", {{"type", "json_schema"}, {"schema", {{"pattern", "a+"}}}}}}, "text.format.schema.pattern"},
      {"/text", {{"format", {{"type", "yaml"}}}}, "text.format.type"},
      {"/background", true, "background"},
      {"/truncation", "middle", "truncation"},
  };
  for (const auto& [pointer, value, param] : cases) {
    Json b = body();
    const Json::json_pointer ptr(pointer);
    if (value.is_discarded()) b.erase(ptr.back());
    else b[ptr] = value;
    const ApiError e = rejection(b);
    EXPECT_EQ(e.status(), 400) << b.dump();
    EXPECT_EQ(e.param(), param) << b.dump() << " -> " << e.what();
    EXPECT_NE(std::string(e.what()).find(param), std::string::npos) << e.what();
  }
  // With one model served, `model` may be left out (prepare_generation checks a name given).
  Json no_model = body();
  no_model.erase("model");
  EXPECT_FALSE(parse_responses_request(no_model, kTinyVocab, {}).generation.model.has_value());
  // text.format holds the reply to a schema, as chat completions' response_format does; not
  // together with tools the model may call.
  Json b = body();
  b["text"] = {{"format", {{"type", "json_schema"}, {"name", "n"}, {"schema", {{"type", "object"}}}}}};
  EXPECT_NE(parse_responses_request(b, kTinyVocab, {}).generation.response_format, nullptr);
  b["text"] = {{"format", {{"type", "json_object"}}}};
  EXPECT_NE(parse_responses_request(b, kTinyVocab, {}).generation.response_format, nullptr);
  b["text"] = {{"format", {{"type", "text"}}}};
  EXPECT_EQ(parse_responses_request(b, kTinyVocab, {}).generation.response_format, nullptr);
  b["text"] = {{"format", {{"type", "json_object"}}}};
  b["tools"] = {{{"type", "function"}, {"name", "f"}, {"parameters", {{"type", "object"}}}}};
  EXPECT_EQ(rejection(b).param(), "text.format");
}

TEST(ResponsesRequest, InputItemsBecomeTurnsAfterInstructionsAndHistory) {
  const std::vector<ChatTurn> history = {{Role::kUser, "Weather?", {}, {}},
                                         {Role::kAssistant, "", {{"call_1", "weather", {{"city", "Paris"}}}}, {}}};
  Json b = body();
  b["instructions"] = "Be brief.";
  b["input"] = {{{"type", "function_call_output"}, {"call_id", "call_1"}, {"output", "sunny"}},
                {{"role", "user"}, {"content", {{{"type", "input_text"}, {"text", "And"}}, {{"type", "input_text"}, {"text", "Rome?"}}}}},
                {{"type", "reasoning"}, {"id", "rs_1"}, {"summary", Json::array()}},
                {{"type", "message"}, {"role", "assistant"}, {"content", {{{"type", "output_text"}, {"text", "Checking."}}}}},
                {{"type", "function_call"}, {"call_id", "call_2"}, {"name", "weather"}, {"arguments", R"({"city":"Rome"})"}},
                {{"type", "function_call"}, {"call_id", "call_3"}, {"name", "time"}, {"arguments", "{}"}},
                {{"type", "function_call_output"}, {"call_id", "call_3"}, {"output", "noon"}}};
  b["tools"] = {{{"type", "function"}, {"name", "weather"}, {"parameters", {{"type", "object"}}}, {"strict", true}}};
  b["tool_choice"] = {{"type", "function"}, {"name", "weather"}};
  b["max_output_tokens"] = 50;
  b["reasoning"] = {{"effort", "medium"}};
  b["store"] = false;
  const ResponsesRequest r = parse_responses_request(b, kTinyVocab, history);
  const auto& t = r.generation.turns;
  ASSERT_EQ(t.size(), 7u);
  EXPECT_EQ(t[0].role, Role::kSystem);
  EXPECT_EQ(t[0].text, "Be brief.");
  EXPECT_EQ(t[2].tool_calls.at(0).id, "call_1");
  EXPECT_EQ(t[3].role, Role::kTool);
  EXPECT_EQ(t[3].tool_name, "weather");
  EXPECT_EQ(t[3].text, "sunny");
  EXPECT_EQ(t[4].text, "And\nRome?");
  EXPECT_EQ(t[5].role, Role::kAssistant);  // the message and both calls after it: one turn
  EXPECT_EQ(t[5].text, "Checking.");
  ASSERT_EQ(t[5].tool_calls.size(), 2u);
  EXPECT_EQ(t[5].tool_calls[0].arguments, Json({{"city", "Rome"}}));
  EXPECT_EQ(t[6].tool_name, "time");
  EXPECT_EQ(r.input.size(), 4u);  // without the instructions or history
  EXPECT_EQ(r.generation.tool_choice.mode, ToolChoice::Mode::kNamed);
  EXPECT_EQ(r.generation.sampling.max_tokens, 50);
  EXPECT_EQ(r.generation.thinking, true);
  EXPECT_EQ(r.generation.thinking_field, "reasoning.effort");
  EXPECT_FALSE(r.store);
  EXPECT_EQ(r.echo["instructions"], "Be brief.");
  EXPECT_EQ(r.echo["max_output_tokens"], 50);
  EXPECT_EQ(r.echo["reasoning"]["effort"], "medium");
  EXPECT_EQ(r.echo["store"], false);
  EXPECT_EQ(r.echo["temperature"], 1.0);
  // A plain string is one user turn; store defaults to true.
  const ResponsesRequest plain = parse_responses_request(body(), kTinyVocab);
  ASSERT_EQ(plain.generation.turns.size(), 1u);
  EXPECT_EQ(plain.generation.turns[0].role, Role::kUser);
  EXPECT_TRUE(plain.store);
  EXPECT_EQ(previous_response_id_of({{"previous_response_id", "resp_1"}}), "resp_1");
}

using testing::tiny_tokenizer;

ReplyContext context(bool tools, bool thinking) {
  ReplyContext c;
  c.id = "resp_abc";
  c.model = "tiny";
  c.created = 1700000000;
  c.tokenizer = &tiny_tokenizer();
  c.prompt_tokens = {12};
  if (tools) c.tool_syntax = ToolSyntax::kGemma4;
  if (thinking) c.reasoning = tokenizer::ReasoningSyntax::kGemma4Channel;
  auto counter = std::make_shared<int>(0);
  c.make_tool_call_id = [counter] { return "call_" + std::to_string((*counter)++); };
  return c;
}

// Applies a Responses event stream to a snapshot as the openai SDK's
// ResponseStream does (lib/responses/ResponseStream.js), checking the
// grammar on the way: items open before their parts and deltas, deltas go
// to the open item, sequence numbers count up from 0.
Json replay(const std::string& raw) {
  Json snapshot;
  int64_t expect_sequence = 0;
  std::size_t pos = 0;
  std::string last;
  while (pos < raw.size()) {
    const std::size_t end = raw.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos);
    if (end == std::string::npos) break;
    const std::string block = raw.substr(pos, end - pos);
    pos = end + 2;
    EXPECT_TRUE(block.starts_with("event: ")) << block;
    const std::string name = block.substr(7, block.find('\n') - 7);
    const Json e = Json::parse(block.substr(block.find("\ndata: ") + 7));
    EXPECT_EQ(e["type"], name);
    EXPECT_EQ(e["sequence_number"], expect_sequence++);
    last = name;
    if (name == "response.created") {
      EXPECT_TRUE(snapshot.is_null());
      snapshot = e["response"];
      EXPECT_EQ(snapshot["status"], "in_progress");
      continue;
    }
    EXPECT_FALSE(snapshot.is_null()) << name << " before response.created";
    if (name == "response.output_item.added") {
      EXPECT_EQ(e["output_index"], snapshot["output"].size());
      snapshot["output"].push_back(e["item"]);
    } else if (name == "response.content_part.added") {
      snapshot["output"][e["output_index"].get<std::size_t>()]["content"].push_back(e["part"]);
    } else if (name == "response.output_text.delta" || name == "response.reasoning_text.delta") {
      Json& item = snapshot["output"][e["output_index"].get<std::size_t>()];
      EXPECT_EQ(item["id"], e["item_id"]);
      EXPECT_EQ(item["type"], name == "response.output_text.delta" ? "message" : "reasoning");
      Json& part = item["content"][e["content_index"].get<std::size_t>()];
      part["text"] = part["text"].get<std::string>() + e["delta"].get<std::string>();
    } else if (name == "response.function_call_arguments.delta") {
      Json& item = snapshot["output"][e["output_index"].get<std::size_t>()];
      EXPECT_EQ(item["type"], "function_call");
      item["arguments"] = item["arguments"].get<std::string>() + e["delta"].get<std::string>();
    } else if (name == "response.output_item.done") {
      Json& item = snapshot["output"][e["output_index"].get<std::size_t>()];
      item["status"] = e["item"]["status"];
      EXPECT_EQ(item, e["item"]) << "the item as its deltas built it";
    } else if (name == "response.completed" || name == "response.incomplete" || name == "response.failed") {
      EXPECT_EQ(pos, raw.size()) << name << " is the last event";
      Json final = e["response"];
      if (name != "response.failed") {
        EXPECT_EQ(final["output"], snapshot["output"]);
      }
      return final;
    }
  }
  ADD_FAILURE() << "no final event; last was " << last;
  return snapshot;
}

const char* kResponsesReplies[] = {
    "Plain words, é and 😀.",
    "<|channel>thought\nWeigh it.<channel|>The answer.",
    "<|channel>thought\nCall.<channel|>Let me check.<|tool_call>call:weather{city:<|\"|>Paris<|\"|>}<tool_call|>",
    "<|tool_call>call:a{x:1}<tool_call|><|tool_call>call:b{y:[true,null]}<tool_call|>",
    "<|channel>thought\nunfinished",
    "",
};

// The streamed events build, as the SDK reads them, the response the stream
// ends with; and that is the whole body, but for the calls' random ids.
TEST(ResponsesWriter, StreamBuildsTheBody) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 72; ++trial) {
    const std::string text = kResponsesReplies[trial % 6];
    const bool tools = trial % 2 == 0, thinking = trial % 3 != 2;
    const FinishReason finish = trial % 5 == 0 ? FinishReason::Length : FinishReason::Stop;
    RequestResult result;
    result.text = text;
    result.finish = finish;
    result.usage = {12, 7, 4};
    const Json echo = {{"instructions", nullptr}, {"store", true}};
    auto whole = make_responses_writer(context(tools, thinking), echo);
    const Json body = whole->body({&result});
    EXPECT_EQ(whole->response(), body);
    auto w = make_responses_writer(context(tools, thinking), echo);
    std::string raw = w->stream_start();
    for (std::size_t pos = 0; pos < text.size();) {
      std::size_t len = std::uniform_int_distribution<std::size_t>(0, 5)(rng);
      while (pos + len < text.size() && (static_cast<unsigned char>(text[pos + len]) & 0xC0) == 0x80) ++len;
      TokenEvent ev;
      ev.token = 300;
      ev.text = text.substr(pos, len);
      raw += w->stream_token(0, ev);
      pos += len;
    }
    raw += w->stream_finish(0, result) + w->stream_end();
    const Json final = replay(raw);
    EXPECT_EQ(final, w->response());
    EXPECT_EQ(final, body) << text;
    EXPECT_EQ(body["status"], finish == FinishReason::Length ? "incomplete" : "completed");
    EXPECT_EQ(body["usage"]["input_tokens_details"]["cached_tokens"], 4);
    EXPECT_EQ(body["object"], "response");
    EXPECT_EQ(body["id"], "resp_abc");
    // What the items hold: reasoning apart, the message's text, the calls.
    const ReplyParts parts = parse_reply(context(tools, thinking), text);
    std::string reasoning, message;
    std::vector<std::string> calls;
    for (const Json& item : body["output"]) {
      if (item["type"] == "reasoning") reasoning += item["content"][0]["text"].get<std::string>();
      if (item["type"] == "message") message += item["content"][0]["text"].get<std::string>();
      if (item["type"] == "function_call") calls.push_back(item["name"]);
    }
    EXPECT_EQ(reasoning, parts.reasoning);
    EXPECT_EQ(message, parts.content);
    EXPECT_EQ(calls.size(), parts.calls.size());
    EXPECT_GT(body["usage"]["output_tokens_details"]["reasoning_tokens"].get<int>(), parts.reasoning.empty() ? -1 : 0);
  }
}

TEST(ResponsesWriter, AFailedGenerationEndsTheStreamWithResponseFailed) {
  auto w = make_responses_writer(context(false, false), Json::object());
  RequestResult failed;
  failed.finish = FinishReason::Error;
  failed.error = "boom";
  TokenEvent ev;
  ev.text = "partial";
  std::string raw = w->stream_start();
  raw += w->stream_token(0, ev);
  raw += w->stream_finish(0, failed);
  const Json final = replay(raw);
  EXPECT_EQ(final["status"], "failed");
  EXPECT_EQ(final["error"]["code"], "server_error");
  EXPECT_NE(final["error"]["message"].get<std::string>().find("boom"), std::string::npos);
}

}  // namespace
}  // namespace rowlm::server
