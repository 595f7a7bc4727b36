// The schema compiler, the byte automaton (against hand-checked JSON texts),
// the mask walk (against testing every token on its own) and the per-request
// constraint. End-to-end validation with an independent JSON Schema
// validator (ajv) is tests/server/structured.test.mjs.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "constrain/automaton.h"
#include "constrain/grammar.h"
#include "constrain/json_constraint.h"
#include "constrain/token_masks.h"

namespace rowlm::constrain {
namespace {

using Json = nlohmann::json;

bool accepts(const Grammar& g, std::string_view text) {
  Automaton a(g);
  State s = a.initial();
  return a.feed(s, text) && a.can_finish(s);
}

const char* kPerson = R"({"type": "object", "additionalProperties": false,
  "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 3},
                 "age": {"type": "integer", "minimum": -10, "exclusiveMaximum": 151}, "tags": {"type": "array", "items": {"enum": ["a", "b", 7]}, "maxItems": 2},
                 "ok": {"type": ["boolean", "null"]}, "x": {"type": "number"}},
  "required": ["name"]})";

TEST(Automaton, AcceptsValidTextsOfTheSchema) {
  auto g = Grammar::from_schema(Json::parse(kPerson));
  for (const char* text : {R"({"name":"abc"})", R"({"age":-3, "name":"é€😀"})", R"({ "name" : "a" , "tags":[] })",
                           R"({"name":"\n\"\u00e9","tags":["a",7],"ok":null})", R"({"ok":true,"name":"x","x":-0.5e+10})",
                           "{\n  \"name\": \"q\"\n}", R"({"name":"a","x":0})", R"({"name":"a","x":12.25E3})"})
    EXPECT_TRUE(accepts(*g, text)) << text;
}

TEST(Automaton, RejectsInvalidTexts) {
  auto g = Grammar::from_schema(Json::parse(kPerson));
  for (const char* text : {
           R"({"age":1})",                        // required name missing
           R"({"name":""})",                      // minLength
           R"({"name":"abcd"})",                  // maxLength (code points)
           R"({"name":"a","name":"b"})",          // duplicate key
           R"({"name":"a","other":1})",           // not a property
           R"({"name":"a","age":1.5})",           // integer
           R"({"name":"a","age":01})",            // leading zero
           R"({"name":"a","age":151})",           // exclusiveMaximum
           R"({"name":"a","age":-11})",           // minimum
           R"({"name":"a","age":1000})",          // no prefix of it fits either
           R"({"name":"a","tags":["c"]})",        // enum
           R"({"name":"a","tags":["a","b",7]})",  // maxItems
           R"({"name":"a","ok":"yes"})",          // type list
           R"({"name":"\ud83d"})",                // surrogate escape
           "{\"name\":\"a\x01\"}",                // control character
           "{\"name\":\"\xc3\"}",                 // truncated UTF-8
           "{\"name\":\"\xed\xa0\x80\"}",         // UTF-8 surrogate
           R"({"name":"a",})",                    // trailing comma
           R"( {"name":"a"})",                    // leading whitespace at the top
           R"({"name":"a"} )",                    // anything after the value
           "{\"name\":      \"a\"}",              // whitespace run over kMaxWhitespace
           R"({"name":"a","x":1.})",              // fraction without digits
           R"({"name":"a","x":1234567890123456})" // more integer digits than kMaxIntegerDigits
       })
    EXPECT_FALSE(accepts(*g, text)) << text;
}

TEST(Automaton, AnyObjectTakesAnyJsonObjectButNothingElse) {
  auto g = Grammar::any_object();
  EXPECT_TRUE(accepts(*g, R"({"a":[1,{"b":null},"x",true,-2.5e3],"":{}})"));
  EXPECT_TRUE(accepts(*g, "{}"));
  EXPECT_FALSE(accepts(*g, "[1]"));
  EXPECT_FALSE(accepts(*g, R"("x")"));
  EXPECT_FALSE(accepts(*g, R"({"a":tru})"));
  EXPECT_FALSE(accepts(*g, R"({"a" 1})"));
}

TEST(Automaton, TopLevelNumbersAndLiteralsMayEndOrGoOn) {
  auto g = Grammar::from_schema(Json::parse(R"({"enum": [1, 12, 1.5]})"));
  Automaton a(*g);
  State s = a.initial();
  ASSERT_TRUE(a.feed(s, "1"));
  EXPECT_TRUE(a.can_finish(s));
  EXPECT_FALSE(a.finished(s));  // 12 and 1.5 still possible
  State t = s;
  EXPECT_TRUE(a.feed(t, "2") && a.finished(t));
  EXPECT_FALSE(a.feed(s, "3"));
  EXPECT_TRUE(accepts(*Grammar::from_schema(Json::parse(R"({"type":"integer"})")), "-42"));
}

