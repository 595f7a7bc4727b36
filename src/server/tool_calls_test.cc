#include "server/tool_calls.h"

#include <random>

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace rowlm::server
