#include "server/tool_calls.h"

#include <algorithm>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "constrain/automaton.h"

namespace rowlm::server {
namespace {

using Json = nlohmann::json;

// Random argument values in the shapes tool calls carry. Strings avoid
// Gemma's quote token (the format cannot express it) and the openers.
class ArgsGenerator {
 public:
  explicit ArgsGenerator(uint32_t seed) : rng_(seed) {}

  Json object(int depth) {
    Json o = Json::object();
    const int n = pick(0, 4);
    for (int i = 0; i < n; ++i) o[key()] = value(depth + 1);
    return o;
  }

 private:
  Json value(int depth) {
    switch (pick(0, depth > 3 ? 4 : 6)) {
      case 0: return text();
      case 1: return int64_t(pick(-1000000, 1000000)) * (pick(0, 1) ? 1 : 1000003);
      case 2: return std::uniform_real_distribution<double>(-1e6, 1e6)(rng_);
      case 3: return pick(0, 1) == 1;
      case 4: return nullptr;
      case 5: return object(depth);
      default: {
        Json a = Json::array();
        for (int i = pick(0, 3); i > 0; --i) a.push_back(value(depth + 1));
        return a;
      }
    }
  }
  std::string key() {
    static const char* keys[] = {"city", "unit", "q", "limit", "dry_run", "path", "a.b", "x-y", "k9"};
    return keys[pick(0, 8)];
  }
  std::string text() {
    static const char* pieces[] = {"Paris", " ", "{", "}", "[", "]", ",", ":", "\"", "\\", "\n", "é", "日本", "<", ">",
                                   "|", "call:", "tool", "😀", ""};
    std::string s;
    for (int i = pick(0, 6); i > 0; --i) s += pieces[pick(0, 19)];
    // Gemma's format has no escape for its own quote token.
    for (std::size_t k; (k = s.find("<|\"|>")) != std::string::npos;) s.erase(k, 1);
    return s;
  }
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  std::mt19937 rng_;
};

std::string plain_text(std::mt19937& rng) {
  static const char* pieces[] = {"Sure", ", ", "let me check", ".\n", "<", "|", "tool", "_call", ">", "{", "}", "é", " "};
  std::string s;
  for (int i = std::uniform_int_distribution<int>(0, 6)(rng); i > 0; --i)
    s += pieces[std::uniform_int_distribution<int>(0, 12)(rng)];
  return s;
}

// Text made of plain pieces and calls, and what parsing it must give.
struct Sample {
  std::string text;
  ParsedReply expected;
  bool valid = true;
};

Sample random_sample(ToolSyntax syntax, uint32_t seed) {
  std::mt19937 rng(seed);
  ArgsGenerator gen(seed * 7919u + 1);
  Sample s;
  const int parts = std::uniform_int_distribution<int>(0, 5)(rng);
  for (int i = 0; i < parts; ++i) {
    if (std::uniform_int_distribution<int>(0, 1)(rng)) {
      ToolCall call;
      call.name = std::uniform_int_distribution<int>(0, 1)(rng) ? "get_weather" : "tools.shell-exec";
      call.arguments = gen.object(0);
      s.text += format_tool_call(syntax, call);
      s.expected.calls.push_back(call);
    } else {
      const std::string t = plain_text(rng);
      s.text += t;
      s.expected.content += t;
    }
  }
  // Plain pieces side by side may spell an opener; such samples are not
  // "text plus calls" and are left out.
  s.valid = s.expected.content.find(tool_call_opener(syntax)) == std::string::npos;
  return s;
}

void expect_same(const ParsedReply& got, const ParsedReply& want, const std::string& text) {
  EXPECT_EQ(got.content, want.content) << text;
  ASSERT_EQ(got.calls.size(), want.calls.size()) << text;
  for (std::size_t i = 0; i < got.calls.size(); ++i) {
    EXPECT_EQ(got.calls[i].name, want.calls[i].name) << text;
    EXPECT_EQ(got.calls[i].arguments, want.calls[i].arguments) << text;
  }
}

class ToolSyntaxTest : public ::testing::TestWithParam<ToolSyntax> {};

// Writing calls in the native markup and parsing them back gives the calls,
// and the text around them as content, for both markups.
TEST_P(ToolSyntaxTest, FormatThenParseRoundTrips) {
  int checked = 0;
  for (uint32_t seed = 0; seed < 400; ++seed) {
    const Sample s = random_sample(GetParam(), seed);
    if (!s.valid) continue;
    expect_same(parse_tool_calls(GetParam(), s.text), s.expected, s.text);
    ++checked;
  }
  EXPECT_GT(checked, 350);
}

// Streaming in random pieces gives the same content and calls as parsing
// the whole text.
TEST_P(ToolSyntaxTest, StreamingAgreesWithWholeText) {
  std::mt19937 rng(42);
  for (uint32_t seed = 0; seed < 400; ++seed) {
    const Sample s = random_sample(GetParam(), seed);
    const ParsedReply whole = parse_tool_calls(GetParam(), s.text);
    ToolCallStream stream(GetParam());
    std::string streamed;
    std::size_t pos = 0;
    while (pos < s.text.size()) {
      const std::size_t len = std::uniform_int_distribution<std::size_t>(0, 7)(rng);
      streamed += stream.push(std::string_view(s.text).substr(pos, len));
      pos += len;
    }
    ParsedReply rest = stream.finish();
    rest.content = streamed + rest.content;
    expect_same(rest, whole, s.text);
    // Nothing from an opener on was released early.
    const std::size_t opener = s.text.find(tool_call_opener(GetParam()));
    if (opener != std::string::npos) {
      EXPECT_LE(streamed.size(), opener) << s.text;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Both, ToolSyntaxTest, ::testing::Values(ToolSyntax::kGemma4, ToolSyntax::kJsonTags),
                         [](const auto& param_info) {
                           return param_info.param == ToolSyntax::kGemma4 ? "Gemma4" : "JsonTags";
                         });

TEST(Gemma4ToolCalls, ParsesTheModelsMarkup) {
  const auto r = parse_tool_calls(
      ToolSyntax::kGemma4,
      "Let me look.<|tool_call>call:calculator{lhs:1353785,op:<|\"|>div<|\"|>,rhs:-7.5e-1}<tool_call|>"
      "<|tool_call>call:shell{cmd:<|\"|>echo {a, b} [c]<|\"|>,env:{HOME:<|\"|>/root<|\"|>},args:[<|\"|>-l<|\"|>,2,true,null]}"
      "<tool_call|>");
  EXPECT_EQ(r.content, "Let me look.");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "calculator");
  EXPECT_EQ(r.calls[0].arguments, Json::parse(R"({"lhs":1353785,"op":"div","rhs":-0.75})"));
  EXPECT_TRUE(r.calls[0].arguments["lhs"].is_number_integer());
  EXPECT_EQ(r.calls[1].arguments,
            Json::parse(R"({"cmd":"echo {a, b} [c]","env":{"HOME":"/root"},"args":["-l",2,true,null]})"));
}

TEST(Gemma4ToolCalls, MalformedCallsStayText) {
  const char* cases[] = {
      "<|tool_call>call:f{a:1}",                      // unterminated
      "<|tool_call>f{a:1}<tool_call|>",               // no call: prefix
      "<|tool_call>call:bad name{a:1}<tool_call|>",   // space in the name
      "<|tool_call>call:f{a:<|\"|>x}<tool_call|>",    // unterminated string
      "<|tool_call>call:f{a:yes}<tool_call|>",        // bare word value
      "<|tool_call>call:f{a:1,}<tool_call|>",         // trailing comma
      "<|tool_call>call:f[1]<tool_call|>",            // arguments not an object
      "<|tool_call>call:f{a:1}} <tool_call|>",        // junk before the closer
      "<|tool_call>",
  };
  for (const char* text : cases) {
    const auto r = parse_tool_calls(ToolSyntax::kGemma4, text);
    EXPECT_TRUE(r.calls.empty()) << text;
    EXPECT_EQ(r.content, text);
  }
}

TEST(Gemma4ToolCalls, DeepNestingIsRejectedNotOverflowed) {
  std::string deep = "<|tool_call>call:f{";
  for (int i = 0; i < 100000; ++i) deep += "a:{";
  const auto r = parse_tool_calls(ToolSyntax::kGemma4, deep);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, deep);
}

TEST(JsonToolCalls, ParsesQwenStyleCalls) {
  const auto r = parse_tool_calls(ToolSyntax::kJsonTags,
                                  "ok\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                                  "</tool_call>\n<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}\n</tool_call>"
                                  "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}");
  EXPECT_EQ(r.content, "ok\n\n");
  ASSERT_EQ(r.calls.size(), 3u);
  EXPECT_EQ(r.calls[0].arguments, Json::parse(R"({"city":"Paris"})"));
  EXPECT_EQ(r.calls[1].arguments, Json::parse(R"({"x":1})"));  // arguments given as a JSON string
  EXPECT_EQ(r.calls[2].name, "g");                                // no closer at the end of the reply
  const auto bad = parse_tool_calls(ToolSyntax::kJsonTags, "<tool_call>{\"arguments\": {}}</tool_call>");
  EXPECT_TRUE(bad.calls.empty());
  EXPECT_EQ(bad.content, "<tool_call>{\"arguments\": {}}</tool_call>");
}

// The declaration as the Gemma 4 chat template renders this tool
// (properties sorted, types upper-cased, strings in <|"|>).
TEST(Gemma4ToolDeclarations, MatchTheTemplatesShape) {
  ToolSpec weather{"weather", "Weather",
                   Json::parse(R"({"type":"object","properties":{"city":{"type":"string","description":"City"}},
                                   "required":["city"]})")};
  EXPECT_EQ(format_tool_declarations(ToolSyntax::kGemma4, std::span(&weather, 1)),
            "<|tool>declaration:weather{description:<|\"|>Weather<|\"|>,parameters:{properties:{city:{description:"
            "<|\"|>City<|\"|>,type:<|\"|>STRING<|\"|>}},required:[<|\"|>city<|\"|>],type:<|\"|>OBJECT<|\"|>}}<tool|>");
  EXPECT_EQ(format_tool_response(ToolSyntax::kGemma4, "weather", "sunny"),
            "<|tool_response>response:weather{value:<|\"|>sunny<|\"|>}<tool_response|>");
}

TEST(JsonToolDeclarations, ListOneFunctionPerLine) {
  ToolSpec tools[] = {{"a", "first", Json::object()}, {"b", "second", Json::parse(R"({"type":"object"})")}};
  const std::string d = format_tool_declarations(ToolSyntax::kJsonTags, tools);
  EXPECT_NE(d.find("<tools>\n{\"type\":\"function\",\"function\":{\"name\":\"a\",\"description\":\"first\","
                   "\"parameters\":{}}}\n{\"type\":\"function\",\"function\":{\"name\":\"b\""),
            std::string::npos)
      << d;
  EXPECT_NE(d.find("</tools>"), std::string::npos);
}

// Strict tools: texts the call grammar admits, walked byte by byte at
// random through its automaton, are calls the parser reads, with
// arguments valid for the schema (checked by the JSON form of the schema's
// grammar: the values the parser builds, written as JSON).
const char* const kStrictSchemas[] = {
    R"({"type":"object","properties":{"city":{"type":"string","maxLength":8},"days":{"type":"integer","minimum":1,
        "maximum":14},"unit":{"enum":["C","F",{"k":[1,"x y"]}]},"a b":{"type":["number","null"]},
        "ü":{"type":"array","items":{"type":"boolean"},"maxItems":3}},"required":["city","a b"],
        "additionalProperties":false})",
    R"({"type":"object","properties":{"note":{"type":"string","minLength":2,"maxLength":12},
        "meta":{"type":"object","properties":{"n":{"type":"number"},"any":{}}},"const":{"const":"river"}},
        "required":["note","meta"]})",
    R"({"type":"object"})",
};