TEST(Automaton, IntegerBoundsHoldForEveryValueWritten) {
  auto g = Grammar::from_schema(Json::parse(R"({"type":"integer","minimum":-5,"maximum":120})"));
  for (int v = -200; v <= 1300; ++v) EXPECT_EQ(accepts(*g, std::to_string(v)), v >= -5 && v <= 120) << v;
  EXPECT_TRUE(accepts(*g, "-0"));
  auto positive = Grammar::from_schema(Json::parse(R"({"type":"integer","exclusiveMinimum":0})"));
  EXPECT_FALSE(accepts(*positive, "0"));
  EXPECT_FALSE(accepts(*positive, "-1"));
  EXPECT_TRUE(accepts(*positive, "999999999999999"));
  // No dead ends: every digit accepted leaves a value within the bounds reachable.
  Automaton a(*g);
  State s = a.initial();
  ASSERT_TRUE(a.feed(s, "1"));
  EXPECT_TRUE(a.feed(s, "2"));  // 12, or 120 after another 0
  State t = s;
  EXPECT_FALSE(a.feed(t, "1"));  // 121.. cannot fit
  EXPECT_TRUE(a.feed(s, "0") && a.can_finish(s));
}

TEST(Grammar, RefusesWhatItCannotHonourNamingThePlace) {
  auto path_of = [](const char* schema) {
    try {
      Grammar::from_schema(Json::parse(schema), "response_format.json_schema.schema");
    } catch (const UnsupportedSchema& e) {
      EXPECT_NE(std::string(e.what()).find(e.path()), std::string::npos) << e.what();
      return e.path();
    }
    return std::string("accepted");
  };
  const std::string base = "response_format.json_schema.schema";
  EXPECT_EQ(path_of(R"({"type":"string","pattern":"a+"})"), base + ".pattern");
  EXPECT_EQ(path_of(R"({"properties":{"a":{"type":"number","minimum":0}}})"), base + ".properties.a.minimum");
  EXPECT_EQ(path_of(R"({"minimum":0})"), base + ".minimum");
  EXPECT_EQ(path_of(R"({"type":"integer","enum":[1],"maximum":3})"), base + ".maximum");
  EXPECT_EQ(path_of(R"({"type":"integer","minimum":3,"maximum":2.5})"), base + ".minimum");
  EXPECT_EQ(path_of(R"({"type":"integer","multipleOf":2})"), base + ".multipleOf");
  EXPECT_EQ(path_of(R"({"type":["integer","null"],"minimum":1,"maximum":9})"), "accepted");
  EXPECT_EQ(path_of(R"({"anyOf":[{"type":"string"}]})"), base + ".anyOf");
  EXPECT_EQ(path_of(R"({"$ref":"#/x"})"), base + ".$ref");
  EXPECT_EQ(path_of(R"({"type":"object","properties":{},"required":["a"]})"), base + ".required[0]");
  EXPECT_EQ(path_of(R"({"type":"string","minLength":3,"maxLength":2})"), base + ".minLength");
  EXPECT_EQ(path_of(R"({"type":"strin"})"), base + ".type");
  EXPECT_EQ(path_of(R"({"type":"string","enum":[1]})"), base + ".enum");
  EXPECT_EQ(path_of(R"({"type":"array","items":[{"type":"string"}]})"), base + ".items");
  EXPECT_EQ(path_of(R"({"type":"object","additionalProperties":{"type":"string"}})"), base + ".additionalProperties");
  EXPECT_EQ(path_of(R"(false)"), base);
  EXPECT_EQ(path_of(R"({"type":["integer","number","string","null","boolean"],"title":"t","description":"d"})"),
            "accepted");
}

// Bytes drawn from what JSON texts are made of, so random tokens often pass.
std::vector<std::string> random_tokens(std::mt19937& rng, std::size_t n) {
  static const std::string alphabet = "{}[]:,\" \n\\/-+.0123456789eEtrufalsnbxyz\xc3\xa9\xe2\x82\xac";
  std::vector<std::string> tokens(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (i % 17 == 0) continue;  // some ids without bytes (special tokens)
    const std::size_t len = 1 + rng() % 5;
    for (std::size_t k = 0; k < len; ++k) tokens[i] += alphabet[rng() % alphabet.size()];
  }
  return tokens;
}

TEST(TokenMasks, WalkEqualsTestingEveryTokenAlone) {
  std::mt19937 rng(7);
  TokenTable table(random_tokens(rng, 3000));
  auto g = Grammar::from_schema(Json::parse(kPerson));
  Automaton a(*g);
  // States along a valid text, each checked against the token-by-token oracle.
  const std::string text = R"({"name":"é\n", "tags":["a",7],"age":-7,"x":-1.5e3,"ok":false})";
  State s = a.initial();
  for (std::size_t k = 0; k <= text.size(); ++k) {
    const TokenMask m = compute_mask(a, s, table);
    std::size_t expected = 0;
    for (int32_t id = 0; id < table.vocab_size(); ++id) {
      State t = s;
      const bool ok = !table.bytes(id).empty() && a.feed(t, table.bytes(id));
      expected += ok;
      ASSERT_EQ(m.test(id), ok) << "after " << text.substr(0, k) << ", token '" << table.bytes(id) << "'";
    }
    EXPECT_EQ(m.count, expected);
    if (k < text.size()) {
      ASSERT_TRUE(a.feed(s, uint8_t(text[k])));
    }
  }
}

TEST(TokenMasks, CacheReturnsTheSameMaskForTheSameState) {
  std::mt19937 rng(3);
  auto table = std::make_shared<const TokenTable>(random_tokens(rng, 500));
  MaskCache cache(table);
  auto g = Grammar::any_object();
  Automaton a(*g);
  State s = a.initial();
  const auto first = cache.get(g, a, s);
  EXPECT_EQ(cache.get(g, a, s), first);
  EXPECT_EQ(cache.misses(), 1u);
  EXPECT_EQ(cache.hits(), 1u);
  MaskCache tiny(table, 1);  // over budget at every insertion: starts over, still correct
  EXPECT_EQ(tiny.get(g, a, s)->words, first->words);
  EXPECT_EQ(tiny.get(g, a, s)->words, first->words);
}

TEST(JsonConstraint, MasksAcceptsRollsBackAndAllowsTheEndOnlyWhenComplete) {
  // Ids: 0 "{", 1 "}", 2 "\"a\"", 3 ":", 4 "1", 5 "x", 6 end of sequence (no bytes).
  auto table = std::make_shared<const TokenTable>(std::vector<std::string>{"{", "}", "\"a\"", ":", "1", "x", ""});
  MaskCache cache(table);
  auto g = Grammar::from_schema(Json::parse(R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})"));
  JsonConstraint c(g, cache, {6});
  auto allowed = [&] {
    std::vector<float> logits(7, 1.0f);
    c.mask(logits);
    std::vector<int> ids;
    for (int i = 0; i < 7; ++i) {
      if (std::isfinite(logits[std::size_t(i)])) ids.push_back(i);
    }
    return ids;
  };
  EXPECT_EQ(allowed(), std::vector<int>({0}));
  c.accept(0);
  EXPECT_EQ(allowed(), std::vector<int>({2}));  // "}" would leave out the required "a"
  EXPECT_THROW(c.accept(1), Error);
  c.accept(2);
  c.accept(3);
  c.accept(4);
  EXPECT_EQ(allowed(), std::vector<int>({1, 4}));
  EXPECT_THROW(c.accept(6), Error);  // not complete yet
  c.accept(1);
  EXPECT_TRUE(c.complete());
  EXPECT_EQ(allowed(), std::vector<int>({6}));
  c.rollback(1);
  EXPECT_EQ(allowed(), std::vector<int>({1, 4}));
  c.rollback(1);
  EXPECT_EQ(allowed(), std::vector<int>({4}));
}

// Tool calls in Gemma 4's syntax; "\xff" is the quote token <|"|>.
const char* kWeather = R"({"type": "object", "additionalProperties": false,
  "properties": {"city": {"type": "string", "maxLength": 12}, "days": {"type": "integer", "minimum": 1, "maximum": 7},
                 "unit": {"enum": ["C", "F"]}, "a b": {"type": ["number", "null"]}, "opts": {"type": "object"}},
  "required": ["city"]})";

