#include "sampling/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <thread>

#include "core/error.h"
#include "sampling/logits_processor.h"
#include "sampling/test_rows.h"

namespace rowlm::sampling {
namespace {

using testing::random_row;

SamplingParams seeded(uint64_t seed) {
  SamplingParams p;
  p.seed = seed;
  return p;
}

TEST(Sampler, GreedyIsTheArgmaxOfTheRawRowWithoutPenalties) {
  std::mt19937 rng(10);
  SamplingParams params = seeded(1);
  params.temperature = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const std::vector<float> l = random_row(rng, 64, 2.0f, trial % 2 ? 1 : 0);
    Sampler sampler(params, 64);
    const int32_t want = int32_t(std::max_element(l.begin(), l.end()) - l.begin());  // first maximum
    ASSERT_EQ(sampler.sample(l).token, want);
    const std::vector<float> probs = sampler.next_token_probs(l);
    for (int i = 0; i < 64; ++i) ASSERT_EQ(probs[i], i == want ? 1.0f : 0.0f);
  }
}

// A greedy row that nothing changes needs only its argmax code: which
// samplers say so, and that the code gives sample()'s token, and its error
// (naming the same entry) for a row sample() refuses.
TEST(Sampler, AnArgmaxCodeIsEnoughForPlainGreedyRowsAndGivesSampleTokensAndErrors) {
  std::mt19937 rng(12);
  SamplingParams greedy = seeded(1);
  greedy.temperature = 0;
  EXPECT_TRUE(Sampler(greedy, 64).argmax_is_enough());
  for (auto change : std::vector<std::function<void(SamplingParams&)>>{
           [](SamplingParams& p) { p.temperature = 0.5f; }, [](SamplingParams& p) { p.logprobs = 0; },
           [](SamplingParams& p) { p.logit_bias[3] = 1.0f; }, [](SamplingParams& p) { p.repetition_penalty = 1.1f; },
           [](SamplingParams& p) { p.presence_penalty = 0.5f; }, [](SamplingParams& p) { p.frequency_penalty = 0.5f; }}) {
    SamplingParams p = greedy;
    change(p);
    Sampler s(p, 64);
    EXPECT_FALSE(s.argmax_is_enough());
    EXPECT_THROW(s.sample_argmax(0), Error);
  }
  Sampler sampler(greedy, 64);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<float> l = random_row(rng, 64, 2.0f, trial % 2 ? 1 : 0);
    // Written the way argmax_code.h defines a code, from the row.
    int32_t code = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
    if (trial % 5 == 1) std::fill(l.begin(), l.end(), -inf), code = -1;
    if (trial % 5 == 2) l[std::size_t(trial % 64)] = nan, code = -2 - 2 * (trial % 64);
    if (trial % 5 == 3) l[std::size_t(trial % 64)] = inf, code = -3 - 2 * (trial % 64);
    std::string want_error, got_error;
    int32_t want = -1, got = -1;
    try {
      want = sampler.sample(l).token;
    } catch (const Error& e) {
      want_error = e.what();
    }
    try {
      got = sampler.sample_argmax(code).token;
    } catch (const Error& e) {
      got_error = e.what();
    }
    EXPECT_EQ(got, want) << trial;
    EXPECT_EQ(got_error, want_error) << trial;
    EXPECT_EQ(want_error.empty(), trial % 5 == 0 || trial % 5 == 4) << trial << ": " << want_error;
  }
}

TEST(Sampler, GreedySeesBiasAndPenalties) {
  SamplingParams params = seeded(1);
  params.temperature = 0;
  const std::vector<float> l = {1.0f, 4.0f, 3.0f, 0.5f};
  params.logit_bias[3] = 5.0f;
  EXPECT_EQ(Sampler(params, 4).sample(l).token, 3);
  params.logit_bias.clear();
  params.repetition_penalty = 2.0f;  // 4/2 = 2 < 3
  const std::vector<int32_t> prompt = {1};
  EXPECT_EQ(Sampler(params, 4, prompt).sample(l).token, 2);
  params.repetition_penalty = 1.0f;
  params.frequency_penalty = 0.6f;  // three 1s: 4 - 1.8 = 2.2 < 3
  Sampler s(params, 4);
  for (int i = 0; i < 3; ++i) s.accept(1);
  EXPECT_EQ(s.sample(l).token, 2);
  s.rollback(2);  // one 1 left: 4 - 0.6 = 3.4 > 3
  EXPECT_EQ(s.sample(l).token, 1);
}

