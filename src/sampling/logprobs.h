#pragma once
// Log-probabilities reported to users. rowlm reports the model's own
// distribution: log_softmax of the raw logits, before logit bias, penalties,
// temperature and filtering (vLLM's default "raw_logprobs"). So a token's
// logprob is the same whatever sampling parameters chose it, and it can be
// compared with transformers' output for the same weights.

#include <cstdint>
#include <span>
#include <vector>

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

}  // namespace rowlm::sampling
