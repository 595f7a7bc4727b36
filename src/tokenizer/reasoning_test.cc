#include "tokenizer/reasoning.h"

#include <random>

#include <gtest/gtest.h>

namespace rowlm::tokenizer {
namespace {

constexpr auto kGemma = ReasoningSyntax::kGemma4Channel;
constexpr auto kQwen = ReasoningSyntax::kThinkTags;

bool space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
std::string_view trim_left(std::string_view s) {
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  return s;
}
std::string_view trim_right(std::string_view s) {
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// The rule of reasoning.h written directly on the whole text, as the oracle
// of the streaming splitter.
ReasoningSplit oracle(std::string_view open, std::string_view close, std::string_view text, bool inside) {
  if (!inside) {
    const std::string_view rest = trim_left(text);
    if (!rest.starts_with(open)) return {"", std::string(text)};
    text = rest.substr(open.size());
  }
  const std::size_t k = text.find(close);
  if (k == std::string_view::npos) return {std::string(trim_left(text)), ""};
  return {std::string(trim_right(trim_left(text.substr(0, k)))), std::string(trim_left(text.substr(k + close.size())))};
}

TEST(Reasoning, SplitsEachMarkup) {
  ReasoningSplit s = split_reasoning(kGemma, "<|channel>thought\nLet me add.<channel|>4");
  EXPECT_EQ(s.reasoning, "Let me add.");
  EXPECT_EQ(s.content, "4");
  s = split_reasoning(kQwen, "<think>\nadd them\n</think>\n\nIt is 4.");
  EXPECT_EQ(s.reasoning, "add them");
  EXPECT_EQ(s.content, "It is 4.");
  // Not at the start: all answer, markup included.
  s = split_reasoning(kQwen, "Sure. <think>x</think> y");
  EXPECT_EQ(s.reasoning, "");
  EXPECT_EQ(s.content, "Sure. <think>x</think> y");
  // Unclosed: all reasoning (the budget ran out, or the reply was cut).
  s = split_reasoning(kGemma, "<|channel>thought\nstill going");
  EXPECT_EQ(s.reasoning, "still going");
  EXPECT_EQ(s.content, "");
  // The prompt opened the span.
  EXPECT_TRUE(prompt_opens_reasoning(kQwen, "<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning(kQwen, "<|im_start|>assistant\n"));
  s = split_reasoning(kQwen, "hmm\n</think>\n\nyes", /*starts_inside=*/true);
  EXPECT_EQ(s.reasoning, "hmm");
  EXPECT_EQ(s.content, "yes");
  // A prefix of the opener that never completes is answer.
  s = split_reasoning(kGemma, " <|channel>though");
  EXPECT_EQ(s.content, " <|channel>though");
}

// However the text is cut into pieces, the stream's pieces add up to the
// oracle's split; in_reasoning() says whether the span is open.
TEST(Reasoning, StreamAgreesWithTheOracleForEveryCut) {
  std::mt19937 rng(11);
  const char* pieces[] = {"<think>", "</think>", "<|channel>thought", "<channel|>", "\n", " ", "ab", "<", "|", "think",
                          "chan", "4", "é"};
  for (ReasoningSyntax syntax : {kGemma, kQwen}) {
    const ReasoningMarkup m = reasoning_markup(syntax);
    for (int trial = 0; trial < 3000; ++trial) {
      std::string text;
      if (trial % 2) text += std::string(trial % 4 == 1 ? "\n" : "") + std::string(m.open);
      const int n = std::uniform_int_distribution<int>(0, 12)(rng);
      for (int i = 0; i < n; ++i) text += pieces[rng() % std::size(pieces)];
      const bool inside = trial % 7 == 0;
      ReasoningStream stream(syntax, inside);
      ReasoningSplit got;
      std::size_t pos = 0;
      while (pos < text.size()) {
        const std::size_t len = std::uniform_int_distribution<std::size_t>(0, 6)(rng);
        ReasoningSplit part = stream.push(std::string_view(text).substr(pos, len));
        got.reasoning += part.reasoning;
        got.content += part.content;
        pos += len;
      }
      const bool open_at_end = stream.in_reasoning();
      ReasoningSplit rest = stream.finish();
      got.reasoning += rest.reasoning;
      got.content += rest.content;
      const ReasoningSplit want = oracle(m.open, m.close, text, inside);
      ASSERT_EQ(got.reasoning, want.reasoning) << "text: " << text;
      ASSERT_EQ(got.content, want.content) << "text: " << text;
      const ReasoningSplit whole = split_reasoning(syntax, text, inside);
      ASSERT_EQ(whole.reasoning, want.reasoning);
      ASSERT_EQ(whole.content, want.content);
      // The span is open at the end iff it began and its closer never came.
      const std::string_view after = inside ? std::string_view(text) : trim_left(text);
      const bool began = inside || after.starts_with(m.open);
      const bool closed = began && after.substr(inside ? 0 : m.open.size()).find(m.close) != std::string_view::npos;
      ASSERT_EQ(open_at_end, began && !closed) << "text: " << text;
    }
  }
}

}  // namespace
}  // namespace rowlm::tokenizer