std::string random_walk(const constrain::Grammar& g, std::mt19937& rng) {
  constrain::Automaton a(g);
  constrain::State s = a.initial();
  std::string text;
  std::vector<uint8_t> ok, preferred, edgy;
  // Bytes near the syntax's edges: the quote token's text, escapes and
  // control characters (text in Gemma's strings), exponents.
  const std::string_view edges = "<|\"|>\\\n\teE0123456789-";
  while (!a.finished(s) && text.size() < 4000) {
    ok.clear();
    preferred.clear();
    edgy.clear();
    for (int c = 0; c < 256; ++c) {
      // Printable ASCII, tab, newline, two-byte characters (é, ü), the quote.
      if (!(c >= 0x20 && c < 0x7f) && !(c >= 0x80 && c < 0xc0) && c != '\t' && c != '\n' && c != 0xc3 &&
          c != constrain::kQuoteByte)
        continue;
      constrain::State t = s;
      if (!a.feed(t, uint8_t(c))) continue;
      ok.push_back(uint8_t(c));
      // Past a few bytes, closing what is open is likelier, so walks end.
      if (c == '}' || c == ']' || c == ',' || c == constrain::kQuoteByte || c == '"') preferred.push_back(uint8_t(c));
      if (c != 0 && edges.find(char(c)) != std::string_view::npos) edgy.push_back(uint8_t(c));
    }
    EXPECT_FALSE(ok.empty()) << "a dead end after " << Json(text).dump(-1, ' ', true, Json::error_handler_t::replace);  // the automaton has none
    if (ok.empty()) break;
    const bool close = !preferred.empty() && std::uniform_real_distribution<>(0, 1)(rng) < std::min(0.9, text.size() / 80.0);
    const bool edge = !close && !edgy.empty() && rng() % 2;
    const std::vector<uint8_t>& from = close ? preferred : edge ? edgy : ok;
    const uint8_t c = from[rng() % from.size()];
    EXPECT_TRUE(a.feed(s, c)) << text;
    text += char(c);
  }
  EXPECT_TRUE(a.finished(s)) << text;
  return text;
}

