#pragma once
// A rule on which tokens may come next, kept per request beside its
// Sampler (structured outputs: constrain/json_constraint.h). The sampler
// applies it to the raw logits before anything else (logits_processor.h's
// step 0), so a forbidden token has probability 0 in every distribution the
// sampler makes, speculative verification's included; and it advances it
// with every token the request keeps.
//
// What a constraint allows must depend only on the tokens accepted so far
// (never on other requests), or batch invariance is lost.
//
// Threads: one at a time, like its Sampler.

#include <cstddef>
#include <cstdint>
#include <span>

namespace rowlm::sampling {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logit of every token that may not come next to -inf. Throws
  // rowlm::Error if none may.
  virtual void mask(std::span<float> logits) = 0;
  // Records the token kept next. Throws rowlm::Error for a token mask()
  // forbids.
  virtual void accept(int32_t token) = 0;
  // Forgets the last n tokens accepted.
  virtual void rollback(std::size_t n) = 0;
};

}  // namespace rowlm::sampling