std::shared_ptr<const Grammar> weather_calls() {
  const Json weather = Json::parse(kWeather);
  const Json time = Json::parse(R"({"type": "object", "properties": {"zone": {"const": "CET"}}})");
  const Grammar::CallSchema calls[] = {{"call:get", &time, "tools[0]"},
                                       {"call:get_weather", &weather, "tools[1]"},
                                       {"call:any", nullptr, "tools[2]"}};
  return Grammar::for_tool_calls(calls, {Syntax::kGemma4});
}

// allowed() (the set a GPU masks rows with) is mask()'s set, taken by the
// definition (TokenConstraint's own allowed(): mask() of a row of zeros), at
// every step of random walks through a schema's values, complete or not.
TEST(JsonConstraint, AllowedBitsAreTheTokensMaskLeaves) {
  std::mt19937 rng(11);
  std::vector<std::string> pieces = random_tokens(rng, 700);
  pieces.push_back("");  // the terminator: no bytes
  auto table = std::make_shared<const TokenTable>(pieces);
  const int64_t V = int64_t(pieces.size());
  MaskCache cache(table);
  auto g = Grammar::from_schema(
      Json::parse(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["a"]})"));
  int steps = 0, some = 0;
  for (int walk = 0; walk < 20; ++walk) {
    JsonConstraint c(g, cache, {int32_t(V - 1)});
    for (int step = 0; step < 30; ++step, ++steps) {
      std::vector<uint64_t> got(std::size_t((V + 63) / 64), 0), want(got.size(), 0);
      const sampling::Allowed a = c.allowed(V, got);
      const sampling::Allowed b = c.sampling::TokenConstraint::allowed(V, want);
      ASSERT_EQ(a == sampling::Allowed::None, b == sampling::Allowed::None) << "walk " << walk << " step " << step;
      if (a == sampling::Allowed::None) break;
      if (a == sampling::Allowed::Some) ++some;
      if (a == sampling::Allowed::Some && b == sampling::Allowed::Some) {
        ASSERT_EQ(got, want) << "walk " << walk;
      }
      // The next token: one the mask leaves, at random.
      std::vector<int32_t> ok;
      for (int32_t t = 0; t < V; ++t)
        if (b == sampling::Allowed::All || (want[std::size_t(t) >> 6] >> (t & 63) & 1)) ok.push_back(t);
      ASSERT_FALSE(ok.empty());
      const int32_t t = ok[rng() % ok.size()];
      if (t == V - 1) break;  // the value ended
      c.accept(t);
    }
  }
  EXPECT_GT(some, 100) << steps << " steps";
}

