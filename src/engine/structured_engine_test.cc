// Structured outputs inside the continuous batch, on the bundled model: a
// constrained request's output is bitwise the same alone and in any
// schedule (its mask depends on its own tokens only), its text is a
// complete JSON value of the schema (parsed here; validated against the
// schema by an independent validator in tests/server/structured.test.mjs),
// and greedy speculative decoding under a schema emits exactly what plain
// decoding does, for both drafters.

#include <gtest/gtest.h>

#include <random>

#include <nlohmann/json.hpp>

#include "constrain/grammar.h"
#include "engine/engine_test_util.h"
#include "engine/validate_request.h"
#include "tokenizer/tokenizer.h"

namespace rowlm {
namespace {

using namespace test;
using Json = nlohmann::json;

EngineOptions structured_options(const std::string& draft = "") {
  EngineOptions o = manual();
  o.threads = 1;
  o.draft = draft;
  return o;
}

// Bounded schemas, so every output completes within max_tokens.
const char* const kSchemas[] = {
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},"age":{"type":"integer"},
        "tags":{"type":"array","items":{"enum":["a","b","c"]},"maxItems":2}},"required":["name","age"],
        "additionalProperties":false})",
    R"({"type":"array","items":{"type":"object","properties":{"ok":{"type":"boolean"},"x":{"type":"number"}},
        "required":["ok"]},"minItems":1,"maxItems":1})",
    R"({"type":"object","properties":{"answer":{"type":["string","null"],"maxLength":8},
        "kind":{"const":"river"}},"required":["answer","kind"]})",
};

std::vector<Spec> structured_specs(std::mt19937& rng, int n, float temperature) {
  std::vector<Spec> out;
  for (int i = 0; i < n; ++i) {
    Spec s{std::string(kPrompts[rng() % std::size(kPrompts)]) + " {", temperature, rng(), 160, int(rng() % 8), {}};
    s.logprobs = 1;
    s.response_format = constrain::Grammar::from_schema(Json::parse(kSchemas[std::size_t(i) % std::size(kSchemas)]));
    out.push_back(s);
  }
  return out;
}

void expect_json_values(const std::vector<RequestResult>& results) {
  for (const RequestResult& r : results) {
    EXPECT_EQ(r.finish, FinishReason::Stop) << r.text;
    EXPECT_TRUE(Json::accept(r.text)) << r.text;
  }
}

TEST(StructuredOutputs, SameBitsAloneAndInAnySchedule) {
  std::mt19937 rng(31);
  const std::vector<Spec> specs = structured_specs(rng, 4, 1.0f);
  const std::vector<RequestResult> alone = solo(structured_options(), specs);
  expect_json_values(alone);
  EngineOptions opt = structured_options();
  opt.max_running = 4;
  opt.token_budget = 24;
  const std::vector<RequestResult> batched = run_schedule(opt, specs);
  for (std::size_t i = 0; i < specs.size(); ++i) expect_same(batched[i], alone[i], "request " + std::to_string(i));
}

TEST(StructuredOutputs, GreedySpeculationEmitsWhatPlainDecodingDoes) {
  std::mt19937 rng(32);
  const std::vector<Spec> specs = structured_specs(rng, 2, 0.0f);
  const std::vector<RequestResult> plain = run_schedule(structured_options(), specs);
  expect_json_values(plain);
  for (const std::string& drafter : std::vector<std::string>{"ngram", draft_model_dir()}) {
    EngineOptions opt = structured_options(drafter);
    opt.draft_tokens = 3;
    const std::vector<RequestResult> got = run_schedule(opt, specs);
    int64_t proposed = 0;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      expect_same(got[i], plain[i], drafter + " request " + std::to_string(i));
      proposed += got[i].draft_proposed;
    }
    EXPECT_GT(proposed, 0) << drafter;
  }
}

