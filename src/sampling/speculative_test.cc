#include "sampling/speculative.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>
#include <random>

#include "backend/argmax_code.h"
#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "sampling/planned_row.h"
#include "sampling/test_rows.h"
#include "sampling/verify_test_cases.h"

namespace rowlm::sampling {
namespace {

using testing::random_row;

std::vector<float> normalized(std::vector<float> v) {
  double s = 0;
  for (float x : v) s += x;
  for (float& x : v) x = float(x / s);
  return v;
}

// Chi-square of counts against p at the 0.1% level (Wilson-Hilferty).
void expect_matches(const std::vector<int>& count, const std::vector<float>& p, int draws) {
  double chi2 = 0;
  int cells = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) {
      EXPECT_EQ(count[i], 0) << "token " << i << " has probability 0";
      continue;
    }
    const double e = double(p[i]) * draws;
    chi2 += (count[i] - e) * (count[i] - e) / e;
    ++cells;
  }
  const double df = cells - 1;
  const double bound = df * std::pow(1 - 2 / (9 * df) + 3.09 * std::sqrt(2 / (9 * df)), 3);
  EXPECT_LT(chi2, bound);
}

// Draft from q, verify against p: the tokens that come out follow p.
TEST(Speculative, RejectionSamplingIsLossless) {
  std::mt19937 rng(20);
  const int n = 10, draws = 80000;
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (int trial = 0; trial < 3; ++trial) {
    std::vector<float> p(n), q(n);
    for (int i = 0; i < n; ++i) p[i] = unit(rng), q[i] = unit(rng);
    p[trial] = 0;      // a token the target never emits
    q[n - 1 - trial] = 0;  // a token the draft never proposes
    p = normalized(p), q = normalized(q);
    std::vector<int> count(n);
    int accepted = 0;
    for (int i = 0; i < draws; ++i) {
      const int32_t x = draw_token(q, uniform01(7, i, RandomStream::kDraft));
      const RejectionResult r = speculative_accept(p, q, x, uniform01(7, i, RandomStream::kSpecAccept),
                                                   uniform01(7, i, RandomStream::kSpecResidual));
      ++count[r.token];
      accepted += r.accepted;
    }
    expect_matches(count, p, draws);
    // The acceptance rate is sum_i min(p_i, q_i).
    double overlap = 0;
    for (int i = 0; i < n; ++i) overlap += std::min(p[i], q[i]);
    EXPECT_NEAR(double(accepted) / draws, overlap, 0.01);
  }
}

// A deterministic drafter (q one-hot, passed as empty) is lossless too.
TEST(Speculative, DeterministicDraftIsLossless) {
  std::mt19937 rng(21);
  const int n = 8, draws = 60000;
  std::vector<float> p(n);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (float& x : p) x = unit(rng);
  p = normalized(p);
  std::vector<int> count(n);
  for (int i = 0; i < draws; ++i) {
    const RejectionResult r = speculative_accept(p, {}, 3, uniform01(8, i, RandomStream::kSpecAccept),
                                                 uniform01(8, i, RandomStream::kSpecResidual));
    EXPECT_EQ(r.accepted, r.token == 3);
    ++count[r.token];
  }
  expect_matches(count, p, draws);
}

// Greedy speculative decoding yields exactly the greedy tokens.
TEST(Speculative, GreedyVerificationYieldsTheArgmax) {
  std::mt19937 rng(22);
  SamplingParams params;
  params.temperature = 0;
  params.seed = 1;
  Sampler target(params, 32);
  for (int trial = 0; trial < 100; ++trial) {
    const std::vector<float> l = random_row(rng, 32, 2.0f);
    const int32_t best = target.sample(l).token;
    std::vector<float> q = random_row(rng, 32, 1.0f);
    for (float& x : q) x = std::abs(x);
    q = normalized(q);
    const int32_t draft = trial % 3 == 0 ? best : int32_t(rng() % 32);
    for (std::span<const float> draft_probs : {std::span<const float>(q), std::span<const float>()}) {
      const DraftVerdict v = verify_draft_token(target, l, draft_probs, draft);
      EXPECT_EQ(v.token.token, best);
      EXPECT_EQ(v.accepted, draft == best);
    }
  }
}