// The sampled frequencies converge to next_token_probs. Chi-square over the
// kept tokens with a fixed seed; the bound is the 0.1% critical value, so a
// correct sampler passes and the test is deterministic.
TEST(Sampler, SampleFrequenciesMatchTheProcessedDistribution) {
  std::mt19937 rng(11);
  const int n = 24, draws = 60000;
  struct Case { float temperature; int32_t top_k; float top_p; float min_p; };
  for (const Case c : {Case{1.0f, 0, 1.0f, 0.0f}, Case{0.7f, 12, 0.9f, 0.0f}, Case{1.5f, 0, 0.8f, 0.05f}}) {
    const std::vector<float> l = random_row(rng, n, 1.5f);
    SamplingParams params = seeded(99);
    params.temperature = c.temperature, params.top_k = c.top_k, params.top_p = c.top_p, params.min_p = c.min_p;
    Sampler sampler(params, n);
    const std::vector<float> p = sampler.next_token_probs(l);
    std::vector<int> count(n);
    for (int i = 0; i < draws; ++i) {
      const int32_t t = sampler.sample(l).token;
      ASSERT_GT(p[t], 0.0f) << "drew a token outside the kept set";
      ++count[t];
      sampler.accept(t);  // advances the step; no penalties, so p is unchanged
    }
    double chi2 = 0;
    int cells = 0;
    for (int i = 0; i < n; ++i) {
      if (p[i] == 0) continue;
      const double expected = double(p[i]) * draws;
      chi2 += (count[i] - expected) * (count[i] - expected) / expected;
      ++cells;
    }
    // Wilson-Hilferty approximation of the 99.9% quantile of chi2(df).
    const double df = cells - 1, z = 3.09;
    const double bound = df * std::pow(1 - 2 / (9 * df) + z * std::sqrt(2 / (9 * df)), 3);
    EXPECT_LT(chi2, bound) << "temperature " << c.temperature << " cells " << cells;
  }
}

TEST(Sampler, TemperatureScalesTheSoftmax) {
  std::mt19937 rng(12);
  const std::vector<float> l = random_row(rng, 30, 2.0f);
  SamplingParams params = seeded(1);
  params.temperature = 0.6f;
  const std::vector<float> p = Sampler(params, 30).next_token_probs(l);
  double z = 0;
  for (float x : l) z += std::exp(double(x) / 0.6);
  for (int i = 0; i < 30; ++i) EXPECT_NEAR(p[i], std::exp(double(l[i]) / 0.6) / z, 1e-6);
}

// A request's tokens depend on (logits, params, seed, step) only: running
// several requests interleaved in any order, or on several threads, gives
// each the same tokens as running it alone.
TEST(Sampler, TokensDependOnlyOnSeedAndStepNotOnOtherRequestsOrOrder) {
  const int requests = 6, steps = 40, n = 50;
  std::mt19937 rng(13);
  std::vector<std::vector<float>> rows;
  for (int s = 0; s < steps; ++s) rows.push_back(random_row(rng, n, 1.0f));
  auto params_for = [](int r) {
    SamplingParams p = seeded(1000 + r);
    p.temperature = 0.9f;
    p.top_p = 0.95f;
    p.presence_penalty = 0.3f;  // the history matters too
    return p;
  };
  auto run_alone = [&](int r) {
    Sampler s(params_for(r), n);
    std::vector<int32_t> out;
    for (int step = 0; step < steps; ++step) {
      out.push_back(s.sample(rows[step]).token);
      s.accept(out.back());
    }
    return out;
  };
  std::vector<std::vector<int32_t>> alone;
  for (int r = 0; r < requests; ++r) alone.push_back(run_alone(r));

  // Interleaved in a shuffled order at every step.
  std::vector<Sampler> samplers;
  for (int r = 0; r < requests; ++r) samplers.emplace_back(params_for(r), n);
  std::vector<std::vector<int32_t>> interleaved(requests);
  std::vector<int> order(requests);
  std::iota(order.begin(), order.end(), 0);
  for (int step = 0; step < steps; ++step) {
    std::shuffle(order.begin(), order.end(), rng);
    for (int r : order) {
      interleaved[r].push_back(samplers[r].sample(rows[step]).token);
      samplers[r].accept(interleaved[r].back());
    }
  }
  EXPECT_EQ(interleaved, alone);

  // Each request on its own thread, all at once.
  std::vector<std::vector<int32_t>> threaded(requests);
  std::vector<std::thread> threads;
  for (int r = 0; r < requests; ++r) threads.emplace_back([&, r] { threaded[r] = run_alone(r); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(threaded, alone);

  EXPECT_NE(alone[0], alone[1]);  // different seeds, different samples
}

TEST(Sampler, SameInputsGiveBitwiseIdenticalTokensAndLogprobs) {
  std::mt19937 rng(14);
  const std::vector<float> l = random_row(rng, 1000, 3.0f);
  SamplingParams params = seeded(5);
  params.logprobs = 5;
  params.top_k = 50;
  const SampledToken a = Sampler(params, 1000).sample(l);
  const SampledToken b = Sampler(params, 1000).sample(l);
  ASSERT_TRUE(a.logprobs && b.logprobs);
  EXPECT_EQ(a.token, b.token);
  EXPECT_EQ(std::memcmp(&a.logprobs->chosen, &b.logprobs->chosen, sizeof(float)), 0);
  EXPECT_EQ(a.logprobs->top, b.logprobs->top);
}

TEST(Sampler, LogprobsAreTheRawModelDistribution) {
  std::mt19937 rng(15);
  const std::vector<float> l = random_row(rng, 200, 2.0f, 2);  // ties among alternatives
  long double z = 0;
  for (float x : l) z += std::exp((long double)x);
  auto oracle = [&](int i) { return double(std::log(std::exp((long double)l[i]) / z)); };

  for (float temperature : {0.0f, 0.5f, 2.0f}) {
    SamplingParams params = seeded(3);
    params.temperature = temperature;
    params.logit_bias[7] = 30.0f;  // processing changes the choice, not the reported logprobs
    params.logprobs = 4;
    const SampledToken t = Sampler(params, 200).sample(l);
    ASSERT_TRUE(t.logprobs.has_value());
    EXPECT_NEAR(t.logprobs->chosen, oracle(t.token), 1e-5);
    ASSERT_EQ(t.logprobs->top.size(), 4u);
    std::vector<int> ids(200);
    std::iota(ids.begin(), ids.end(), 0);
    std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return l[a] > l[b]; });
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(t.logprobs->top[j].token, ids[j]);
      EXPECT_NEAR(t.logprobs->top[j].logprob, oracle(ids[j]), 1e-5);
    }
  }
  SamplingParams no_logprobs = seeded(3);
  EXPECT_FALSE(Sampler(no_logprobs, 200).sample(l).logprobs.has_value());
  SamplingParams only_chosen = seeded(3);
  only_chosen.logprobs = 0;
  const SampledToken t = Sampler(only_chosen, 200).sample(l);
  ASSERT_TRUE(t.logprobs.has_value());
  EXPECT_TRUE(t.logprobs->top.empty());
}

