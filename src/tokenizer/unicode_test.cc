// UTF-8 and Unicode helpers, against the Unicode standard's own examples and
// simple oracles.

#include "tokenizer/unicode.h"

#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "tokenizer/regex.h"

namespace rowlm::tok {
namespace {

TEST(Unicode, LossyDecodingReplacesMaximalSubparts) {
  // The Unicode standard's example (table 3-8 of chapter 3): each maximal
  // ill-formed subpart becomes one U+FFFD, as in Rust's from_utf8_lossy.
  const std::string bytes = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_lossy(bytes), "a" + r + r + r + "b" + r + "c" + r + r + "d");
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), r + r + r);  // a surrogate: three subparts
  EXPECT_EQ(utf8_lossy("\xF4\x90\x80\x80"), r + r + r + r);  // above U+10FFFF
  EXPECT_EQ(utf8_lossy("ok \xE2\x82\xAC"), "ok \xE2\x82\xAC");
}

TEST(Unicode, ValidityAgreesWithEncodeDecodeRoundTrip) {
  // Oracle: a byte string is valid iff decoding it code point by code point
  // and re-encoding gives it back; check random short strings of "risky" bytes.
  std::mt19937 rng(3);
  const unsigned char risky[] = {0x41, 0x80, 0xBF, 0xC0, 0xC2, 0xDF, 0xE0, 0xA0, 0xED, 0x9F,
                                 0xEF, 0xF0, 0x90, 0xF4, 0x8F, 0xF5, 0xFF};
  for (int i = 0; i < 20000; ++i) {
    std::string s(1 + rng() % 5, '\0');
    for (char& c : s) c = char(risky[rng() % sizeof risky]);
    const bool valid = find_invalid_utf8(s) == std::string::npos;
    EXPECT_EQ(valid, utf8_lossy(s) == s) << i;
    if (!valid) continue;
    std::string again;
    for (std::size_t k = 0; k < s.size();) {
      std::size_t len = 0;
      const char32_t cp = decode_utf8(s, k, &len);
      EXPECT_FALSE(cp >= 0xD800 && cp <= 0xDFFF);
      EXPECT_LE(cp, 0x10FFFFu);
      append_utf8(again, cp);
      k += len;
    }
    EXPECT_EQ(again, s);
  }
  EXPECT_THROW(require_utf8("a\xFF", "the text"), Error);
}

TEST(Unicode, IncompleteTail) {
  EXPECT_EQ(incomplete_utf8_tail(""), 0u);
  EXPECT_EQ(incomplete_utf8_tail("abc"), 0u);
  EXPECT_EQ(incomplete_utf8_tail("a\xE2"), 1u);
  EXPECT_EQ(incomplete_utf8_tail("a\xE2\x82"), 2u);
  EXPECT_EQ(incomplete_utf8_tail("a\xE2\x82\xAC"), 0u);
  EXPECT_EQ(incomplete_utf8_tail("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(incomplete_utf8_tail("a\x80"), 0u);      // a stray continuation is settled
  EXPECT_EQ(incomplete_utf8_tail("\xE0\x80"), 0u);   // E0 80 can never complete
  EXPECT_EQ(incomplete_utf8_tail("\xED\xA0"), 0u);   // nor can a surrogate
}

TEST(Unicode, NormalizationAndCase) {
  EXPECT_EQ(unicode_normalize("e\xCC\x81", NormalForm::NFC), "\xC3\xA9");
  EXPECT_EQ(unicode_normalize("\xC3\xA9", NormalForm::NFD), "e\xCC\x81");
  EXPECT_EQ(unicode_normalize("\xEF\xAC\x81", NormalForm::NFKC), "fi");  // the ligature ﬁ
  EXPECT_EQ(unicode_normalize("\xEF\xAC\x81", NormalForm::NFC), "\xEF\xAC\x81");
  EXPECT_EQ(unicode_normalize(std::string("a\0b", 3), NormalForm::NFKC), std::string("a\0b", 3));
  EXPECT_EQ(lowercase("HeLLo \xC3\x89\xCE\xA3"), "hello \xC3\xA9\xCF\x83");
  EXPECT_EQ(lowercase("\xC4\xB0"), "i\xCC\x87");  // İ lowercases to two characters
  EXPECT_TRUE(is_whitespace(0x85) && is_whitespace(0x3000) && !is_whitespace(0x200B));
  EXPECT_TRUE(is_numeric(U'٣') && is_numeric(U'½') && !is_numeric(U'a'));
  EXPECT_TRUE(is_word_char(U'_') && is_word_char(0x301) && !is_word_char(U'-'));
}

std::vector<Span> matches(const std::string& pattern, const std::string& text) {
  std::vector<Span> out;
  Regex(pattern).find_all(text, out);
  return out;
}

TEST(Regex, OnigurumaClassesAndIteration) {
  // \s is Unicode White_Space (with NEL), as in Oniguruma.
  EXPECT_EQ(matches("\\s+", "a\xC2\x85 b").size(), 1u);
  EXPECT_EQ(matches("[^\\s\\p{L}]+", "ab\xC2\x85!!c").size(), 1u);
  EXPECT_EQ(matches("\\w+", "ab_c\xCC\x81 d").front().end, 6u);
  // Empty matches: not right after the previous match, as Oniguruma's find_iter.
  const auto m = matches("a*", "baab");
  ASSERT_EQ(m.size(), 3u);
  EXPECT_TRUE(m[0].begin == 0 && m[0].end == 0);
  EXPECT_TRUE(m[1].begin == 1 && m[1].end == 3);
  EXPECT_TRUE(m[2].begin == 4 && m[2].end == 4);
  EXPECT_THROW(Regex("(unclosed"), Error);
  EXPECT_THROW(Regex("[\\W]"), Error);
  EXPECT_EQ(translate_oniguruma_pattern("[\\s\\d]\\h"), "[\\p{White_Space}\\p{Nd}][0-9a-fA-F]");
}

TEST(Regex, LongRunsDoNotExhaustTheJitStack) {
  const std::string text(200000, ' ');
  const auto m = matches(R"(\s+(?!\S)|\s+)", text + "x");
  ASSERT_FALSE(m.empty());
}

}  // namespace
}  // namespace rowlm::tok