// A row's argmax code (backend/argmax_code.h) by its definition.
int32_t code_of(std::span<const float> row) {
  for (std::size_t i = 0; i < row.size(); ++i)
    if (std::isnan(row[i]) || row[i] == INFINITY) return argmax_code::bad_at(int64_t(i), std::isnan(row[i]));
  int32_t best = argmax_code::kNoFinite;
  for (std::size_t i = 0; i < row.size(); ++i)
    if (row[i] != -INFINITY && (best < 0 || row[i] > row[std::size_t(best)])) best = int32_t(i);
  return best;
}

// For a greedy target, the verdict from the row's argmax code is the full
// row's, token, acceptance and error alike: over rows with ties, −inf, NaN
// and +inf, drafts at the argmax and elsewhere, and draft distributions
// empty, random, one-hot and zero at the draft, at advancing steps.
TEST(Speculative, GreedyVerificationFromTheArgmaxCodeEqualsTheFullRow) {
  std::mt19937 rng(31);
  const int V = 40;
  SamplingParams params;
  params.temperature = 0;
  params.seed = 9;
  Sampler target(params, V);
  ASSERT_TRUE(target.argmax_is_enough());
  int compared = 0, kept_elsewhere = 0, errors = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::vector<float> l = random_row(rng, V, 2.0f);
    if (trial % 5 == 1) l[rng() % V] = l[rng() % V];  // a tie, maybe
    if (trial % 7 == 2) l[rng() % V] = -INFINITY;
    if (trial % 23 == 3) l[rng() % V] = trial % 2 ? NAN : INFINITY;
    if (trial % 29 == 4) std::fill(l.begin(), l.end(), -INFINITY);
    const int32_t code = code_of(l);
    const int32_t draft = trial % 3 == 0 && code >= 0 ? code : int32_t(rng() % V);
    std::vector<float> q = random_row(rng, V, 1.0f);
    for (float& x : q) x = std::abs(x);
    q = normalized(q);
    std::vector<float> zero_at_draft = q;
    zero_at_draft[std::size_t(draft)] = 0.0f;
    std::vector<float> one_hot(V, 0.0f);
    one_hot[std::size_t(draft)] = 1.0f;
    for (const std::vector<float>& probs : {std::vector<float>(), q, zero_at_draft, one_hot}) {
      std::string want_error, got_error;
      std::optional<DraftVerdict> want, got;
      try {
        want = verify_draft_token(target, l, probs, draft);
      } catch (const Error& e) {
        want_error = e.what();
      }
      try {
        got = verify_draft_argmax(target, code, probs, draft);
      } catch (const Error& e) {
        got_error = e.what();
      }
      ASSERT_EQ(got.has_value(), want.has_value()) << "trial " << trial << ": " << want_error << " / " << got_error;
      EXPECT_EQ(got_error, want_error) << "trial " << trial;
      if (!want) {
        ++errors;
        continue;
      }
      EXPECT_EQ(got->accepted, want->accepted) << "trial " << trial;
      EXPECT_EQ(got->token.token, want->token.token) << "trial " << trial;
      EXPECT_FALSE(got->token.logprobs.has_value());
      kept_elsewhere += want->accepted && want->token.token != code;
      ++compared;
    }
    if (code >= 0) target.accept(code);  // the step advances: other uniforms
  }
  // The cases the property is about all occurred.
  EXPECT_GT(compared, 1000);
  EXPECT_GT(kept_elsewhere, 0);  // a draft the draft gave no mass, kept (p(x) = 0 ≥ q(x))
  EXPECT_GT(errors, 0);
}

