#pragma once
// One request's sampler: its parameters, its seed, and the tokens it has
// generated (for the penalties and the step counter).
//
// Processing order (see logits_processor.h): logit bias, repetition penalty,
// presence/frequency penalties, then - unless greedy - temperature, top-k,
// top-p, min-p, softmax. Greedy (temperature 0) takes the argmax after the
// penalties, ties to the lowest id.
//
// Randomness: the draw for the token at generation step s (s = tokens
// generated so far) is uniform01(seed, s, stream), so a request's tokens
// depend only on its logits, parameters and seed; never on the batch, the
// thread, or the order rows are sampled in. The same inputs give the same
// token bit for bit.
//
// Logprobs (when params.logprobs is set) are the raw model log-probabilities,
// see logprobs.h.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "backend/row_sampling.h"
#include "sampling/logprobs.h"
#include "sampling/philox.h"
#include "sampling/sampling_params.h"
#include "sampling/token_constraint.h"
#include "sampling/token_history.h"

namespace rowlm::sampling {

struct SampledToken {
  int32_t token = -1;
  // Raw log-probability of token and the top alternatives; set only when
  // params.logprobs is.
  std::optional<RawLogprobs> logprobs;
};

// Inverse-CDF draw: the first id (ascending) whose cumulative probability
// exceeds u * (total mass); u in [0, 1). Ids with probability 0 are never chosen.
int32_t draw_token(std::span<const float> probs, double u);
// The inverse-CDF walk of Sampler::sample over unnormalized masses whose
// kMassBlock-entry blocks sum to block_mass (exp_masses'), total > 0.
int32_t walk_masses(std::span<const float> mass, std::span<const double> block_mass, double total, double u);

// A Sampler is used by one thread at a time (it keeps vocab-sized scratch
// rows to avoid a fresh allocation per token); different Samplers are
// independent and may run on different threads.
class Sampler {
 public:
  // Validates params against vocab_size (throws rowlm::Error naming the
  // field). prompt_ids feed the repetition penalty.
  Sampler(SamplingParams params, int64_t vocab_size, std::span<const int32_t> prompt_ids = {});

  const SamplingParams& params() const { return params_; }
  uint64_t seed() const { return seed_; }
  int64_t vocab_size() const { return vocab_size_; }
  // Index of the next token to generate (= tokens accepted so far).
  int64_t step() const { return int64_t(history_.generated().size()); }
  const TokenHistory& history() const { return history_; }

  // Holds every distribution to `constraint` from the next token on (see
  // token_constraint.h); it then advances and rolls back with accept() and
  // rollback(). Null removes it.
  void set_constraint(std::unique_ptr<TokenConstraint> constraint) { constraint_ = std::move(constraint); }
  bool constrained() const { return constraint_ != nullptr; }

  // The distribution the next token is drawn from: vocab-sized, sums to 1,
  // zero outside the kept set; one-hot at the argmax when greedy. This is
  // p_target / p_draft for speculative decoding.
  std::vector<float> next_token_probs(std::span<const float> logits) const;
  void next_token_probs(std::span<const float> logits, std::span<float> probs) const;

  // Chooses the next token from a row of raw logits; does not record it.
  SampledToken sample(std::span<const float> logits, RandomStream stream = RandomStream::kSample) const;

  // True when sample() would take the plain argmax of the model's row and
  // attach nothing: greedy, no constraint, nothing that changes the row
  // (bias, penalties), no logprobs. Such a row's argmax code, computed where
  // the logits are (Backend::argmax_rows), is all it needs: sample_argmax.
  bool argmax_is_enough() const;
  // What sample() returns for the row whose argmax code is `code`
  // (backend/argmax_code.h), or the error it throws for that row. Only when
  // argmax_is_enough().
  SampledToken sample_argmax(int32_t code) const;

  // The row's description for Backend::sample_rows (backend/row_sampling.h),
  // which gives the token sample() gives, on the device that holds the
  // logits. Its edits are appended to `edits` and its constraint's mask to
  // `masks`, which its ranges index; its `row` is the caller's to set.
  // nullopt when the constraint allows no token: sample() then gives the
  // error.
  std::optional<RowSampling> device_plan(std::vector<RowSamplingEdit>& edits, std::vector<uint64_t>& masks);
  // What sample() returns for a row that sample_rows sampled to `token`
  // (with `stats` when the params ask for logprobs): the token and its
  // logprobs, or, for a token < 0 (the row's argmax code), sample()'s error.
  SampledToken sampled_on_device(int32_t token, const RowLogprobStats* stats) const;

  // `token` as chosen from these logits by some other rule (speculative
  // verification), with its logprobs attached when params ask for them.
  SampledToken chosen(std::span<const float> logits, int32_t token) const;

  // Records a generated token (penalties, step, the constraint) / forgets
  // the last n. accept() throws, recording nothing, for a token the
  // constraint forbids.
  void accept(int32_t token);
  void rollback(std::size_t n);

 private:
  // Copies logits into row_, masks them with the constraint, and processes
  // them there.
  std::span<const float> processed(std::span<const float> logits) const;

  SamplingParams params_;
  int64_t vocab_size_;
  uint64_t seed_;
  TokenHistory history_;
  std::unique_ptr<TokenConstraint> constraint_;
  mutable std::vector<float> row_, probs_;
  mutable std::vector<double> block_mass_;
};

}  // namespace rowlm::sampling
