#include "tokenizer/chat_format.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"

namespace rowlm::tokenizer {
namespace {

using Messages = std::vector<ChatMessage>;

ChatMessage sys(std::string c) { return {"system", std::move(c)}; }
ChatMessage user(std::string c) { return {"user", std::move(c)}; }
ChatMessage bot(std::string c) { return {"assistant", std::move(c)}; }

// Each family's documented prompt shape, written out by hand from its
// model card / docs (Gemma 4: docs/design/families.md, chat formats).
TEST(ChatFormat, RendersEachFamilysDocumentedFormat) {
  const Messages conv = {sys("You are a helpful assistant."), user("Hello"), bot("Hi there!"), user("How are you?")};
  EXPECT_EQ(ChatFormat::by_name("gemma4").render(conv, true),
            "<bos><|turn>system\nYou are a helpful assistant.<turn|>\n<|turn>user\nHello<turn|>\n"
            "<|turn>model\nHi there!<turn|>\n<|turn>user\nHow are you?<turn|>\n<|turn>model\n");
  EXPECT_EQ(ChatFormat::by_name("gemma3").render(conv, true),
            "<bos><start_of_turn>user\nYou are a helpful assistant.\n\nHello<end_of_turn>\n"
            "<start_of_turn>model\nHi there!<end_of_turn>\n<start_of_turn>user\nHow are you?<end_of_turn>\n"
            "<start_of_turn>model\n");
  EXPECT_EQ(ChatFormat::by_name("chatml").render(conv, true),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
            "<|im_start|>assistant\nHi there!<|im_end|>\n<|im_start|>user\nHow are you?<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(ChatFormat::by_name("llama3").render(conv, true),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHi there!<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHow are you?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  // Without a system message Gemma 4 writes no system turn.
  EXPECT_EQ(ChatFormat::by_name("gemma4").render(Messages{user("Hi")}, true),
            "<bos><|turn>user\nHi<turn|>\n<|turn>model\n");
}

TEST(ChatFormat, StopTokensAndBos) {
  EXPECT_EQ(ChatFormat::by_name("gemma4").end_of_turn(), "<turn|>");
  EXPECT_EQ(ChatFormat::by_name("gemma4").stop_tokens(), (std::vector<std::string>{"<turn|>", "<eos>"}));
  EXPECT_EQ(ChatFormat::by_name("gemma3").end_of_turn(), "<end_of_turn>");
  EXPECT_EQ(ChatFormat::by_name("chatml").end_of_turn(), "<|im_end|>");
  EXPECT_EQ(ChatFormat::by_name("llama3").end_of_turn(), "<|eot_id|>");
  EXPECT_EQ(ChatFormat::by_name("gemma4").bos(), "<bos>");
  EXPECT_EQ(ChatFormat::by_name("chatml").bos(), "");
  EXPECT_EQ(ChatFormat::by_name("llama3").bos(), "<|begin_of_text|>");
}

TEST(ChatFormat, Gemma4TrimsStripsThinkingFromHistoryAndCanAskForThinking) {
  const ChatFormat g4 = ChatFormat::by_name("gemma4");
  const Messages conv = {{"developer", "  Be terse. \n"},
                         user("\t2+2?\n"),
                         bot("<|channel>thought\nadd them<channel|>4 \n"),
                         user("and 3+3?")};
  EXPECT_EQ(g4.render(conv, true),
            "<bos><|turn>system\nBe terse.<turn|>\n<|turn>user\n2+2?<turn|>\n<|turn>model\n4<turn|>\n"
            "<|turn>user\nand 3+3?<turn|>\n<|turn>model\n");
  EXPECT_EQ(g4.render(Messages{user("hi")}, true, ChatOptions{.enable_thinking = true}),
            "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nhi<turn|>\n<|turn>model\n");
  EXPECT_THROW(g4.render(Messages{user("q"), {"tool", "{}"}}, false), Error);
}

TEST(ChatFormat, Gemma4LargeModelTemplatesAddAnEmptyThoughtChannel) {
  const ChatFormat plain = ChatFormat::detect("{{ '<|turn>' + role + '\\n' }}", "gemma4");
  EXPECT_FALSE(plain.empty_thought_channel());
  const ChatFormat big =
      ChatFormat::detect("{{- '<|turn>model\\n' -}}{{- '<|channel>thought\\n<channel|>' -}}", "gemma4");
  EXPECT_TRUE(big.empty_thought_channel());
  EXPECT_EQ(big.render(Messages{user("hi")}, true), "<bos><|turn>user\nhi<turn|>\n<|turn>model\n<|channel>thought\n<channel|>");
  EXPECT_EQ(big.render(Messages{user("hi")}, true, ChatOptions{.enable_thinking = true}),
            "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nhi<turn|>\n<|turn>model\n");
}

TEST(ChatFormat, Gemma3FoldsTheSystemMessageAndEnforcesAlternation) {
  const ChatFormat g3 = ChatFormat::by_name("gemma3");
  // The system text is not trimmed; the user text is.
  EXPECT_EQ(g3.render(Messages{sys(" sys "), user(" q ")}, false),
            "<bos><start_of_turn>user\n sys \n\nq<end_of_turn>\n");
  EXPECT_THROW(g3.render(Messages{bot("first")}, false), Error);
  EXPECT_THROW(g3.render(Messages{user("a"), user("b")}, false), Error);
  EXPECT_THROW(g3.render(Messages{sys("s"), bot("a")}, false), Error);
}

TEST(ChatFormat, QwenTemplatesGetTheirDefaultSystemMessage) {
  const ChatFormat qwen = ChatFormat::detect(
      "{%- if messages[0]['role'] != 'system' %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. "
      "You are a helpful assistant.<|im_end|>\\n' }}{%- endif %}<|im_start|>",
      "qwen2");
  EXPECT_EQ(qwen.render(Messages{user("hi")}, true),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(qwen.render(Messages{sys("mine"), user("hi")}, false),
            "<|im_start|>system\nmine<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n");
  EXPECT_EQ(ChatFormat::by_name("chatml").default_system(), "");
}

// Qwen 3's template (recognised by <think>), written out by hand from it:
// thinking is on unless enable_thinking is false, which appends an empty
// think block; assistant turns before the last user query lose their
// reasoning, later ones (a tool loop) keep it in the template's layout.
TEST(ChatFormat, Qwen3ThinkingFollowsItsTemplate) {
  const ChatFormat qwen3 = ChatFormat::detect("{{- '<|im_start|>' }}{%- if enable_thinking %}<think>{% endif %}", "qwen3");
  EXPECT_TRUE(qwen3.supports_thinking());
  EXPECT_TRUE(qwen3.thinking_on({}));
  EXPECT_FALSE(qwen3.thinking_on({.enable_thinking = false}));
  EXPECT_EQ(qwen3.render(Messages{user("hi")}, true), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(qwen3.render(Messages{user("hi")}, true, {.enable_thinking = false}),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  const Messages conv = {user("2+2?"), bot("<think>\nadd\n</think>\n\n4"), user("and 5?"),
                         bot("<think>\nlook\n\n</think>\n\ncall"), user("<tool_response>\n5\n</tool_response>")};
  EXPECT_EQ(qwen3.render(conv, false),
            "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
            "<|im_start|>user\nand 5?<|im_end|>\n<|im_start|>assistant\n<think>\nlook\n</think>\n\ncall<|im_end|>\n"
            "<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n");
  // Without <think> in the template (Qwen 2.5, or no template): no thinking mode.
  const ChatFormat plain = ChatFormat::detect("<|im_start|>", "qwen2");
  EXPECT_FALSE(plain.supports_thinking());
  EXPECT_FALSE(plain.thinking_on({.enable_thinking = true}));
  EXPECT_EQ(plain.render(Messages{bot("<think>x</think>y")}, true, {.enable_thinking = false}),
            "<|im_start|>assistant\n<think>x</think>y<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_FALSE(ChatFormat::by_name("gemma4").thinking_on({}));
  EXPECT_TRUE(ChatFormat::by_name("gemma4").thinking_on({.enable_thinking = true}));
}

TEST(ChatFormat, PythonStripRemovesExactlyPythonsWhitespace) {
  EXPECT_EQ(python_strip(" \t\n\r\v\f x y \x1c\x1f"), "x y");
  EXPECT_EQ(python_strip("\u3000\u00a0\u2003\u2028\u0085x\u205f\u202f\u1680"), "x");
  EXPECT_EQ(python_strip("\u200bx\ufeff"), "\u200bx\ufeff");  // zero-width space and BOM are not spaces
  EXPECT_EQ(python_strip(" \n "), "");
  EXPECT_EQ(python_strip(""), "");
  EXPECT_EQ(python_strip(" \xff "), "\xff");  // a stray byte counts as text
}

TEST(ChatFormat, RejectsBadConversations) {
  for (const std::string& name : ChatFormat::names()) {
    const ChatFormat f = ChatFormat::by_name(name);
    EXPECT_THROW(f.render(Messages{}, true), Error) << name;
    EXPECT_THROW(f.render(Messages{{"", "x"}}, true), Error) << name;
    EXPECT_THROW(f.render(Messages{{"user\n", "x"}}, true), Error) << name;
    EXPECT_THROW(f.render(Messages{user("bad \xc3")}, true), Error) << name;
  }
  try {
    ChatFormat::by_name("mistral");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gemma4, gemma3, chatml, llama3"), std::string::npos) << e.what();
  }
}

// Random valid conversations for every format; contents already trimmed
// and free of thinking, so the prefix property must hold.
Messages random_conversation(std::mt19937& rng) {
  static const std::vector<std::string> texts = {"hi", "what is 2+2?", "4", "ok\nthen", "日本語", "🙂 fine",
                                                 "a  b", "x"};
  Messages m;
  if (rng() % 2) m.push_back(sys(texts[rng() % texts.size()]));
  const int turns = 1 + int(rng() % 6);
  for (int t = 0; t < turns; ++t) m.push_back(t % 2 == 0 ? user(texts[rng() % texts.size()]) : bot(texts[rng() % texts.size()]));
  return m;
}

std::vector<ChatFormat> all_formats() {
  std::vector<ChatFormat> all;
  for (const std::string& name : ChatFormat::names()) all.push_back(ChatFormat::by_name(name));
  all.push_back(ChatFormat::detect("You are a helpful assistant. <|im_start|>", "qwen2"));
  return all;
}

bool is_prefix(const std::string& a, const std::string& b) { return b.compare(0, a.size(), a) == 0; }

TEST(ChatFormat, RenderingAConversationPrefixIsAPrefixOfTheLongerRendering) {
  std::mt19937 rng(40);
  for (const ChatFormat& f : all_formats()) {
    for (int trial = 0; trial < 200; ++trial) {
      const Messages m = random_conversation(rng);
      const std::string whole = f.render(m, false);
      for (std::size_t k = 1; k < m.size(); ++k) {
        const Messages head(m.begin(), m.begin() + k);
        ASSERT_TRUE(is_prefix(f.render(head, false), whole)) << f.name() << " k=" << k;
        if (m[k].role != "assistant") continue;
        // The generation prompt opens the turn the reply then fills.
        const std::string prompt = f.render(head, true);
        ASSERT_TRUE(is_prefix(prompt, whole)) << f.name() << " k=" << k;
        // After the reply (without the end-of-turn token the model stopped
        // on) the rest of the conversation is the continuation, and it
        // starts with that token.
        const std::string kv = prompt + m[k].content;
        const std::optional<std::string> rest = f.continuation(kv, m, true);
        ASSERT_TRUE(rest.has_value()) << f.name();
        EXPECT_EQ(kv + *rest, f.render(m, true));
        EXPECT_EQ(rest->compare(0, f.end_of_turn().size(), f.end_of_turn()), 0) << f.name() << ": " << *rest;
      }
    }
  }
}

TEST(ChatFormat, ContinuationReportsWhereTheFormatBreaksThePrefixProperty) {
  // Trimmed formats: a reply with trailing whitespace differs from history.
  const Messages conv = {user("q"), bot("answer\n"), user("next")};
  for (const char* name : {"gemma4", "gemma3", "llama3"}) {
    const ChatFormat f = ChatFormat::by_name(name);
    const std::string kv = f.render(Messages{user("q")}, true) + "answer\n";
    EXPECT_FALSE(f.continuation(kv, conv, true).has_value()) << name;
  }
  const ChatFormat chatml = ChatFormat::by_name("chatml");  // verbatim contents: still a prefix
  EXPECT_TRUE(chatml.continuation(chatml.render(Messages{user("q")}, true) + "answer\n", conv, true).has_value());
  // Gemma 4 drops thinking from history.
  const ChatFormat g4 = ChatFormat::by_name("gemma4");
  const Messages thought = {user("q"), bot("<|channel>thought\nhmm<channel|>A"), user("next")};
  EXPECT_FALSE(g4.continuation(g4.render(Messages{user("q")}, true) + thought[1].content, thought, true).has_value());
  // The empty-thought-channel variant's generation prompt is not in history.
  const ChatFormat big = ChatFormat::detect("'<|turn>' '<|channel>thought\\n<channel|>'", "gemma4");
  EXPECT_FALSE(big.continuation(big.render(Messages{user("q")}, true) + "A", Messages{user("q"), bot("A"), user("n")}, true)
                   .has_value());
}

class ModelDir {
 public:
  ModelDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("rowlm_chat_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ModelDir() { std::filesystem::remove_all(path_); }
  void write(const std::string& file, const std::string& text) const { std::ofstream(path_ / file) << text; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

TEST(ChatFormat, ChoosesFromTheModelDirectory) {
  {
    ModelDir d;
    d.write("config.json", R"({"model_type": "gemma4", "text_config": {"model_type": "gemma4_text"}})");
    EXPECT_EQ(ChatFormat::from_model_dir(d.path()).name(), "gemma4");
  }
  {
    ModelDir d;  // the template beats model_type (a Llama fine-tune with ChatML)
    d.write("config.json", R"({"model_type": "llama"})");
    d.write("tokenizer_config.json", R"({"chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}"})");
    EXPECT_EQ(ChatFormat::from_model_dir(d.path()).name(), "chatml");
  }
  {
    ModelDir d;  // a standalone chat_template.jinja wins over tokenizer_config.json
    d.write("tokenizer_config.json", R"({"chat_template": "<|im_start|>"})");
    d.write("chat_template.jinja", "{{ bos_token }}<start_of_turn>user");
    EXPECT_EQ(ChatFormat::from_model_dir(d.path()).name(), "gemma3");
  }
  {
    ModelDir d;  // list-form templates: the "default" one
    d.write("tokenizer_config.json",
            R"({"chat_template": [{"name": "tool_use", "template": "<|im_start|>"},
                                  {"name": "default", "template": "<|start_header_id|>"}]})");
    EXPECT_EQ(ChatFormat::from_model_dir(d.path()).name(), "llama3");
  }
  {
    ModelDir d;  // no template: model_type, and Llama 3 needs its BOS to tell it from Llama 2
    d.write("config.json", R"({"model_type": "llama"})");
    d.write("tokenizer_config.json", R"({"bos_token": {"content": "<|begin_of_text|>"}})");
    EXPECT_EQ(ChatFormat::from_model_dir(d.path()).name(), "llama3");
  }
  {
    ModelDir d;
    d.write("config.json", R"({"model_type": "qwen3"})");
    EXPECT_EQ(ChatFormat::from_model_dir(d.path()).name(), "chatml");
  }
  // Every family rowlm loads (model/families.h) without a template, by model_type.
  for (const auto& [model_type, format] : {std::pair{"qwen2", "chatml"}, std::pair{"qwen3_moe", "chatml"},
                                           std::pair{"gemma3", "gemma3"}, std::pair{"gemma3_text", "gemma3"},
                                           std::pair{"gemma4_text", "gemma4"}}) {
    ModelDir d;
    d.write("config.json", std::string(R"({"model_type": ")") + model_type + "\"}");
    EXPECT_EQ(ChatFormat::from_model_dir(d.path()).name(), format) << model_type;
  }
}

TEST(ChatFormat, ModelDirectoryErrorsNameTheProblem) {
  auto message = [](const std::filesystem::path& p) {
    try {
      ChatFormat::from_model_dir(p);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("/nonexistent/model").find("does not exist"), std::string::npos);
  {
    ModelDir d;
    d.write("config.json", R"({"model_type": "llama"})");  // Llama 2? unknown
    const std::string m = message(d.path());
    EXPECT_NE(m.find("model_type 'llama'"), std::string::npos) << m;
    EXPECT_NE(m.find("--chat-format"), std::string::npos) << m;
  }
  {
    ModelDir d;
    d.write("tokenizer_config.json", "{not json");
    EXPECT_NE(message(d.path()).find("tokenizer_config.json is not valid JSON"), std::string::npos);
  }
  {
    ModelDir d;
    d.write("tokenizer_config.json", R"({"chat_template": 42})");
    EXPECT_NE(message(d.path()).find("chat_template"), std::string::npos);
  }
}

// Each family's own template through transformers' apply_chat_template:
// fixtures made by tools/chat_ref/render_chat_refs.py where transformers is
// installed (Gemma 3's template ships here, in tools/chat_ref). Skipped
// until a fixture is committed under tests/fixtures/chat_ref/.
TEST(ChatFormat, MatchesTheTemplateFixtures) {
  const std::filesystem::path dir = std::filesystem::path(ROWLM_SOURCE_DIR) / "tests/fixtures/chat_ref";
  if (!std::filesystem::is_directory(dir)) GTEST_SKIP() << dir << " not present (see tools/chat_ref/render_chat_refs.py)";
  int fixtures = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path());
    const nlohmann::json f = nlohmann::json::parse(in);
    // The format detected from the template itself must be the one the
    // fixture was made for (this also checks the variant detection).
    const ChatFormat format = ChatFormat::detect(f.at("template").get<std::string>(), "");
    ASSERT_EQ(format.name(), f.at("format").get<std::string>()) << entry.path();
    int checked = 0;
    for (const auto& c : f.at("cases")) {
      Messages messages;
      for (const auto& m : c.at("messages")) messages.push_back({m.at("role"), m.at("content")});
      const bool gen = c.at("add_generation_prompt");
      const std::string name = c.at("name");
      if (c.contains("error")) {
        EXPECT_THROW(format.render(messages, gen), Error) << name << " (the template raised " << c["error"] << ")";
      } else {
        EXPECT_EQ(format.render(messages, gen), c.at("rendered").get<std::string>()) << entry.path() << " " << name;
      }
      ++checked;
    }
    EXPECT_GT(checked, 20) << entry.path();
    std::printf("%s: %d cases rendered by %s\n", entry.path().filename().c_str(), checked,
                f.at("renderer").get<std::string>().c_str());
    ++fixtures;
  }
  if (fixtures == 0) GTEST_SKIP() << "no fixture in " << dir;
}

}  // namespace
}  // namespace rowlm::tokenizer
