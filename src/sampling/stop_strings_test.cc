#include "sampling/stop_strings.h"

#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "sampling/utf8_check.h"

namespace rowlm::sampling {
namespace {

struct StopRun {
  std::string text;               // everything emitted, flush included when no stop
  std::optional<std::size_t> stop;
};

StopRun feed_all(const std::vector<std::string>& stops, const std::vector<std::string>& pieces) {
  StopStringMatcher m(stops);
  StopRun run;
  for (const std::string& piece : pieces) {
    StopStringMatcher::Output out = m.feed(piece);
    run.text += out.text;
    if (out.stop) {
      run.stop = out.stop;
      break;
    }
  }
  if (!run.stop) run.text += m.flush();
  return run;
}

// The non-streaming definition over the whole text: among all occurrences
// of all stops, the one ending first, then starting first, then listed first.
StopRun oracle(const std::vector<std::string>& stops, const std::string& text) {
  StopRun run{text, std::nullopt};
  std::size_t best_end = std::string::npos, best_pos = std::string::npos;
  for (std::size_t i = 0; i < stops.size(); ++i) {
    for (std::size_t pos = 0; pos + stops[i].size() <= text.size(); ++pos) {
      if (text.compare(pos, stops[i].size(), stops[i]) != 0) continue;
      const std::size_t end = pos + stops[i].size();
      if (end < best_end || (end == best_end && pos < best_pos)) best_end = end, best_pos = pos, run.stop = i;
    }
  }
  if (run.stop) run.text = text.substr(0, best_pos);
  return run;
}

TEST(StopStrings, StopSpanningPiecesIsNeverEmitted) {
  StopStringMatcher m({"</answer>"});
  EXPECT_EQ(m.feed("The result is 42</").text, "The result is 42");
  EXPECT_EQ(m.held(), 2u);
  StopStringMatcher::Output out = m.feed("ans");
  EXPECT_EQ(out.text, "");
  EXPECT_FALSE(out.stop);
  out = m.feed("wer> trailing");
  EXPECT_EQ(out.text, "");
  EXPECT_EQ(out.stop, 0u);
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.feed("more").text, "");
}

TEST(StopStrings, HeldTextIsReleasedWhenItStopsLookingLikeAStop) {
  StopStringMatcher m({"###"});
  EXPECT_EQ(m.feed("a ##").text, "a ");
  EXPECT_EQ(m.feed(" b").text, "## b");
  EXPECT_EQ(m.feed("#").text, "");
  EXPECT_EQ(m.flush(), "#");
}

TEST(StopStrings, TheFirstStopToCompleteWinsWhateverTheSplit) {
  for (const auto& pieces : std::vector<std::vector<std::string>>{{"xabcd"}, {"xab", "cd"}, {"xabc", "d"}}) {
    const StopRun run = feed_all({"abcd", "bc"}, pieces);  // "bc" completes before "abcd"
    EXPECT_EQ(run.stop, 1u);
    EXPECT_EQ(run.text, "xa");
  }
  EXPECT_EQ(feed_all({"bc", "abc"}, {"xa", "bc"}).stop, 1u);  // same end: the earlier start
  EXPECT_EQ(feed_all({"bc", "abc"}, {"xa", "bc"}).text, "x");
  EXPECT_EQ(feed_all({"ab", "a"}, {"xab"}).stop, 1u);  // "a" is complete first
  EXPECT_EQ(feed_all({"q", "q"}, {"xq"}).stop, 0u);    // identical: the first listed
}

TEST(StopStrings, UnicodeStopsSplitInsideCharacters) {
  // "日本" split byte by byte: held back while it could still be the stop.
  const std::string stop = "\xe6\x97\xa5\xe6\x9c\xac";  // 日本
  std::vector<std::string> pieces = {"abc\xe6", "\x97", "\xa5", "\xe6\x9c", "\xac!"};
  const StopRun run = feed_all({stop}, pieces);
  EXPECT_EQ(run.text, "abc");
  EXPECT_EQ(run.stop, 0u);
}

TEST(StopStrings, RejectsEmptyAndInvalidStops) {
  EXPECT_THROW(StopStringMatcher({"ok", ""}), Error);
  EXPECT_THROW(StopStringMatcher({"\xe6\x97"}), Error);  // truncated character
  EXPECT_THROW(StopStringMatcher({"\xc0\xaf"}), Error);  // overlong '/'
  EXPECT_THROW(StopStringMatcher({"\xed\xa0\x80"}), Error);  // surrogate
  EXPECT_NO_THROW(StopStringMatcher({}));
}

// Random texts over a small alphabet (ASCII, 2-, 3- and 4-byte characters)
// so stops recur and overlap; random stop sets; random splits.
TEST(StopStrings, StreamingMatchesTheWholeTextOracleOverRandomSplits) {
  const std::vector<std::string> alphabet = {"a", "b", "\n", " ", "\xc3\xa9", "\xe6\x97\xa5", "\xf0\x9f\x98\x80"};
  std::mt19937 rng(30);
  auto random_string = [&](std::size_t max_chars, std::size_t min_chars) {
    std::string s;
    const std::size_t len = min_chars + rng() % (max_chars - min_chars + 1);
    for (std::size_t i = 0; i < len; ++i) s += alphabet[rng() % alphabet.size()];
    return s;
  };
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<std::string> stops(rng() % 4);
    for (auto& s : stops) s = random_string(4, 1);
    const std::string text = random_string(40, 0);
    const bool on_characters = trial % 2 == 0;

    // Split points: anywhere (bytes) or only between characters.
    std::vector<std::string> pieces;
    std::size_t pos = 0;
    while (pos < text.size()) {
      std::size_t len = 1 + rng() % 6;
      len = std::min(len, text.size() - pos);
      if (on_characters)
        while (pos + len < text.size() && (uint8_t(text[pos + len]) & 0xC0) == 0x80) ++len;
      pieces.push_back(text.substr(pos, len));
      pos += len;
      if (rng() % 5 == 0) pieces.push_back("");  // empty pieces are harmless
    }

    const StopRun want = oracle(stops, text);
    StopStringMatcher m(stops);
    StopRun got;
    std::string fed;
    std::size_t longest = 0;
    for (const auto& s : stops) longest = std::max(longest, s.size());
    for (const std::string& piece : pieces) {
      fed += piece;
      StopStringMatcher::Output out = m.feed(piece);
      if (on_characters) {
        ASSERT_TRUE(is_valid_utf8(out.text)) << "emitted half a character";
      }
      got.text += out.text;
      if (out.stop) {
        got.stop = out.stop;
        break;
      }
      // Nothing is lost, and only a possible stop start is held back.
      ASSERT_EQ(got.text.size() + m.held(), fed.size());
      ASSERT_LT(m.held(), std::max<std::size_t>(longest, 1));
      // It holds back no more than needed: the held tail is a stop prefix...
      const std::string tail = fed.substr(got.text.size());
      if (!tail.empty()) {
        bool prefix_of_some = false;
        for (const auto& s : stops) prefix_of_some |= s.compare(0, tail.size(), tail) == 0;
        ASSERT_TRUE(prefix_of_some) << "held back '" << tail << "'";
      }
      // ...and no longer tail is.
      for (std::size_t len = tail.size() + 1; len <= fed.size() && len < longest; ++len) {
        for (const auto& s : stops) {
          ASSERT_FALSE(s.size() > len && s.compare(0, len, fed, fed.size() - len, len) == 0);
        }
      }
    }
    if (!got.stop) got.text += m.flush();
    ASSERT_EQ(got.text, want.text) << "trial " << trial;
    ASSERT_EQ(got.stop, want.stop) << "trial " << trial;
  }
}

}  // namespace
}  // namespace rowlm::sampling
