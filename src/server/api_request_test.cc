#include "server/api_request.h"
#include "server/response_format.h"

#include <gtest/gtest.h>

#include "constrain/json_constraint.h"
#include "server/api_error.h"
#include "server/prepare.h"
#include "server/responses_request.h"
#include "server/server_test_util.h"

namespace rowlm::server {
namespace {

using Json = nlohmann::json;
using testing::kRemove;
using testing::kTinyVocab;

Json chat_body() { return {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}}; }
Json completion_body() { return {{"model", "m"}, {"prompt", "In the beginning"}}; }
Json messages_body() {
  return {{"model", "m"}, {"max_tokens", 16}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
}

using Parser = GenerationRequest (*)(const Json&, int64_t);

// The 400 a body gets; fails the test if it parses.
ApiError rejection(Parser parse, const Json& body) {
  try {
    parse(body, kTinyVocab);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body.dump();
  return ApiError(0, "");
}

struct BadField {
  const char* pointer;  // JSON pointer of the value to set (or remove, with a null value)
  Json value;
  const char* param;    // the field the error must name
};

void expect_rejections(Parser parse, const Json& base, const std::vector<BadField>& cases) {
  for (const BadField& c : cases) {
    Json body = base;
    const Json::json_pointer ptr(c.pointer);
    if (c.value.is_discarded()) body.at(ptr.parent_pointer()).erase(ptr.back());
    else body[ptr] = c.value;
    const ApiError e = rejection(parse, body);
    EXPECT_EQ(e.status(), 400) << body.dump();
    EXPECT_EQ(e.param(), c.param) << body.dump() << " -> " << e.what();
    // The message names the field too (Anthropic's error shape has no param).
    EXPECT_NE(std::string(e.what()).find(c.param), std::string::npos) << e.what();
  }
}


// `model` may be left out (the one served model serves it) or null; given, it
// is kept as written for prepare_generation to check.
TEST(GenerationRequests, ModelIsOptional) {
  for (Parser parse : {parse_chat_completion_request, parse_completion_request, parse_messages_request}) {
    const Json base = parse == parse_chat_completion_request ? chat_body()
                      : parse == parse_completion_request    ? completion_body()
                                                             : messages_body();
    EXPECT_EQ(parse(base, kTinyVocab).model, std::optional<std::string>("m"));
    Json body = base;
    body.erase("model");
    EXPECT_EQ(parse(body, kTinyVocab).model, std::nullopt);
    body["model"] = nullptr;
    EXPECT_EQ(parse(body, kTinyVocab).model, std::nullopt);
    body["model"] = "";
    EXPECT_EQ(parse(body, kTinyVocab).model, std::optional<std::string>(""));  // a wrong name, not an absent one
  }
}

TEST(ChatCompletionRequest, EveryBadFieldIsNamed) {
  expect_rejections(parse_chat_completion_request, chat_body(), {
      {"/model", 3, "model"},
      {"/messages", kRemove, "messages"},
      {"/messages", Json::array(), "messages"},
      {"/messages", "hi", "messages"},
      {"/messages/0", "hi", "messages[0]"},
      {"/messages/0/role", "robot", "messages[0].role"},
      {"/messages/0/role", kRemove, "messages[0].role"},
      {"/messages/0/content", kRemove, "messages[0].content"},
      {"/messages/0/content", 5, "messages[0].content"},
      {"/messages/0/content", {{{"type", "image_url"}, {"image_url", {{"url", "x"}}}}}, "messages[0].content[0].type"},
      {"/messages/0/content", {{{"type", "text"}}}, "messages[0].content[0].text"},
      {"/reasoning_effort", "extreme", "reasoning_effort"},
      {"/reasoning_effort", 3, "reasoning_effort"},
      {"/chat_template_kwargs", "x", "chat_template_kwargs"},
      {"/chat_template_kwargs", {{"enable_thinking", "yes"}}, "chat_template_kwargs.enable_thinking"},
      {"/temperature", "hot", "temperature"},
      {"/temperature", -0.5, "temperature"},
      {"/temperature", 2.5, "temperature"},
      {"/top_p", 0, "top_p"},
      {"/top_p", 1.5, "top_p"},
      {"/top_k", -2, "top_k"},
      {"/top_k", 2.5, "top_k"},
      {"/min_p", 2, "min_p"},
      {"/presence_penalty", 3, "presence_penalty"},
      {"/frequency_penalty", -3, "frequency_penalty"},
      {"/max_tokens", 0, "max_tokens"},
      {"/max_tokens", "10", "max_tokens"},
      {"/max_completion_tokens", -1, "max_completion_tokens"},
      {"/n", 0, "n"},
      {"/n", 65, "n"},
      {"/seed", 1.5, "seed"},
      {"/seed", true, "seed"},
      {"/stop", 5, "stop"},
      {"/stop", "", "stop"},
      {"/stop", {"a", 1}, "stop[1]"},
      {"/stop", Json::array({"1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16", "17"}), "stop"},
      {"/logit_bias", {{"abc", 1}}, "logit_bias.abc"},
      {"/logit_bias", {{"99999", 1}}, "logit_bias.99999"},
      {"/logit_bias", {{"5", 101}}, "logit_bias.5"},
      {"/logit_bias", 3, "logit_bias"},
      {"/logprobs", "yes", "logprobs"},
      {"/top_logprobs", 3, "top_logprobs"},  // without logprobs
      {"/stream", "true", "stream"},
      {"/stream_options", {{"include_usage", true}}, "stream_options"},  // without stream
      {"/tools", {{{"type", "function"}}}, "tools[0].function"},
      {"/tools", {{{"type", "retrieval"}}}, "tools[0].type"},
      {"/tools", {{{"type", "function"}, {"function", {{"name", "bad name"}}}}}, "tools[0].function.name"},
      {"/tool_choice", "sometimes", "tool_choice"},
      {"/tool_choice", "auto", "tool_choice"},  // without tools
      {"/response_format", {{"type", "yaml"}}, "response_format.type"},
      {"/response_format", {{"type", "json_schema"}}, "response_format.json_schema"},
      {"/response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}}}}, "response_format.json_schema.schema"},
      {"/response_format",
       Json::parse(R"({"type": "json_schema", "json_schema": {"schema": {"properties": {"a": {"format": "date"}}}}})"),
       "response_format.json_schema.schema.properties.a.format"},
      {"/response_format", Json::parse(R"({"type": "json_schema", "json_schema": {"schema": {"minLength": -1}}})"),
       "response_format.json_schema.schema.minLength"},
      {"/functions", Json::array({Json::object()}), "functions"},
      {"/best_of", 3, "best_of"},
      {"/stop_token_ids", {1, 8192}, "stop_token_ids[1]"},
  });
  // Tool call history: ids must link, arguments must be JSON objects.
  Json with_call = chat_body();
  with_call["messages"].push_back({{"role", "assistant"},
                                   {"content", nullptr},
                                   {"tool_calls",
                                    {{{"id", "c1"}, {"type", "function"},
                                      {"function", {{"name", "f"}, {"arguments", "{\"x\": 1}"}}}}}}});
  with_call["messages"].push_back({{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "2"}});
  EXPECT_NO_THROW(parse_chat_completion_request(with_call, kTinyVocab));
  expect_rejections(parse_chat_completion_request, with_call, {
      {"/messages/2/tool_call_id", "c2", "messages[2].tool_call_id"},
      {"/messages/1/tool_calls/0/function/arguments", "[1]", "messages[1].tool_calls[0].function.arguments"},
      {"/messages/1/tool_calls/0/function/arguments", "{", "messages[1].tool_calls[0].function.arguments"},
      {"/messages/1/tool_calls/0/id", kRemove, "messages[1].tool_calls[0].id"},
  });
}

TEST(ChatCompletionRequest, ResponseFormatBecomesTheGrammar) {
  Json body = chat_body();
  EXPECT_EQ(parse_chat_completion_request(body, kTinyVocab).response_format, nullptr);
  body["response_format"] = {{"type", "text"}};
  EXPECT_EQ(parse_chat_completion_request(body, kTinyVocab).response_format, nullptr);
  body["response_format"] = {{"type", "json_object"}};
  auto any = parse_chat_completion_request(body, kTinyVocab).response_format;
  ASSERT_NE(any, nullptr);
  EXPECT_EQ(any->root(), constrain::Grammar::kAnyObject);
  body["response_format"] = {{"type", "json_schema"},
                             {"json_schema", {{"name", "n"}, {"strict", true}, {"schema", {{"type", "integer"}}}}}};
  auto schema = parse_chat_completion_request(body, kTinyVocab).response_format;
  ASSERT_NE(schema, nullptr);
  EXPECT_EQ(schema->node(schema->root()).kind, constrain::NodeKind::Integer);
  // Responses' text.format shape: the schema beside "type".
  EXPECT_NE(parse_response_format({{"type", "json_schema"}, {"name", "n"}, {"schema", {{"type", "string"}}}}, "text.format"),
            nullptr);
  // A reply held to a schema cannot call tools.
  body["tools"] = {{{"type", "function"}, {"function", {{"name", "f"}}}}};
  EXPECT_EQ(rejection(parse_chat_completion_request, body).param(), "response_format");
  body["tool_choice"] = "none";
  EXPECT_NE(parse_chat_completion_request(body, kTinyVocab).response_format, nullptr);
}

TEST(ChatCompletionRequest, ParsesWhatItAccepts) {
  Json body = chat_body();
  body["messages"] = {{{"role", "developer"}, {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}},
                      {{"role", "user"}, {"content", "Hi"}}};
  body.update({{"temperature", 0}, {"top_p", 0.5}, {"top_k", 40}, {"min_p", 0.1}, {"seed", -3}, {"n", 3},
               {"max_tokens", 7}, {"max_completion_tokens", 9}, {"stop", "END"}, {"logit_bias", {{"17", -100}}},
               {"logprobs", true}, {"top_logprobs", 5}, {"stream", true},
               {"stream_options", {{"include_usage", true}}}, {"user", "ignored"}, {"store", false},
               {"tools", {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", {{"type", "object"}}}}}}}},
               {"tool_choice", {{"type", "function"}, {"function", {{"name", "f"}}}}}});
  const GenerationRequest r = parse_chat_completion_request(body, kTinyVocab);
  EXPECT_TRUE(r.chat);
  ASSERT_EQ(r.turns.size(), 2u);
  EXPECT_EQ(r.turns[0].role, ChatTurn::Role::kSystem);
  EXPECT_EQ(r.turns[0].text, "a\nb");
  EXPECT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_EQ(r.sampling.seed, uint64_t(int64_t(-3)));
  EXPECT_EQ(r.n, 3);
  EXPECT_EQ(r.sampling.max_tokens, 9);  // max_completion_tokens wins
  EXPECT_EQ(r.sampling.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r.sampling.logit_bias.at(17), -100.0f);
  EXPECT_EQ(r.sampling.logprobs, 5);
  EXPECT_TRUE(r.stream && r.include_usage);
  ASSERT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.tool_choice.mode, ToolChoice::Mode::kNamed);
  EXPECT_EQ(r.tool_choice.name, "f");
  EXPECT_FALSE(r.sampling.max_tokens == std::nullopt);
  EXPECT_EQ(parse_chat_completion_request(chat_body(), kTinyVocab).sampling.max_tokens, std::nullopt);
}

// Thinking: absent means the template's default; reasoning_effort none is
// off, any other effort on; chat_template_kwargs.enable_thinking wins.
TEST(ChatCompletionRequest, ThinkingSwitches) {
  EXPECT_EQ(parse_chat_completion_request(chat_body(), kTinyVocab).thinking, std::nullopt);
  Json body = chat_body();
  body["reasoning_effort"] = "low";
  EXPECT_EQ(parse_chat_completion_request(body, kTinyVocab).thinking, true);
  body["reasoning_effort"] = "none";
  EXPECT_EQ(parse_chat_completion_request(body, kTinyVocab).thinking, false);
  body["chat_template_kwargs"] = {{"enable_thinking", true}, {"other", 1}};
  const GenerationRequest r = parse_chat_completion_request(body, kTinyVocab);
  EXPECT_EQ(r.thinking, true);
  EXPECT_EQ(r.thinking_field, "chat_template_kwargs.enable_thinking");
  EXPECT_EQ(r.thinking_budget, std::nullopt);
}

TEST(MessagesRequest, ThinkingWithABudget) {
  Json body = messages_body();
  body["max_tokens"] = 2048;
  body["thinking"] = {{"type", "enabled"}, {"budget_tokens", 1024}};
  GenerationRequest r = parse_messages_request(body, kTinyVocab);
  EXPECT_EQ(r.thinking, true);
  EXPECT_EQ(r.thinking_budget, 1024);
  body["thinking"] = {{"type", "disabled"}};
  r = parse_messages_request(body, kTinyVocab);
  EXPECT_EQ(r.thinking, false);
  EXPECT_EQ(r.thinking_budget, std::nullopt);
}

TEST(CompletionRequest, EveryBadFieldIsNamed) {
  expect_rejections(parse_completion_request, completion_body(), {
      {"/prompt", kRemove, "prompt"},
      {"/prompt", 5, "prompt"},
      {"/prompt", Json::array(), "prompt"},
      {"/prompt", {1, -1}, "prompt[1]"},
      {"/prompt", {1, 8192}, "prompt[1]"},
      {"/prompt", {"a", 3}, "prompt[1]"},
      {"/prompt", {{1, 2}, Json::array()}, "prompt[1]"},
      {"/logprobs", 21, "logprobs"},
      {"/logprobs", true, "logprobs"},
      {"/suffix", "tail", "suffix"},
      {"/echo", 1, "echo"},
  });
  Json many = completion_body();
  many["prompt"] = {"a", "b", "c"};
  many["n"] = 22;
  EXPECT_EQ(rejection(parse_completion_request, many).param(), "n");
  Json echo = completion_body();
  echo["echo"] = true;
  echo["logprobs"] = 2;
  EXPECT_EQ(rejection(parse_completion_request, echo).param(), "echo");
}

TEST(CompletionRequest, PromptShapes) {
  Json body = completion_body();
  EXPECT_EQ(parse_completion_request(body, kTinyVocab).sampling.max_tokens, 16);  // OpenAI's default
  body["prompt"] = {5, 6, 7};
  auto r = parse_completion_request(body, kTinyVocab);
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].ids, (std::vector<int32_t>{5, 6, 7}));
  body["prompt"] = {{5}, "text", {6, 7}};
  r = parse_completion_request(body, kTinyVocab);
  ASSERT_EQ(r.prompts.size(), 3u);
  EXPECT_EQ(r.prompts[1].text, "text");
  EXPECT_EQ(r.prompts[2].ids, (std::vector<int32_t>{6, 7}));
}

TEST(MessagesRequest, EveryBadFieldIsNamed) {
  expect_rejections(parse_messages_request, messages_body(), {
      {"/max_tokens", kRemove, "max_tokens"},
      {"/max_tokens", 0, "max_tokens"},
      {"/model", 3, "model"},
      {"/messages", kRemove, "messages"},
      {"/messages/0/role", "system", "messages[0].role"},
      {"/messages/0/content", {{{"type", "image"}, {"source", Json::object()}}}, "messages[0].content[0].type"},
      {"/messages/0/content", {{{"type", "tool_result"}, {"tool_use_id", "nope"}}}, "messages[0].content[0].tool_use_id"},
      {"/temperature", 1.5, "temperature"},
      {"/top_k", -1, "top_k"},
      {"/stop_sequences", "END", "stop_sequences"},
      {"/stop_sequences", {""}, "stop_sequences[0]"},
      {"/stop_sequences", Json(std::vector<std::string>(17, "x")), "stop_sequences"},
      {"/system", 5, "system"},
      {"/system", {{{"type", "image"}}}, "system[0].type"},
      {"/thinking", {{"type", "enabled"}, {"budget_tokens", 1024}}, "thinking.budget_tokens"},  // >= max_tokens
      {"/thinking", {{"type", "enabled"}}, "thinking.budget_tokens"},
      {"/thinking", {{"type", "enabled"}, {"budget_tokens", 0}}, "thinking.budget_tokens"},
      {"/thinking", {{"type", "sometimes"}}, "thinking.type"},
      {"/tools", {{{"name", "f"}}}, "tools[0].input_schema"},
      {"/tools", {{{"type", "bash_20250124"}, {"name", "bash"}}}, "tools[0].type"},
      {"/tool_choice", {{"type", "auto"}}, "tool_choice"},  // without tools
      {"/stream", 1, "stream"},
  });
}

TEST(MessagesRequest, ToolUseAndResultsBecomeTurns) {
  Json body = messages_body();
  body["system"] = {{{"type", "text"}, {"text", "Be brief."}}};
  body["messages"] = {
      {{"role", "user"}, {"content", "Weather in Paris?"}},
      {{"role", "assistant"},
       {"content", {{{"type", "text"}, {"text", "Checking."}},
                    {{"type", "tool_use"}, {"id", "toolu_1"}, {"name", "weather"}, {"input", {{"city", "Paris"}}}}}}},
      {{"role", "user"},
       {"content", {{{"type", "tool_result"}, {"tool_use_id", "toolu_1"}, {"content", "sunny"}},
                    {{"type", "text"}, {"text", "And tomorrow?"}}}}}};
  body["tools"] = {{{"name", "weather"}, {"input_schema", {{"type", "object"}}}}};
  body["tool_choice"] = {{"type", "any"}};
  body["stop_sequences"] = {"END"};
  const GenerationRequest r = parse_messages_request(body, kTinyVocab);
  ASSERT_EQ(r.turns.size(), 5u);
  EXPECT_EQ(r.turns[0].role, ChatTurn::Role::kSystem);
  EXPECT_EQ(r.turns[2].tool_calls.at(0).arguments, Json::parse(R"({"city":"Paris"})"));
  EXPECT_EQ(r.turns[3].role, ChatTurn::Role::kTool);
  EXPECT_EQ(r.turns[3].tool_name, "weather");
  EXPECT_EQ(r.turns[4].text, "And tomorrow?");
  EXPECT_EQ(r.tool_choice.mode, ToolChoice::Mode::kRequired);
  EXPECT_EQ(r.sampling.max_tokens, 16);
  EXPECT_EQ(r.sampling.stop, std::vector<std::string>{"END"});
}

TEST(Requests, DeepNestingIsRefusedWithoutRecursion) {
  // Parsed from text, as the server receives it (the parser does not recurse;
  // building it here by nesting values would).
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (Parser p : {parse_chat_completion_request, parse_completion_request, parse_messages_request}) {
    Json body = p == parse_messages_request ? messages_body() : p == parse_completion_request ? completion_body() : chat_body();
    std::string text = body.dump();
    text.insert(text.size() - 1, ",\"metadata\":" + deep);
    EXPECT_EQ(rejection(p, Json::parse(text)).param(), "body");
  }
  Json bias = chat_body();
  bias["logit_bias"] = {{"5", Json::array({Json::array()})}};
  EXPECT_NE(std::string(rejection(parse_chat_completion_request, bias).what()).find("got array"), std::string::npos);
  std::string args = "{\"a\":";
  for (int i = 0; i < 200; ++i) args += "[";
  for (int i = 0; i < 200; ++i) args += "]";
  args += "}";
  Json call = chat_body();
  call["messages"].push_back({{"role", "assistant"},
                              {"tool_calls", {{{"id", "c"}, {"type", "function"}, {"function", {{"name", "f"}, {"arguments", args}}}}}}});
  EXPECT_EQ(rejection(parse_chat_completion_request, call).param(), "messages[1].tool_calls[0].function.arguments");
}

TEST(Requests, TheBodyMustBeAnObject) {
  for (Parser p : {parse_chat_completion_request, parse_completion_request, parse_messages_request}) {
    EXPECT_EQ(rejection(p, Json::array()).param(), "body");
    EXPECT_EQ(rejection(p, "text").param(), "body");
  }
}

// Strict tools reach the engine as rules for its constraint; a schema it
// cannot honour is a 400 naming the field in each API's own terms.
TEST(StrictTools, BecomeToolCallRulesOrA400NamingTheSchemaField) {
  static const Tokenizer tok = Tokenizer::load(std::string(ROWLM_SOURCE_DIR) + "/models/rowlm-tiny");
  static const tokenizer::ChatFormat gemma = tokenizer::ChatFormat::by_name("gemma4");
  const ServedModel model{"m", &tok, &gemma, 4096, int(kTinyVocab), 0};
  const Json weather = {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}, {"required", {"city"}}};
  const Json bad = {{"type", "object"}, {"properties", {{"when", {{"type", "string"}, {"format", "date"}}}}}};
  auto chat = [&](const Json& params, const Json& strict, const Json& choice) {
    Json b = chat_body();
    b["tools"] = {{{"type", "function"}, {"function", {{"name", "weather"}, {"parameters", params}, {"strict", strict}}}}};
    if (!choice.is_null()) b["tool_choice"] = choice;
    return prepare_generation(parse_chat_completion_request(b, kTinyVocab), model);
  };
  auto param_of = [](auto&& f) {
    try {
      f();
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      return e.param();
    }
    return std::string("accepted");
  };
  EXPECT_EQ(chat(weather, false, nullptr).requests[0].tool_calls, nullptr);
  EXPECT_EQ(chat(weather, nullptr, nullptr).requests[0].tool_calls, nullptr);  // chat completions: not strict by default
  const auto rules = chat(weather, true, nullptr).requests[0].tool_calls;
  ASSERT_NE(rules, nullptr);
  EXPECT_EQ(rules->open, "<|tool_call>");
  EXPECT_TRUE(rules->forced.empty());
  // tool_choice required: the prompt opens the call, the constraint starts inside it.
  const auto required = chat(weather, true, "required").requests[0].tool_calls;
  EXPECT_EQ(tok.decode(required->forced, /*skip_special_tokens=*/false), "<|tool_call>call:");
  EXPECT_EQ(chat(weather, true, "none").requests[0].tool_calls, nullptr);
  EXPECT_EQ(param_of([&] { chat(bad, true, nullptr); }), "tools[0].function.parameters.properties.when.format");
  EXPECT_EQ(param_of([&] { chat(bad, false, nullptr); }), "accepted");  // not strict: the schema is only declared
  // Responses: strict unless false (OpenAI's default), held where it can be when not asked for;
  // Anthropic: tools[].strict, input_schema.
  Json r = {{"input", "Weather?"}, {"tools", {{{"type", "function"}, {"name", "weather"}, {"parameters", weather}}}}};
  auto responses = [&] { return prepare_generation(parse_responses_request(r, kTinyVocab, {}).generation, model); };
  EXPECT_NE(responses().requests[0].tool_calls, nullptr);
  r["tools"][0]["parameters"] = bad;
  EXPECT_EQ(responses().requests[0].tool_calls, nullptr);  // strict by default only: not held, not refused
  r["tools"][0]["strict"] = true;
  EXPECT_EQ(param_of(responses), "tools[0].parameters.properties.when.format");
  r["tools"][0]["strict"] = false;
  EXPECT_EQ(responses().requests[0].tool_calls, nullptr);
  static const tokenizer::ChatFormat chatml = tokenizer::ChatFormat::by_name("chatml");
  const ServedModel qwen{"m", &tok, &chatml, 4096, int(kTinyVocab), 0};
  r["tools"][0]["parameters"] = weather;
  r["tools"][0].erase("strict");
  EXPECT_EQ(prepare_generation(parse_responses_request(r, kTinyVocab, {}).generation, qwen).requests[0].tool_calls, nullptr);
  r["tools"][0]["strict"] = true;  // asked for, and ChatML's calls cannot be held yet
  EXPECT_EQ(param_of([&] { prepare_generation(parse_responses_request(r, kTinyVocab, {}).generation, qwen); }),
            "tools[0].strict");
  Json m = messages_body();
  m["tools"] = {{{"name", "weather"}, {"input_schema", bad}, {"strict", true}}};
  EXPECT_EQ(param_of([&] { prepare_generation(parse_messages_request(m, kTinyVocab), model); }),
            "tools[0].input_schema.properties.when.format");
  m["tools"][0]["input_schema"] = weather;
  EXPECT_NE(prepare_generation(parse_messages_request(m, kTinyVocab), model).requests[0].tool_calls, nullptr);
}

}  // namespace
}  // namespace rowlm::server
