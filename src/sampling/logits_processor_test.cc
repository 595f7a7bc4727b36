#include "sampling/logits_processor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>

#include "core/error.h"
#include "sampling/test_rows.h"

namespace rowlm::sampling {
namespace {

using testing::random_row;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The oracles below restate each filter's definition directly, in O(n^2),
// without sorting tricks or shared code with the implementation.

std::vector<double> oracle_probs(const std::vector<float>& l) {
  double m = kNegInf;
  for (float x : l) m = std::max(m, double(x));
  std::vector<double> p(l.size());
  double z = 0;
  for (std::size_t i = 0; i < l.size(); ++i) z += p[i] = std::exp(double(l[i]) - m);
  for (double& x : p) x /= z;
  return p;
}

std::set<int> kept(const std::vector<float>& l) {
  std::set<int> s;
  for (std::size_t i = 0; i < l.size(); ++i)
    if (l[i] != kNegInf) s.insert(int(i));
  return s;
}

// Kept by top-k: fewer than k tokens are strictly more likely.
std::set<int> oracle_top_k(const std::vector<float>& l, int k) {
  std::set<int> s;
  for (std::size_t i = 0; i < l.size(); ++i) {
    if (l[i] == kNegInf) continue;
    int better = 0;
    for (float y : l) better += y > l[i];
    if (k <= 0 || better < k) s.insert(int(i));
  }
  return s;
}

// Kept by top-p: the tokens strictly more likely hold less than p.
std::set<int> oracle_top_p(const std::vector<float>& l, double p) {
  const std::vector<double> prob = oracle_probs(l);
  std::set<int> s;
  for (std::size_t i = 0; i < l.size(); ++i) {
    if (l[i] == kNegInf) continue;
    double above = 0;
    for (std::size_t j = 0; j < l.size(); ++j)
      if (l[j] > l[i]) above += prob[j];
    if (p >= 1 || above < p) s.insert(int(i));
  }
  return s;
}

std::set<int> oracle_min_p(const std::vector<float>& l, double min_p) {
  const std::vector<double> prob = oracle_probs(l);
  const double pmax = *std::max_element(prob.begin(), prob.end());
  std::set<int> s;
  for (std::size_t i = 0; i < l.size(); ++i)
    if (l[i] != kNegInf && prob[i] >= min_p * pmax) s.insert(int(i));
  return s;
}

std::vector<float> masked(const std::vector<float>& l, const std::set<int>& keep) {
  std::vector<float> out(l.size(), kNegInf);
  for (int i : keep) out[i] = l[i];
  return out;
}

TEST(LogitsProcessor, TopKKeepsExactlyTheKMostLikelyAndTheirTies) {
  std::mt19937 rng(1);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + int(rng() % 60);
    std::vector<float> l = random_row(rng, n, 2.0f, trial % 2 ? 2 : 0);  // odd trials have ties
    const int k = int(rng() % (n + 2));
    std::vector<float> got = l;
    keep_top_k(got, k);
    ASSERT_EQ(kept(got), oracle_top_k(l, k)) << "trial " << trial << " k " << k;
    for (int i : kept(got)) ASSERT_EQ(got[i], l[i]);  // survivors untouched
  }
}

TEST(LogitsProcessor, TopPKeepsTheSmallestLikeliestSetReachingP) {
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> unit(0.01f, 1.0f);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + int(rng() % 80);
    std::vector<float> l = random_row(rng, n, 1.5f, trial % 3 == 0 ? 3 : 0);
    if (n > 4) l[rng() % n] = kNegInf;  // an already-removed token stays removed
    const float p = trial % 10 == 0 ? 1.0f : unit(rng);
    std::vector<float> got = l;
    keep_top_p(got, p);
    ASSERT_EQ(kept(got), oracle_top_p(l, p)) << "trial " << trial << " p " << p;
  }
}

TEST(LogitsProcessor, TopPOnRowsLongEnoughForTheMassHistogram) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> unit(0.05f, 0.99f);
  for (int trial = 0; trial < 4; ++trial) {
    std::vector<float> l = random_row(rng, 4100 + trial * 500, trial % 2 ? 0.3f : 3.0f, trial == 2 ? 8 : 0);
    const float p = unit(rng);
    std::vector<float> got = l;
    keep_top_p(got, p);
    ASSERT_EQ(kept(got), oracle_top_p(l, p)) << "trial " << trial << " p " << p;
  }
}

