// The BPE model against an obviously-correct oracle: repeatedly merge the
// adjacent pair of lowest rank (leftmost among equals) until none merges,
// on random vocabularies and words; plus byte fallback, unknown fusing,
// ignore_merges and the subword prefix on small cases.

#include "tokenizer/bpe.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "core/error.h"

namespace rowlm::tok {
namespace {

struct RandomBpe {
  std::vector<std::string> pieces;                       // by id
  std::vector<std::pair<std::string, std::string>> merges;  // by rank
};

RandomBpe random_bpe(std::mt19937& rng) {
  RandomBpe b;
  std::map<std::string, int> ids;
  for (const char* c : {"a", "b", "c", "d"}) ids[c] = int(b.pieces.size()), b.pieces.push_back(c);
  for (int i = 0; i < 60; ++i) {
    const std::string& l = b.pieces[rng() % b.pieces.size()];
    const std::string& r = b.pieces[rng() % b.pieces.size()];
    if (l.size() + r.size() > 8) continue;
    b.merges.emplace_back(l, r);
    const std::string m = l + r;
    if (!ids.count(m)) ids[m] = int(b.pieces.size()), b.pieces.push_back(m);
  }
  return b;
}

// The oracle: a plain list of symbols, rescanned after every merge.
std::vector<std::string> oracle(const RandomBpe& b, const std::string& word) {
  std::map<std::pair<std::string, std::string>, std::size_t> rank;
  for (std::size_t i = 0; i < b.merges.size(); ++i) rank[b.merges[i]] = i;  // a later duplicate wins
  std::vector<std::string> s;
  for (char c : word) s.emplace_back(1, c);
  while (true) {
    std::size_t best = SIZE_MAX, at = 0;
    for (std::size_t i = 0; i + 1 < s.size(); ++i) {
      auto it = rank.find({s[i], s[i + 1]});
      if (it != rank.end() && it->second < best) best = it->second, at = i;
    }
    if (best == SIZE_MAX) return s;
    s[at] += s[at + 1];
    s.erase(s.begin() + std::ptrdiff_t(at) + 1);
  }
}

BpeModel build(const RandomBpe& b, BpeOptions options = {}) {
  Vocab vocab;
  for (std::size_t i = 0; i < b.pieces.size(); ++i) vocab.add(b.pieces[i], int32_t(i));
  vocab.finish();
  BpeModel model(std::move(vocab), std::move(options));
  for (std::size_t i = 0; i < b.merges.size(); ++i) model.add_merge(b.merges[i].first, b.merges[i].second, uint32_t(i));
  model.finish_merges();
  return model;
}

TEST(Bpe, MatchesTheNaiveMergeLoop) {
  std::mt19937 rng(7);
  for (int v = 0; v < 30; ++v) {
    const RandomBpe b = random_bpe(rng);
    const BpeModel model = build(b);
    for (int w = 0; w < 200; ++w) {
      std::string word(1 + rng() % 40, 'a');
      for (char& c : word) c = char('a' + rng() % 4);
      std::vector<int32_t> ids;
      model.tokenize(word, ids);
      model.tokenize(word, ids);  // the second time from the cache
      const auto want = oracle(b, word);
      ASSERT_EQ(ids.size(), 2 * want.size()) << word;
      for (std::size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(b.pieces[std::size_t(ids[i])], want[i]) << word;
        EXPECT_EQ(ids[i], ids[i + want.size()]) << word;
      }
    }
  }
}

TEST(Bpe, BatchedMergeLoadingEqualsOneByOne) {
  std::mt19937 rng(8);
  const RandomBpe b = random_bpe(rng);
  Vocab vocab;
  for (std::size_t i = 0; i < b.pieces.size(); ++i) vocab.add(b.pieces[i], int32_t(i));
  vocab.finish();
  BpeModel batched(vocab, {});
  std::vector<std::pair<std::string_view, std::string_view>> views(b.merges.begin(), b.merges.end());
  batched.add_merges(views.data(), views.size(), 0);
  batched.finish_merges();
  const BpeModel single = build(b);
  for (std::size_t l = 0; l < b.pieces.size(); ++l)
    for (std::size_t r = 0; r < b.pieces.size(); ++r) {
      const auto x = batched.find_merge(int32_t(l), int32_t(r)), y = single.find_merge(int32_t(l), int32_t(r));
      ASSERT_EQ(x.has_value(), y.has_value());
      if (x) {
        EXPECT_TRUE(x->rank == y->rank && x->id == y->id);
      }
    }
}

Vocab small_vocab(std::initializer_list<const char*> pieces) {
  Vocab v;
  int32_t id = 0;
  for (const char* p : pieces) v.add(p, id++);
  v.finish();
  return v;
}

std::vector<int32_t> ids_of(const BpeModel& m, std::string_view word) {
  std::vector<int32_t> ids;
  m.tokenize(word, ids);
  return ids;
}

TEST(Bpe, ByteFallbackAndUnknowns) {
  // é is not in the vocab: its two bytes come as <0xC3> <0xA9>.
  BpeOptions fallback;
  fallback.byte_fallback = true;
  fallback.unk_token = "<unk>";
  BpeModel m(small_vocab({"<unk>", "a", "<0xC3>", "<0xA9>"}), fallback);
  m.finish_merges();
  EXPECT_EQ(ids_of(m, "a\xC3\xA9" "a"), (std::vector<int32_t>{1, 2, 3, 1}));
  // Without all byte pieces, unknown characters fuse into one <unk> when
  // fuse_unk is set, one per character otherwise.
  BpeOptions fuse;
  fuse.unk_token = "<unk>";
  fuse.fuse_unk = true;
  BpeModel f(small_vocab({"<unk>", "a"}), fuse);
  f.finish_merges();
  EXPECT_EQ(ids_of(f, "a\xC3\xA9\xC3\xA9" "a"), (std::vector<int32_t>{1, 0, 1}));
  fuse.fuse_unk = false;
  BpeModel n(small_vocab({"<unk>", "a"}), fuse);
  n.finish_merges();
  EXPECT_EQ(ids_of(n, "a\xC3\xA9\xC3\xA9" "a"), (std::vector<int32_t>{1, 0, 0, 1}));
  // No unk_token: unknown characters are dropped.
  BpeModel d(small_vocab({"a"}), {});
  d.finish_merges();
  EXPECT_EQ(ids_of(d, "a\xC3\xA9" "a"), (std::vector<int32_t>{0, 0}));
}

TEST(Bpe, IgnoreMergesTakesWholeWordsFirst) {
  // "abc" is in the vocab but no merge path reaches it.
  BpeOptions options;
  options.ignore_merges = true;
  BpeModel m(small_vocab({"a", "b", "c", "ab", "abc"}), options);
  m.add_merge("a", "b", 0);
  m.finish_merges();
  EXPECT_EQ(ids_of(m, "abc"), (std::vector<int32_t>{4}));
  EXPECT_EQ(ids_of(m, "abcab"), (std::vector<int32_t>{3, 2, 3}));
}

TEST(Bpe, ContinuingSubwordPrefixAndSuffix) {
  BpeOptions options;
  options.continuing_subword_prefix = "##";
  options.end_of_word_suffix = "</w>";
  BpeModel m(small_vocab({"a", "##b", "##c</w>", "a##b", "ab", "ab##c</w>", "abc</w>"}), options);
  m.add_merge("a", "##b", 0);
  m.add_merge("ab", "##c</w>", 1);
  m.finish_merges();
  EXPECT_EQ(ids_of(m, "abc"), (std::vector<int32_t>{6}));
}

TEST(Bpe, BadMergesAreNamed) {
  BpeModel m(small_vocab({"a", "b"}), {});
  try {
    m.add_merge("a", "b", 3);
    FAIL() << "a merge whose result is not in the vocab was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("merge 3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'ab'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(m.add_merge("a", "x", 4), Error);
  BpeOptions bad_unk;
  bad_unk.unk_token = "<unk>";
  EXPECT_THROW(BpeModel(small_vocab({"a"}), bad_unk), Error);
}

}  // namespace
}  // namespace rowlm::tok