// Allows the ids congruent to the number of tokens accepted, mod 3: what
// it allows changes with every accept and rollback.
class ModThreeConstraint final : public TokenConstraint {
 public:
  void mask(std::span<float> logits) override {
    for (std::size_t i = 0; i < logits.size(); ++i)
      if (i % 3 != accepted_ % 3) logits[i] = -INFINITY;
  }
  void accept(int32_t token) override {
    if (std::size_t(token) % 3 != accepted_ % 3) throw Error("forbidden");
    ++accepted_;
  }
  void rollback(std::size_t n) override { accepted_ -= n; }

 private:
  std::size_t accepted_ = 0;
};

// A draft token the constraint forbids is rejected, and its replacement
// is allowed; greedy under a constraint verifies to the constrained argmax.
TEST(Speculative, DraftsTheConstraintForbidsAreRejected) {
  std::mt19937 rng(24);
  for (float temperature : {0.0f, 1.0f}) {
    SamplingParams params;
    params.temperature = temperature;
    params.seed = 5;
    Sampler target(params, 30), plain(params, 30);
    target.set_constraint(std::make_unique<ModThreeConstraint>());
    plain.set_constraint(std::make_unique<ModThreeConstraint>());
    for (int step = 0; step < 60; ++step) {
      const std::vector<float> l = random_row(rng, 30, 2.0f);
      const int32_t draft = int32_t(rng() % 30);
      const DraftVerdict v = verify_draft_token(target, l, {}, draft);
      EXPECT_EQ(v.token.token % 3, step % 3);
      if (draft % 3 != step % 3) {
        EXPECT_FALSE(v.accepted);
      }
      if (temperature == 0) {
        EXPECT_EQ(v.token.token, plain.sample(l).token);
      }
      EXPECT_THROW(target.accept((v.token.token + 1) % 30), Error);  // nothing recorded
      target.accept(v.token.token);
      plain.accept(v.token.token);
    }
    target.rollback(1);
    const std::vector<float> l = random_row(rng, 30, 2.0f);
    EXPECT_EQ(target.sample(l).token % 3, 59 % 3);
  }
}

TEST(Speculative, VerificationIsKeyedBySeedAndStepAndCarriesLogprobs) {
  std::mt19937 rng(23);
  const std::vector<float> l = random_row(rng, 50, 1.0f);
  const std::vector<float> q = normalized(std::vector<float>(50, 1.0f));
  SamplingParams params;
  params.seed = 42;
  params.logprobs = 2;
  Sampler a(params, 50), b(params, 50);
  const DraftVerdict va = verify_draft_token(a, l, q, 17);
  const DraftVerdict vb = verify_draft_token(b, l, q, 17);
  EXPECT_EQ(va.accepted, vb.accepted);
  EXPECT_EQ(va.token.token, vb.token.token);
  ASSERT_TRUE(va.token.logprobs.has_value());
  EXPECT_EQ(va.token.logprobs->top.size(), 2u);
  EXPECT_THROW(verify_draft_token(a, l, std::vector<float>(49, 0.0f), 1), Error);
  EXPECT_THROW(verify_draft_token(a, l, q, 50), Error);
}

}  // namespace
}  // namespace rowlm::sampling

namespace rowlm::sampling {
namespace {

// The CPU backend's sample_rows verifies a draft as verify_draft_token does
// (its rows' descriptions from draft_device_plan): the same verdict, kept or
// rejected and replaced, the same raw logprobs bit for bit, the same errors
// for rows holding NaN or +inf; over random rows, parameters, histories,
// seeds and drafts, beside plain sampled rows in the same call.
TEST(Speculative, TheCpuBackendVerifiesDraftsAsTheHostDoes) {
  const std::unique_ptr<Backend> cpu = make_cpu_backend(2, MatmulPrecision::F32, &sample_planned_row);
  ASSERT_TRUE(cpu->samples_rows());
  ASSERT_FALSE(make_cpu_backend(1)->samples_rows());
  std::mt19937 rng(2024);
  testing::expect_backend_verifies_drafts(*cpu, rng, [](int64_t V) { return V > 5000 ? 2 : 6; });
}

}  // namespace
}  // namespace rowlm::sampling
