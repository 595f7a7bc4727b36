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

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace rowlm::sampling {

// What allowed() found.
enum class Allowed {
  All,   // every token may come next: mask() changes nothing
  Some,  // the bits say which
  None,  // no token may: mask() throws
};

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logit of every token that may not come next to -inf. Throws
  // rowlm::Error if none may.
  virtual void mask(std::span<float> logits) = 0;
  // The tokens mask() leaves, a bit each (token t: bit t % 64 of
  // words[t / 64]; words holds (vocab + 63) / 64 of them), for a device
  // that masks rows itself; the words are written only for Some. The
  // default asks mask() of a row of zeros.
  virtual Allowed allowed(int64_t vocab, std::span<uint64_t> words) {
    std::vector<float> row(std::size_t(vocab), 0.0f);
    try {
      mask(row);
    } catch (...) {
      return Allowed::None;
    }
    bool all = true;
    for (std::size_t w = 0; w < words.size(); ++w) words[w] = 0;
    for (std::size_t t = 0; t < row.size(); ++t) {
      if (std::isinf(row[t])) {
        all = false;
        continue;
      }
      words[t >> 6] |= uint64_t(1) << (t & 63);
    }
    return all ? Allowed::All : Allowed::Some;
  }
  // Records the token kept next. Throws rowlm::Error for a token mask()
  // forbids.
  virtual void accept(int32_t token) = 0;
  // Forgets the last n tokens accepted.
  virtual void rollback(std::size_t n) = 0;
};

}  // namespace rowlm::sampling
