#pragma once
// Test helpers shared by the sampling tests and the CUDA backend's: random
// verification cases for Backend::sample_rows' verifying rows (sampling::
// draft_device_plan), and the check that a backend's tokens for them give
// verify_draft_token's verdicts (tokens, kept or not, raw logprobs bit for
// bit, the same errors).

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "sampling/sampler.h"
#include "sampling/speculative.h"
#include "sampling/test_rows.h"

namespace rowlm::sampling::testing {

struct VerifyCases {
  int64_t vocab = 0;
  std::vector<float> logits;  // [samplers.size(), vocab]
  std::vector<Sampler> samplers;
  std::vector<int32_t> drafts;
  std::vector<RowSampling> plans;  // plans[r].row == r
  std::vector<RowSamplingEdit> edits;
  std::vector<uint64_t> masks;

  std::span<const float> row(std::size_t r) const {
    return std::span(logits).subspan(r * std::size_t(vocab), std::size_t(vocab));
  }
  bool any_logprobs() const {
    for (const RowSampling& p : plans)
      if (p.logprobs >= 0) return true;
    return false;
  }
};

// Row r's sampling parameters in `round`, of `kind`: 0 greedy, changed by
// penalties and a logit bias; 1 to 7 a temperature with top-k (1, 5, 40 and
// all but one), min-p, penalties, a bias, top-p and mixes of them; 8 and up a
// temperature alone. Every third row asks for raw logprobs, with and without
// alternatives.
inline SamplingParams random_sampling_params(std::mt19937& rng, int64_t vocab, int r, int round, int kind,
                                             uint64_t seed) {
  std::uniform_int_distribution<int32_t> id(0, int32_t(vocab - 1));
  SamplingParams p;
  p.seed = seed;
  p.temperature = kind == 0 ? 0.0f : std::vector<float>{0.3f, 0.7f, 1.0f, 1.6f}[std::size_t(r % 4)];
  if (kind == 1 || kind == 5) p.top_k = std::vector<int32_t>{1, 5, 40, int32_t(vocab) - 1}[std::size_t(r % 4)];
  if (kind == 2 || kind == 5) p.min_p = r % 2 ? 0.05f : 0.3f;
  if (kind == 3 || kind == 0) p.repetition_penalty = 1.3f, p.presence_penalty = 0.5f, p.frequency_penalty = 0.4f;
  if (kind == 4 || kind == 0) p.logit_bias[id(rng)] = 6.0f, p.logit_bias[id(rng)] = -4.0f;
  if (kind == 6 || kind == 7) p.top_p = std::vector<float>{0.5f, 0.9f, 0.95f, 0.9995f}[std::size_t((r + round) % 4)];
  if (kind == 7) p.top_k = 40, p.min_p = 0.02f;
  if ((r + round) % 3 == 0) p.logprobs = (r + round) % 2 ? 5 : 0;
  return p;
}

// `rows` rows of `vocab` logits with greedy rows that are changed (bias,
// penalties), temperatures, top-k (ties at the k-th value), top-p, min-p,
// histories and seeds; drafts that the target keeps (its argmax, a draw
// from p, an entry p holds all but all of) and that it rejects (anything,
// an entry a filter removed), rows asking for logprobs, and a few with a
// NaN or +inf.
inline VerifyCases make_verify_cases(std::mt19937& rng, int64_t vocab, int rows, int round) {
  VerifyCases c;
  c.vocab = vocab;
  const float inf = std::numeric_limits<float>::infinity();
  std::uniform_int_distribution<int32_t> id(0, int32_t(vocab - 1));
  for (int r = 0; r < rows; ++r) {
    std::vector<float> row = random_row(rng, int(vocab), 3.0f, r % 5 == 2 ? 4 : 0);  // ties on some rows
    if (r % 4 == 1) row[std::size_t(id(rng))] = -inf;  // a removed token
    if (r % 7 == 3) row[std::size_t(id(rng))] = 60.0f;  // p all but one-hot
    const SamplingParams p = random_sampling_params(rng, vocab, r, round, (round * rows + r) % 9, uint64_t(7919 * round + r));
    std::vector<int32_t> prompt;
    for (int j = 0; j < 30; ++j) prompt.push_back(id(rng) % std::max<int32_t>(1, int32_t(vocab) / 3));
    Sampler s(p, vocab, prompt);
    for (int j = 0; j < 5; ++j) s.accept(j % 2 ? prompt[std::size_t(j)] : id(rng));  // counts 1 and more
    // The draft: one the target likes (its most likely, a draw from p) or not.
    int32_t draft = id(rng);
    const int how = (r + 3 * round) % 4;
    if (how <= 1) {
      const std::vector<float> probs = s.next_token_probs(row);
      draft = how == 0 ? int32_t(std::max_element(probs.begin(), probs.end()) - probs.begin())
                       : draw_token(probs, std::uniform_real_distribution<double>(0, 1)(rng));
    }
    // A refused row, once in a while (after the draft is chosen from the row).
    if (r % 11 == 10) row[std::size_t(id(rng))] = r % 2 ? std::numeric_limits<float>::quiet_NaN() : inf;
    std::optional<RowSampling> plan = draft_device_plan(s, draft, c.edits, c.masks);
    if (!plan) throw Error("make_verify_cases: no plan");
    plan->row = r;
    c.plans.push_back(*plan);
    c.logits.insert(c.logits.end(), row.begin(), row.end());
    c.samplers.push_back(std::move(s));
    c.drafts.push_back(draft);
  }
  return c;
}

struct VerifyTally {
  int64_t compared = 0, kept = 0, rejected = 0, errors = 0, with_logprobs = 0;
};

// A backend's tokens (and stats, when rows ask for logprobs) for c.plans
// against verify_draft_token on the host.
inline void expect_host_verdicts(const VerifyCases& c, std::span<const int32_t> tokens, const RowLogprobStats* stats,
                                 VerifyTally& tally, const std::string& where) {
  auto bits = [](float f) { return std::bit_cast<uint32_t>(f); };
  for (std::size_t r = 0; r < c.samplers.size(); ++r) {
    const Sampler& s = c.samplers[r];
    std::optional<DraftVerdict> want, got;
    std::string want_error, got_error;
    try {
      want = verify_draft_token(s, c.row(r), {}, c.drafts[r]);
    } catch (const Error& e) {
      want_error = e.what();
    }
    try {
      got = verify_draft_on_device(s, tokens[r], c.plans[r].logprobs >= 0 ? stats + r : nullptr, c.drafts[r]);
    } catch (const Error& e) {
      got_error = e.what();
    }
    ++tally.compared;
    ASSERT_EQ(got_error, want_error) << where << " row " << r;
    if (!want) {
      ++tally.errors;
      continue;
    }
    ASSERT_TRUE(got);
    EXPECT_EQ(got->accepted, want->accepted) << where << " row " << r;
    EXPECT_EQ(got->token.token, want->token.token) << where << " row " << r;
    ++(want->accepted ? tally.kept : tally.rejected);
    ASSERT_EQ(got->token.logprobs.has_value(), want->token.logprobs.has_value()) << where << " row " << r;
    if (want->token.logprobs) {
      EXPECT_EQ(bits(got->token.logprobs->chosen), bits(want->token.logprobs->chosen)) << where << " row " << r;
      EXPECT_EQ(got->token.logprobs->top, want->token.logprobs->top) << where << " row " << r;
      ++tally.with_logprobs;
    }
  }
}

// The property both backends' tests hold: rounds of random cases at each
// vocabulary size (`rounds(V)` of them) verified by be.sample_rows in one
// call beside a plain draw (Sampler::sample's token), every verdict the
// host's, with kept, rejected, erroneous and logprob rows all seen. The
// tensors go through be.upload and be.copy_to_host, so `be` may be a GPU.
template <class Rounds>
void expect_backend_verifies_drafts(Backend& be, std::mt19937& rng, Rounds&& rounds) {
  VerifyTally tally;
  for (int64_t V : {17, 1000, 4099, 262144}) {
    for (int round = 0; round < rounds(V); ++round) {
      constexpr int kRows = 24;
      VerifyCases c = make_verify_cases(rng, V, kRows, round);
      Sampler plain(SamplingParams{.temperature = 0.8f, .seed = uint64_t(round)}, V);
      std::optional<RowSampling> draw = plain.device_plan(c.edits, c.masks);
      ASSERT_TRUE(draw);
      draw->row = kRows;
      std::vector<RowSampling> plans = c.plans;
      plans.push_back(*draw);
      Tensor x(DType::F32, {kRows + 1, V});
      std::copy(c.logits.begin(), c.logits.end(), x.data<float>());
      const std::vector<float> last = random_row(rng, int(V));
      std::copy(last.begin(), last.end(), x.data<float>() + int64_t(kRows) * V);
      Tensor on_be = be.upload(x), tokens = be.upload(Tensor(DType::I32, {kRows + 1}));
      Tensor stats = be.upload(Tensor(DType::U8, {(kRows + 1) * int64_t(sizeof(RowLogprobStats))}));
      be.sample_rows(on_be, plans, c.edits, c.masks, tokens, &stats);
      std::vector<int32_t> got(kRows + 1);
      std::vector<RowLogprobStats> got_stats(kRows + 1);
      be.copy_to_host(tokens, got.data());
      be.copy_to_host(stats, got_stats.data());
      expect_host_verdicts(c, std::span(got.data(), kRows), got_stats.data(), tally,
                           "V " + std::to_string(V) + " round " + std::to_string(round));
      EXPECT_EQ(got[kRows], plain.sample(last).token) << "V " << V;
    }
  }
  EXPECT_GT(tally.kept, tally.compared / 5);
  EXPECT_GT(tally.rejected, tally.compared / 5);
  EXPECT_GT(tally.errors, 0);
  EXPECT_GT(tally.with_logprobs, tally.compared / 5);
}

}  // namespace rowlm::sampling::testing