TEST(Automaton, Gemma4CallsTakeAToolNameAndArgumentsOfItsSchema) {
  auto g = weather_calls();
  for (const char* text : {"call:get_weather{city:\xffParis\xff}", "call:get_weather{ days:2 , city:\xff\xff}",
                           "call:get_weather{city:\xffsay \"hi\" \\n\n\xff,unit:\xff" "F\xff}",
                           "call:get_weather{city:\xff<|\"|\xff,\xff" "a b\xff:-1.5e99,opts:{\xffk\xff:[1,\xffv\xff,{}]}}",
                           "call:get{}", "call:get{zone:\xff" "CET\xff}", "call:any{}", "call:any{\xffx\xff:null}"})
    EXPECT_TRUE(accepts(*g, text)) << text;
  for (const char* text : {
           "call:get_weathe{city:\xff" "a\xff}",         // not a tool
           "call:get_weather{}",                          // city is required
           "call:get_weather{city:\"Paris\"}",            // JSON's quotes are not Gemma's
           "call:get_weather{\"city\":\xff" "a\xff}",     // nor its keys
           "call:get_weather{city:\xff<|\"|>\xff}",       // the quote token's text inside a string
           "call:get_weather{city:\xff" "a\xff,days:8}",  // maximum
           "call:get_weather{city:\xff" "a\xff,a b:1}",   // a key that is not a name is quoted
           "call:get_weather{city:\xff" "a\x01\xff}",     // control character
           "call:get_weather{city:\xff" "a\xff,\xff" "a b\xff:1e100}",  // three exponent digits
           "call:get_weather{city:\xff" "a\xff} ",        // nothing after the arguments
           "call:get[]", "call:any", "call: get{}"})
    EXPECT_FALSE(accepts(*g, text)) << text;
}