TEST(LogitsProcessor, TopPOnAFlatVocabSizedRow) {
  // 50k tokens of nearly equal mass: the nucleus is far past the first 1024.
  std::mt19937 rng(3);
  std::vector<float> l = random_row(rng, 50000, 0.05f);
  std::vector<float> got = l;
  keep_top_p(got, 0.5f);
  const std::set<int> s = kept(got);
  EXPECT_GT(s.size(), 20000u);
  // Check the defining property on the boundary instead of the O(n^2) oracle.
  const std::vector<double> prob = oracle_probs(l);
  double kept_mass = 0, min_kept = 1;
  for (int i : s) kept_mass += prob[i], min_kept = std::min(min_kept, prob[i]);
  EXPECT_GE(kept_mass, 0.5 - 1e-9);
  EXPECT_LT(kept_mass - min_kept, 0.5);
  for (std::size_t i = 0; i < l.size(); ++i) {
    if (!s.count(int(i))) {
      ASSERT_LT(prob[i], min_kept);
    }
  }
}

// A 262k row shaped like a language model's (a few likely tokens over a
// long normal tail), where top-p looks only at the tokens above a floor that
// the tail's total mass bounds: the kept set still has the defining
// property, for p far from and near 1.
TEST(LogitsProcessor, TopPOnALanguageModelShapedVocabRow) {
  std::mt19937 rng(4);
  std::normal_distribution<float> tail(0.0f, 2.0f);
  std::vector<float> l(262144);
  for (float& x : l) x = tail(rng);
  for (int i = 0; i < 12; ++i) l[rng() % l.size()] = 9.0f + float(i) * 0.5f;
  const std::vector<double> prob = oracle_probs(l);
  for (float p : {0.05f, 0.5f, 0.9f, 0.99f, 0.999f, 0.9995f}) {
    std::vector<float> got = l;
    keep_top_p(got, p);
    const std::set<int> s = kept(got);
    double kept_mass = 0, min_kept = 1;
    for (int i : s) kept_mass += prob[i], min_kept = std::min(min_kept, prob[i]);
    EXPECT_GE(kept_mass, double(p) - 1e-6) << "p " << p;
    EXPECT_LT(kept_mass - min_kept, double(p)) << "p " << p;
    for (std::size_t i = 0; i < l.size(); ++i) {
      if (!s.count(int(i))) {
        ASSERT_LT(prob[i], min_kept) << "p " << p << " token " << i;
      } else {
        ASSERT_EQ(got[i], l[i]);
      }
    }
  }
}

TEST(LogitsProcessor, MinPKeepsTokensAtLeastMinPTimesTheMostLikely) {
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + int(rng() % 60);
    std::vector<float> l = random_row(rng, n, 2.0f);
    const float min_p = unit(rng);
    std::vector<float> got = l;
    keep_min_p(got, min_p);
    ASSERT_EQ(kept(got), oracle_min_p(l, min_p)) << "trial " << trial;
  }
}

TEST(LogitsProcessor, PenaltiesFollowTheirFormulas) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 100; ++trial) {
    const int n = 40;
    const std::vector<float> l = random_row(rng, n, 3.0f);
    std::vector<int32_t> prompt(rng() % 12), generated(rng() % 20);
    for (auto& t : prompt) t = int32_t(rng() % n);
    for (auto& t : generated) t = int32_t(rng() % n);
    TokenHistory history(prompt);
    for (int32_t t : generated) history.push(t);

    SamplingParams params;
    params.repetition_penalty = 0.5f + float(rng() % 100) / 40.0f;
    params.presence_penalty = float(int(rng() % 9) - 4) / 2.0f;
    params.frequency_penalty = float(int(rng() % 9) - 4) / 3.0f;
    params.logit_bias[int32_t(rng() % n)] = 7.5f;
    params.temperature = 0;  // stop after the penalties

    std::vector<float> got = l;
    process_logits(got, params, history);
    for (int i = 0; i < n; ++i) {
      double want = l[i];
      if (params.logit_bias.count(i)) want += params.logit_bias.at(i);
      const bool seen = std::count(prompt.begin(), prompt.end(), i) + std::count(generated.begin(), generated.end(), i) > 0;
      if (seen) want = want > 0 ? want / params.repetition_penalty : want * params.repetition_penalty;
      const int count = int(std::count(generated.begin(), generated.end(), i));
      want -= params.frequency_penalty * count + (count > 0 ? params.presence_penalty : 0.0f);
      ASSERT_NEAR(got[i], want, 1e-5) << "token " << i << " trial " << trial;
    }
  }
}