// Strict tool calls (constrain/json_constraint.h's call mode) in Gemma 4's
// syntax: the bundled model never learned to call tools, so half the
// requests start inside a call (tool_choice's forced "<|tool_call>call:"),
// the others get a logit bias on the opening token, which makes it open
// call after call, each held to the grammar from its first byte and closed.
// That the calls parse into valid arguments is checked through the server
// (its call parser and ajv, tests/server/structured.test.mjs); here: the
// same bits alone and batched, and speculation equal to plain decoding.
std::vector<Spec> tool_call_specs(std::mt19937& rng, int n, float temperature) {
  const Tokenizer tok = Tokenizer::load(model_dir());
  const Json weather = Json::parse(kSchemas[0]);
  const Json list = Json::parse(R"({"type":"object","properties":{"items":{"type":"array","items":
      {"type":"string","maxLength":5},"maxItems":3},"note":{"type":"string","maxLength":8}},"required":["items"]})");
  const constrain::Grammar::CallSchema calls[] = {{"call:weather", &weather, "tools[0]"}, {"call:list", &list, "tools[1]"}};
  auto grammar = constrain::Grammar::for_tool_calls(calls, {constrain::Syntax::kGemma4});
  const int32_t open = *tok.token_to_id("<|tool_call>");
  std::vector<Spec> out;
  for (int i = 0; i < n; ++i) {
    auto rules = std::make_shared<constrain::ToolCallRules>();
    rules->grammar = grammar;
    rules->open = "<|tool_call>";
    rules->close = "<tool_call|>";
    Spec s{std::string(kPrompts[rng() % std::size(kPrompts)]), temperature, rng(), 80, int(rng() % 8), {}};
    s.logprobs = 1;
    if (i % 2 == 0) {
      s.prompt += "<|tool_call>call:";
      rules->forced = tok.encode("<|tool_call>call:", /*add_special_tokens=*/false);
    } else {
      s.logit_bias = {{open, 40.0f}};
    }
    s.tool_calls = rules;
    out.push_back(s);
  }
  return out;
}

// Calls opened and closed in the output (the forced one's opener is in the prompt).
int closed_calls(const RequestResult& r) {
  int n = 0;
  for (std::size_t k = 0; (k = r.text.find("<tool_call|>", k)) != std::string::npos; ++k) ++n;
  return n;
}

TEST(StrictToolCalls, SameBitsAloneAndInAnySchedule) {
  std::mt19937 rng(41);
  const std::vector<Spec> specs = tool_call_specs(rng, 4, 1.0f);
  const std::vector<RequestResult> alone = solo(structured_options(), specs);
  for (const RequestResult& r : alone) EXPECT_GT(closed_calls(r), 0) << r.text;
  EngineOptions opt = structured_options();
  opt.max_running = 4;
  opt.token_budget = 24;
  const std::vector<RequestResult> batched = run_schedule(opt, specs);
  for (std::size_t i = 0; i < specs.size(); ++i) expect_same(batched[i], alone[i], "request " + std::to_string(i));
}

TEST(StrictToolCalls, GreedySpeculationEmitsWhatPlainDecodingDoes) {
  std::mt19937 rng(42);
  const std::vector<Spec> specs = tool_call_specs(rng, 2, 0.0f);
  const std::vector<RequestResult> plain = run_schedule(structured_options(), specs);
  for (const RequestResult& r : plain) EXPECT_GT(closed_calls(r), 0) << r.text;
  EngineOptions opt = structured_options("ngram");
  opt.draft_tokens = 3;
  const std::vector<RequestResult> got = run_schedule(opt, specs);
  int64_t proposed = 0;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    expect_same(got[i], plain[i], "request " + std::to_string(i));
    proposed += got[i].draft_proposed;
  }
  EXPECT_GT(proposed, 0);
}

TEST(StructuredOutputs, RefusedWithoutATokenizerNamingTheField) {
  Request r;
  r.prompt_ids = {2, 10};
  r.response_format = constrain::Grammar::any_object();
  try {
    (void)engine::validate_request(r, {8192, 4096, nullptr});
    ADD_FAILURE() << "accepted";
  } catch (const InvalidRequest& e) {
    EXPECT_EQ(e.field(), "response_format");
  }
}

}  // namespace
}  // namespace rowlm