class StrictToolCalls : public ::testing::TestWithParam<ToolSyntax> {};

TEST_P(StrictToolCalls, WhatTheConstraintAdmitsParsesIntoArgumentsOfTheSchema) {
  std::vector<Json> schemas;
  std::vector<ToolSpec> tools;
  for (const char* text : kStrictSchemas) schemas.push_back(Json::parse(text));
  for (std::size_t i = 0; i < schemas.size(); ++i)
    tools.push_back({"tool_" + std::to_string(i), "", schemas[i], true, "tools[" + std::to_string(i) + "].parameters", ""});
  tools.push_back({"free", "", Json::parse(R"({"type":"object","properties":{"x":{"type":"string"}},"required":["x"]})"),
                   false, "", ""});  // not strict: any object
  const ToolSyntax syntax = GetParam();
  const auto rules = strict_call_rules(syntax, tools, {}, true);
  ASSERT_NE(rules, nullptr);
  std::mt19937 rng(5);
  std::set<std::string> called;
  for (int walk = 0; walk < 400; ++walk) {
    std::string body = random_walk(*rules->grammar, rng);
    for (std::size_t k; (k = body.find(char(constrain::kQuoteByte))) != std::string::npos;)
      body.replace(k, 1, constrain::kGemma4QuoteText);
    const std::string text = rules->open + body + rules->close;
    const ParsedReply parsed = parse_tool_calls(syntax, text);
    ASSERT_EQ(parsed.calls.size(), 1u) << text;
    EXPECT_EQ(parsed.content, "") << text;
    const ToolCall& call = parsed.calls[0];
    called.insert(call.name);
    const auto tool = std::find_if(tools.begin(), tools.end(), [&](const ToolSpec& t) { return t.name == call.name; });
    ASSERT_NE(tool, tools.end()) << text;
    const auto json_form = tool->strict ? constrain::Grammar::from_schema(tool->parameters) : constrain::Grammar::any_object();
    constrain::Automaton a(*json_form);
    constrain::State s = a.initial();
    EXPECT_TRUE(a.feed(s, call.arguments.dump()) && a.can_finish(s)) << text << " -> " << call.arguments.dump();
  }
  EXPECT_EQ(called.size(), tools.size());  // every tool was called
}