TEST(LogitsProcessor, FullChainEqualsTheOracleFiltersInOrder) {
  std::mt19937 rng(6);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 2 + int(rng() % 50);
    const std::vector<float> l = random_row(rng, n, 2.0f);
    SamplingParams params;
    params.temperature = 0.3f + float(rng() % 20) / 10.0f;
    params.top_k = int32_t(rng() % (n + 1));
    params.top_p = 0.2f + float(rng() % 80) / 100.0f;
    params.min_p = float(rng() % 30) / 100.0f;
    std::vector<float> got = l;
    process_logits(got, params, TokenHistory{});

    std::vector<float> want(l.size());
    const float m = *std::max_element(l.begin(), l.end());
    for (int i = 0; i < n; ++i) want[i] = (l[i] - m) / params.temperature;
    want = masked(want, oracle_top_k(want, params.top_k));
    want = masked(want, oracle_top_p(want, params.top_p));
    want = masked(want, oracle_min_p(want, params.min_p));
    ASSERT_EQ(kept(got), kept(want)) << "trial " << trial;
  }
}

TEST(LogitsProcessor, RejectsRowsWithNaNOrNoFiniteValue) {
  SamplingParams params;
  std::vector<float> nan_row = {0.0f, std::nanf(""), 1.0f};
  EXPECT_THROW(process_logits(nan_row, params, TokenHistory{}), Error);
  std::vector<float> inf_row = {0.0f, std::numeric_limits<float>::infinity()};
  EXPECT_THROW(process_logits(inf_row, params, TokenHistory{}), Error);
  std::vector<float> dead_row = {kNegInf, kNegInf};
  EXPECT_THROW(process_logits(dead_row, params, TokenHistory{}), Error);
}

TEST(LogitsProcessor, ArgmaxTakesTheLowestIdAmongTies) {
  EXPECT_EQ(argmax(std::vector<float>{1, 3, 3, 2}), 1);
  EXPECT_EQ(argmax(std::vector<float>{kNegInf, kNegInf, 0}), 2);
  EXPECT_EQ(argmax(std::vector<float>{5}), 0);
}

// The one-pass greedy scan against the definition: the first index holding
// the largest value (+0 == -0), and an error wherever process_logits throws.
// Lengths around the scan's 16 lanes, rows full of ties, signed zeros and
// -inf, and a vocab-sized row.
TEST(LogitsProcessor, CheckedArgmaxIsTheFirstLargestAndChecksLikeProcessLogits) {
  std::mt19937 rng(3);
  const float values[] = {kNegInf, -0.0f, 0.0f, 1.0f, 2.5f, -3.0f, 1e30f, -1e30f};
  auto first_largest = [](const std::vector<float>& row) {
    std::size_t at = 0;
    for (std::size_t i = 1; i < row.size(); ++i)
      if (row[i] > row[at]) at = i;
    return int32_t(at);
  };
  std::vector<std::size_t> lengths;
  for (std::size_t n = 1; n <= 50; ++n) lengths.push_back(n);
  lengths.push_back(1000);
  lengths.push_back(262144);
  for (std::size_t n : lengths) {
    for (int trial = 0; trial < (n > 1000 ? 2 : 20); ++trial) {
      std::vector<float> row(n);
      for (float& x : row) x = values[rng() % (trial % 2 ? 3 : 8)];  // odd trials: only -inf and zeros
      if (std::all_of(row.begin(), row.end(), [](float x) { return x == kNegInf; })) row[rng() % n] = -0.0f;
      EXPECT_EQ(checked_argmax(row), first_largest(row)) << "n " << n << " trial " << trial;
      const std::vector<float> random = random_row(rng, int(n), 2.0f, trial % 3);
      EXPECT_EQ(checked_argmax(random), first_largest(random)) << "n " << n;
      // A NaN or +inf anywhere (the last lane, the tail) is refused, as is a row of -inf only.
      std::vector<float> bad = row;
      bad[rng() % n] = trial % 4 < 2 ? std::nanf("") : std::numeric_limits<float>::infinity();
      EXPECT_THROW(checked_argmax(bad), Error) << "n " << n;
      std::vector<float> dead(n, kNegInf);
      EXPECT_THROW(checked_argmax(dead), Error) << "n " << n;
    }
  }
}

TEST(LogitsProcessor, OnlyAGreedyRowWithoutBiasOrPenaltyIsLeftUnchanged) {
  SamplingParams p;
  p.temperature = 0.0f;
  EXPECT_TRUE(greedy_leaves_row_unchanged(p));
  // Each of these changes a greedy row (or is not greedy): process_logits must run.
  std::vector<SamplingParams> changed(5, p);
  changed[0].temperature = 0.5f;
  changed[1].logit_bias = {{3, 1.0f}};
  changed[2].repetition_penalty = 1.1f;
  changed[3].presence_penalty = 0.5f;
  changed[4].frequency_penalty = -0.5f;
  for (const SamplingParams& c : changed) EXPECT_FALSE(greedy_leaves_row_unchanged(c));
}

}  // namespace
}  // namespace rowlm::sampling
