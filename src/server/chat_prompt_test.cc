#include "server/chat_prompt.h"

#include <random>

#include <gtest/gtest.h>

#include "server/api_error.h"

namespace rowlm::server {
namespace {

using Json = nlohmann::json;
using Role = ChatTurn::Role;
using tokenizer::ChatFormat;

ChatTurn turn(Role role, std::string text) { return {role, std::move(text), {}, {}}; }

// Without tools, a chat renders exactly as the model's chat format renders
// it: the server adds nothing of its own.
TEST(ChatPrompt, PlainConversationsRenderThroughTheChatFormat) {
  std::mt19937 rng(7);
  const char* texts[] = {"Hello", "  padded  ", "", "multi\nline", "é😀", "What does river mean?"};
  for (const std::string& name : ChatFormat::names()) {
    const ChatFormat format = ChatFormat::by_name(name);
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<ChatTurn> turns;
      std::vector<tokenizer::ChatMessage> messages;
      if (trial % 3 == 0) {
        turns.push_back(turn(Role::kSystem, "Be brief."));
        messages.push_back({"system", "Be brief."});
      }
      const int n = std::uniform_int_distribution<int>(1, 5)(rng);
      for (int i = 0; i < n; ++i) {
        const std::string text = texts[std::uniform_int_distribution<int>(0, 5)(rng)];
        const bool user = i % 2 == 0;
        turns.push_back(turn(user ? Role::kUser : Role::kAssistant, text));
        messages.push_back({user ? "user" : "assistant", text});
      }
      const ChatPrompt p = render_chat_prompt(format, turns, {}, {});
      EXPECT_EQ(p.text, format.render(messages, true)) << name;
      EXPECT_FALSE(p.tool_syntax);
      EXPECT_TRUE(p.forced_prefix.empty());
      EXPECT_TRUE(p.stop_tokens.empty());
    }
  }
}

ToolSpec weather_tool() {
  return {"weather", "Weather",
          Json::parse(R"({"type":"object","properties":{"city":{"type":"string","description":"City"}},"required":["city"]})")};
}

// A Gemma 4 tool exchange: declarations in the system turn; the call and its
// result inside the model turn, which stays open for the model to go on
// (the shape of the Gemma 4 template's tool loop).
TEST(ChatPrompt, Gemma4ToolLoop) {
  const ChatFormat format = ChatFormat::by_name("gemma4");
  ChatTurn call = turn(Role::kAssistant, "");
  call.tool_calls.push_back({"call_1", "weather", Json::parse(R"({"city":"Paris"})")});
  ChatTurn result = turn(Role::kTool, "sunny");
  result.tool_name = "weather";
  const std::vector<ChatTurn> turns = {turn(Role::kUser, "Plan"), call, result};
  const ToolSpec tools[] = {weather_tool()};
  const ChatPrompt p = render_chat_prompt(format, turns, tools, {});
  EXPECT_EQ(p.text,
            "<bos><|turn>system\n<|tool>declaration:weather{description:<|\"|>Weather<|\"|>,parameters:{properties:{"
            "city:{description:<|\"|>City<|\"|>,type:<|\"|>STRING<|\"|>}},required:[<|\"|>city<|\"|>],type:<|\"|>"
            "OBJECT<|\"|>}}<tool|><turn|>\n<|turn>user\nPlan<turn|>\n<|turn>model\n<|tool_call>call:weather{city:"
            "<|\"|>Paris<|\"|>}<tool_call|><|tool_response>response:weather{value:<|\"|>sunny<|\"|>}<tool_response|>");
  EXPECT_EQ(p.tool_syntax, ToolSyntax::kGemma4);
  EXPECT_EQ(p.stop_tokens, std::vector<std::string>{"<|tool_response>"});

  // The reply after the results closes that same model turn.
  std::vector<ChatTurn> longer = turns;
  longer.push_back(turn(Role::kAssistant, " It is sunny. "));
  longer.push_back(turn(Role::kUser, "Thanks"));
  const ChatPrompt q = render_chat_prompt(format, longer, tools, {});
  EXPECT_NE(q.text.find("<tool_response|>It is sunny.<turn|>\n<|turn>user\nThanks<turn|>\n<|turn>model\n"),
            std::string::npos)
      << q.text;

  // A system message comes first, then the declarations.
  std::vector<ChatTurn> with_system = turns;
  with_system.insert(with_system.begin(), turn(Role::kSystem, " Be brief. "));
  EXPECT_TRUE(render_chat_prompt(format, with_system, tools, {}).text.starts_with(
      "<bos><|turn>system\nBe brief.<|tool>declaration:weather{"));
}

// Thinking reaches the chat format on every path: plain, with tools, and a
// tool loop left open for the model to continue.
TEST(ChatPrompt, ThinkingOptionsReachTheFormatWithAndWithoutTools) {
  const ToolSpec tools[] = {weather_tool()};
  const std::vector<ChatTurn> ask = {turn(Role::kUser, "Weather?")};
  const tokenizer::ChatOptions on{.enable_thinking = true}, off{.enable_thinking = false};
  const ChatFormat gemma = ChatFormat::by_name("gemma4");
  EXPECT_TRUE(render_chat_prompt(gemma, ask, {}, {}, on).text.starts_with("<bos><|turn>system\n<|think|>\n<turn|>\n"));
  EXPECT_TRUE(render_chat_prompt(gemma, ask, tools, {}, on).text.starts_with("<bos><|turn>system\n<|think|>\n<|tool>declaration:"));
  ChatTurn call = turn(Role::kAssistant, "");
  call.tool_calls.push_back({"call_1", "weather", Json::parse(R"({"city":"Paris"})")});
  ChatTurn result = turn(Role::kTool, "sunny");
  result.tool_name = "weather";
  const std::vector<ChatTurn> loop = {ask[0], call, result};
  const ChatPrompt open = render_chat_prompt(gemma, loop, tools, {}, on);
  EXPECT_TRUE(open.text.starts_with("<bos><|turn>system\n<|think|>\n")) << open.text;
  EXPECT_TRUE(open.text.ends_with("<tool_response|>")) << open.text;
  // Qwen 3 (a template with <think>): off appends the empty think block, also after tool results.
  const ChatFormat qwen3 = ChatFormat::detect("<|im_start|>{% if enable_thinking %}<think>{% endif %}", "qwen3");
  EXPECT_TRUE(render_chat_prompt(qwen3, ask, {}, {}, off).text.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_TRUE(render_chat_prompt(qwen3, loop, tools, {}, off).text.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_TRUE(render_chat_prompt(qwen3, loop, tools, {}, on).text.ends_with("</tool_response><|im_end|>\n<|im_start|>assistant\n"));
}

TEST(ChatPrompt, ToolChoiceForcesTheCallsOpening) {
  const ToolSpec tools[] = {weather_tool()};
  const std::vector<ChatTurn> turns = {turn(Role::kUser, "Weather in Paris?")};
  const ChatFormat gemma = ChatFormat::by_name("gemma4");
  const ChatPrompt named = render_chat_prompt(gemma, turns, tools, {ToolChoice::Mode::kNamed, "weather"});
  EXPECT_EQ(named.forced_prefix, "<|tool_call>call:weather{");
  EXPECT_TRUE(named.text.ends_with("<|turn>model\n<|tool_call>call:weather{"));
  const ChatPrompt required = render_chat_prompt(gemma, turns, tools, {ToolChoice::Mode::kRequired, ""});
  EXPECT_TRUE(required.text.ends_with("<|turn>model\n<|tool_call>call:"));
  // "none": no declarations, no parsing; the prompt is the plain one.
  const ChatPrompt none = render_chat_prompt(gemma, turns, tools, {ToolChoice::Mode::kNone, ""});
  EXPECT_EQ(none.text, gemma.render(std::vector<tokenizer::ChatMessage>{{"user", "Weather in Paris?"}}, true));
  EXPECT_FALSE(none.tool_syntax);
}

TEST(ChatPrompt, ChatMLToolLoop) {
  const ChatFormat format = ChatFormat::by_name("chatml");
  ChatTurn call = turn(Role::kAssistant, "Checking.");
  call.tool_calls.push_back({"c1", "weather", Json::parse(R"({"city":"Paris"})")});
  call.tool_calls.push_back({"c2", "weather", Json::parse(R"({"city":"Oslo"})")});
  ChatTurn r1 = turn(Role::kTool, "sunny"), r2 = turn(Role::kTool, "snow");
  r1.tool_name = r2.tool_name = "weather";
  const ToolSpec tools[] = {weather_tool()};
  const ChatPrompt p = render_chat_prompt(format, {{turn(Role::kUser, "Weather?"), call, r1, r2}}, tools, {});
  EXPECT_TRUE(p.text.starts_with("<|im_start|>system\n# Tools\n")) << p.text;
  EXPECT_NE(p.text.find("<|im_start|>assistant\nChecking.\n<tool_call>\n{\"name\": \"weather\", \"arguments\": "
                        "{\"city\":\"Paris\"}}\n</tool_call>\n<tool_call>\n"),
            std::string::npos)
      << p.text;
  EXPECT_NE(p.text.find("<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\nsnow\n"
                        "</tool_response><|im_end|>\n<|im_start|>assistant\n"),
            std::string::npos)
      << p.text;
  EXPECT_EQ(p.tool_syntax, ToolSyntax::kJsonTags);
}

TEST(ChatPrompt, RejectsToolsWhereTheFormatHasNoMarkup) {
  const ToolSpec tools[] = {weather_tool()};
  const std::vector<ChatTurn> turns = {turn(Role::kUser, "Hi")};
  for (const char* name : {"gemma3", "llama3"}) {
    try {
      render_chat_prompt(ChatFormat::by_name(name), turns, tools, {});
      FAIL() << name;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(e.param(), "tools");
    }
  }
  // A result with no call before it.
  ChatTurn orphan = turn(Role::kTool, "42");
  orphan.tool_name = "f";
  for (const char* name : {"gemma4", "chatml"}) {
    try {
      render_chat_prompt(ChatFormat::by_name(name), {{turn(Role::kUser, "Hi"), orphan}}, tools, {});
      FAIL() << name;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.param(), "messages[1]");
    }
  }
}

}  // namespace
}  // namespace rowlm::server