TEST(Grammar, ToolCallsRefuseArgumentsThatAreNotObjectsAndTextGemmaCannotQuote) {
  auto path_of = [](const char* schema) {
    const Json j = Json::parse(schema);
    const Grammar::CallSchema call[] = {{"call:f", &j, "tools[0].function.parameters"}};
    try {
      Grammar::for_tool_calls(call, {Syntax::kGemma4});
    } catch (const UnsupportedSchema& e) {
      return e.path();
    }
    return std::string("accepted");
  };
  EXPECT_EQ(path_of(R"({"type":"string"})"), "tools[0].function.parameters");
  EXPECT_EQ(path_of(R"({"type":["object","null"]})"), "tools[0].function.parameters");
  EXPECT_EQ(path_of(R"({"properties":{"a":{"enum":["x<|\"|>"]}}})"), "tools[0].function.parameters.properties.a.enum");
  EXPECT_EQ(path_of(R"({"type":"object","properties":{"a":{"type":"string","format":"date"}}})"),
            "tools[0].function.parameters.properties.a.format");
  EXPECT_EQ(path_of(R"({})"), "accepted");
  EXPECT_EQ(path_of(R"({"const":{"a":1}})"), "accepted");
}

TEST(TokenMasks, Gemma4CallWalkEqualsTestingEveryTokenAlone) {
  std::mt19937 rng(11);
  std::vector<std::string> bytes = random_tokens(rng, 2500);
  // Gemma's pieces: the quote byte, the quote token's text in pieces, names.
  for (const char* t : {"\xff", "<|", "\"|>", "<|\"", "|>", ">", "call:", "get", "_weather", "{city:", "city", "days:",
                        "\xff" "a b\xff:", "opts", "unit", "\xff}", "a\xff,"})
    bytes.push_back(t);
  TokenTable table(bytes, '<');
  auto g = weather_calls();
  Automaton a(*g);
  const std::string text = "call:get_weather{city:\xffP<|\"|x\xe2\x82\xac\xff,days:3,\xff" "a b\xff:-0.5e+12,"
                           "opts:{\xffk\xff:[\xff<|\"\xff]},unit:\xff" "C\xff}";
  State s = a.initial();
  for (std::size_t k = 0; k <= text.size(); ++k) {
    const TokenMask m = compute_mask(a, s, table);
    for (int32_t id = 0; id < table.vocab_size(); ++id) {
      State t = s;
      const bool ok = !table.bytes(id).empty() && a.feed(t, table.bytes(id));
      ASSERT_EQ(m.test(id), ok) << "after " << text.substr(0, k) << ", token '" << table.bytes(id) << "'";
    }
    if (k < text.size()) {
      ASSERT_TRUE(a.feed(s, uint8_t(text[k]))) << text.substr(0, k + 1);
    }
  }
  EXPECT_TRUE(a.finished(s));
}

TEST(JsonConstraint, ToolCallsAreDormantUntilACallOpensAndAfterItCloses) {
  // Ids: 0 "hi", 1 open (no bytes), 2 close (no bytes), 3 "call:any", 4 "{", 5 "}", 6 "call:get".
  auto table = std::make_shared<const TokenTable>(std::vector<std::string>{"hi", "", "", "call:any", "{", "}", "call:get"}, '<');
  MaskCache cache(table);
  JsonConstraint c(weather_calls(), cache, CallTokens(1, 2));
  auto allowed = [&] {
    std::vector<float> logits(7, 1.0f);
    c.mask(logits);
    std::vector<int> ids;
    for (int i = 0; i < 7; ++i) {
      if (std::isfinite(logits[std::size_t(i)])) ids.push_back(i);
    }
    return ids;
  };
  const std::vector<int> every = {0, 1, 2, 3, 4, 5, 6};
  EXPECT_TRUE(c.dormant());
  EXPECT_EQ(allowed(), every);
  c.accept(0);
  c.accept(2);  // a closing token outside a call is text
  EXPECT_EQ(allowed(), every);
  c.accept(1);
  EXPECT_FALSE(c.dormant());
  EXPECT_EQ(allowed(), std::vector<int>({3, 6}));
  EXPECT_THROW(c.accept(2), Error);  // nothing to close yet
  c.accept(3);
  EXPECT_EQ(allowed(), std::vector<int>({4}));
  c.accept(4);
  EXPECT_EQ(allowed(), std::vector<int>({5}));  // "{" nests only inside a value
  c.accept(5);
  EXPECT_EQ(allowed(), std::vector<int>({2}));
  c.accept(2);
  EXPECT_TRUE(c.dormant());
  EXPECT_EQ(allowed(), every);
  c.rollback(1);  // back inside the call, before its close
  EXPECT_EQ(allowed(), std::vector<int>({2}));
  c.rollback(4);
  EXPECT_TRUE(c.dormant());
  // Forced tokens (tool_choice) cannot be rolled back.
  JsonConstraint forced(weather_calls(), cache, CallTokens(1, 2));
  const int32_t start[] = {0, 1, 3};
  forced.begin_with(start);
  EXPECT_FALSE(forced.dormant());
  EXPECT_THROW(forced.rollback(1), Error);
}

