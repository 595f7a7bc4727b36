#pragma once
// Log-probabilities reported to users. rowlm reports the model's own
// distribution: log_softmax of the raw logits, before logit bias, penalties,
// temperature and filtering (vLLM's default "raw_logprobs"). So a token's
// logprob is the same whatever sampling parameters chose it, and it can be
// compared with transformers' output for the same weights.

#include <cstdint>
#include <span>
#include <vector>

#include "backend/row_sampling.h"

namespace rowlm::sampling {

struct TokenLogprob {
  int32_t token;
  float logprob;
  bool operator==(const TokenLogprob&) const = default;
};

struct RawLogprobs {
  float chosen;                   // log p(token) under the raw logits
  std::vector<TokenLogprob> top;  // the n most likely, most likely first, ties to the lower id
};

// One pass of log-sum-exp over the row, then a partial sort for the top n.
RawLogprobs raw_logprobs(std::span<const float> logits, int32_t token, int32_t top_n);

// The same from what Backend::sample_rows reports of a row it sampled
// (backend/row_sampling.h): its max, mass total, chosen logit and most likely
// entries; the logarithm is taken here, so the values are raw_logprobs'.
RawLogprobs raw_logprobs(const RowLogprobStats& stats);

// What sample_rows reports of a raw row on the host (sampling/planned_row.h):
// its max and mass total as raw_logprobs takes them, and the top_n
// (<= kMaxRowLogprobs) most likely entries; chosen_logit is the caller's.
RowLogprobStats raw_logprob_stats(std::span<const float> logits, int32_t top_n);

}  // namespace rowlm::sampling