INSTANTIATE_TEST_SUITE_P(Markups, StrictToolCalls, ::testing::Values(ToolSyntax::kGemma4, ToolSyntax::kJsonTags),
                         [](const auto& param_info) {
                           return param_info.param == ToolSyntax::kGemma4 ? "Gemma4" : "JsonTags";
                         });

TEST(StrictToolRules, ExistOnlyForStrictToolsAndNameTheFieldAtFault) {
  ToolSpec loose{"f", "", Json::parse(R"({"type":"object","properties":{"a":{"type":"string","format":"date"}}})"), false,
                 "tools[0].function.parameters", "tools[0].function.strict"};
  const ToolSpec tools[] = {loose};
  EXPECT_EQ(strict_call_rules(ToolSyntax::kGemma4, tools, {}, true), nullptr);
  auto path_of = [](ToolSyntax syntax, const ToolSpec& t) {
    try {
      const ToolSpec one[] = {t};
      (void)strict_call_rules(syntax, one, {}, true);
    } catch (const constrain::UnsupportedSchema& e) {
      return e.path();
    }
    return std::string("accepted");
  };
  ToolSpec strict = loose;
  strict.strict = true;
  EXPECT_EQ(path_of(ToolSyntax::kGemma4, strict), "tools[0].function.parameters.properties.a.format");
  strict.parameters = Json::parse(R"({"type":"array"})");
  EXPECT_EQ(path_of(ToolSyntax::kGemma4, strict), "tools[0].function.parameters");
  strict.parameters = Json::object();  // no parameters: any object
  EXPECT_EQ(path_of(ToolSyntax::kGemma4, strict), "accepted");
  EXPECT_EQ(path_of(ToolSyntax::kJsonTags, strict), "accepted");
  strict.parameters = Json::parse(R"({"type":"object","properties":{"a":{"enum":["</tool_call>"]}}})");
  EXPECT_EQ(path_of(ToolSyntax::kJsonTags, strict), "tools[0].function.parameters.properties.a.enum");
  const ToolSpec one[] = {strict};
  try {
    (void)strict_call_rules(ToolSyntax::kGemma4, one, {}, /*markup_is_tokens=*/false);
    ADD_FAILURE() << "accepted";
  } catch (const constrain::UnsupportedSchema& e) {
    EXPECT_EQ(e.path(), "tools[0].function.strict");
  }
}

}  // namespace
}  // namespace rowlm::server