// Calls as JSON in tags (ChatML models): a prefix naming the tool, JSON
// arguments, the suffix; no string holds the closing tag's text.
std::shared_ptr<const Grammar> json_tag_calls() {
  static const Json weather = Json::parse(kWeather);
  const Grammar::CallSchema calls[] = {{"\n{\"name\": \"get_weather\", \"arguments\": ", &weather, "tools[0]"},
                                       {"\n{\"name\": \"any\", \"arguments\": ", nullptr, "tools[1]"}};
  return Grammar::for_tool_calls(calls, {Syntax::kJson, "}\n", "</tool_call>"});
}

TEST(Automaton, JsonTagCallsEndWithTheSuffixAndKeepTheClosingTagOutOfStrings) {
  auto g = json_tag_calls();
  for (const char* text : {"\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"</tool_cal\"}}\n",
                           "\n{\"name\": \"any\", \"arguments\": {\"x\":\"<\\/tool_call>\",\"y\":[1]}}\n"})
    EXPECT_TRUE(accepts(*g, text)) << text;
  for (const char* text : {"\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"a\"}}",  // no suffix
                           "\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"a</tool_call>\"}}\n",
                           "\n{\"name\": \"any\", \"arguments\": {\"</tool_call>\":1}}\n",
                           "\n{\"name\": \"any\", \"arguments\": {}} \n"})
    EXPECT_FALSE(accepts(*g, text)) << text;
  const Json bad = Json::parse(R"({"properties":{"a":{"const":"x</tool_call>"}}})");
  const Grammar::CallSchema call[] = {{"p", &bad, "tools[0].function.parameters"}};
  EXPECT_THROW(Grammar::for_tool_calls(call, {Syntax::kJson, "}\n", "</tool_call>"}), UnsupportedSchema);
}

TEST(TokenMasks, JsonTagCallWalkEqualsTestingEveryTokenAlone) {
  std::mt19937 rng(13);
  std::vector<std::string> bytes = random_tokens(rng, 2500);
  for (const char* t : {"</tool_call>", "</", "tool", "_call", ">", "<", "call>", "\n{\"name\": \"", "get_weather",
                        "\", \"arguments\": ", "}\n", "}}\n", "\"city\":\""})
    bytes.push_back(t);
  TokenTable table(bytes, '<');
  auto g = json_tag_calls();
  Automaton a(*g);
  const std::string text = "\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"</tool_c\\\"\", \"unit\":\"F\"}}\n";
  State s = a.initial();
  for (std::size_t k = 0; k <= text.size(); ++k) {
    const TokenMask m = compute_mask(a, s, table);
    for (int32_t id = 0; id < table.vocab_size(); ++id) {
      State t = s;
      const bool ok = !table.bytes(id).empty() && a.feed(t, table.bytes(id));
      ASSERT_EQ(m.test(id), ok) << "after " << text.substr(0, k) << ", token '" << table.bytes(id) << "'";
    }
    if (k < text.size()) {
      ASSERT_TRUE(a.feed(s, uint8_t(text[k]))) << text.substr(0, k + 1);
    }
  }
  EXPECT_TRUE(a.finished(s));
}

TEST(TokenTable, BundledTokenizerBytesAreWhatDecodingProduces) {
  const Tokenizer tok = Tokenizer::load(std::string(ROWLM_SOURCE_DIR) + "/models/rowlm-tiny");
  TokenTable table(tok, tok.vocab_size());
  // Decoding a run of ordinary tokens gives the concatenation of their bytes.
  const std::vector<int32_t> ids = tok.encode(R"({"name": "Zoë", "n": [1, 2]})", false);
  std::string joined;
  for (int32_t id : ids) joined += table.bytes(id);
  EXPECT_EQ(joined, tok.decode(ids));
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (tok.is_special(id)) {
      EXPECT_TRUE(table.bytes(id).empty()) << id;
    }
  }
}

}  // namespace
}  // namespace rowlm::constrain