TEST(Sampler, UnseededRequestsGetAReportedSeed) {
  const std::vector<float> l(16, 0.0f);
  Sampler a(SamplingParams{}, 16), b(SamplingParams{}, 16);
  EXPECT_NE(a.seed(), b.seed());  // 2^-64 chance of a false failure
  SamplingParams replay = seeded(a.seed());
  EXPECT_EQ(Sampler(replay, 16).sample(l).token, a.sample(l).token);
}

TEST(Sampler, DrawTokenInvertsTheCumulativeDistribution) {
  const std::vector<float> p = {0.0f, 0.25f, 0.0f, 0.5f, 0.25f};
  EXPECT_EQ(draw_token(p, 0.0), 1);
  EXPECT_EQ(draw_token(p, 0.2499), 1);
  EXPECT_EQ(draw_token(p, 0.25), 3);
  EXPECT_EQ(draw_token(p, 0.7499), 3);
  EXPECT_EQ(draw_token(p, 0.75), 4);
  EXPECT_EQ(draw_token(p, std::nextafter(1.0, 0.0)), 4);
  EXPECT_THROW(draw_token(std::vector<float>{0, 0}, 0.5), Error);
}

struct BadParam {
  const char* field;
  std::function<void(SamplingParams&)> set;
};

TEST(Sampler, RejectsOutOfRangeParametersNamingTheField) {
  const std::vector<BadParam> cases = {
      {"temperature", [](SamplingParams& p) { p.temperature = -0.1f; }},
      {"temperature", [](SamplingParams& p) { p.temperature = std::nanf(""); }},
      {"top_k", [](SamplingParams& p) { p.top_k = -2; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 0.0f; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 1.01f; }},
      {"min_p", [](SamplingParams& p) { p.min_p = 1.5f; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = 0.0f; }},
      {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = 2.5f; }},
      {"frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = -3.0f; }},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias[100] = 1.0f; }},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias[-1] = 1.0f; }},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias[3] = 101.0f; }},
      {"max_tokens", [](SamplingParams& p) { p.max_tokens = 0; }},
      {"stop_token_ids", [](SamplingParams& p) { p.stop_token_ids = {5, 100}; }},
      {"stop[1]", [](SamplingParams& p) { p.stop = {"ok", ""}; }},
      {"stop[0]", [](SamplingParams& p) { p.stop = {"\xff"}; }},
      {"logprobs", [](SamplingParams& p) { p.logprobs = kMaxTopLogprobs + 1; }},
      {"logprobs", [](SamplingParams& p) { p.logprobs = -1; }},
  };
  for (const BadParam& c : cases) {
    SamplingParams p;
    c.set(p);
    try {
      Sampler s(p, 100);
      ADD_FAILURE() << "accepted a bad " << c.field;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + c.field + "'"), std::string::npos) << e.what();
    }
  }
  SamplingParams fine;
  fine.top_k = -1;
  fine.temperature = 0;
  fine.logit_bias[99] = -100.0f;
  fine.stop = {"\xe6\x97\xa5"};
  EXPECT_NO_THROW(Sampler(fine, 100));
}

TEST(Sampler, RejectsRowsOfTheWrongSizeAndPromptIdsOutsideTheVocabulary) {
  Sampler s(seeded(1), 10);
  EXPECT_THROW(s.sample(std::vector<float>(9)), Error);
  const std::vector<int32_t> prompt = {3, 10};
  EXPECT_THROW(Sampler(seeded(1), 10, prompt), Error);
}

}  // namespace
}  // namespace rowlm::sampling
