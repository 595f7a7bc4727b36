#pragma once
// Counter-based randomness for sampling. Philox4x32-10 (Salmon et al., SC'11,
// "Parallel random numbers: as easy as 1, 2, 3") maps a 128-bit counter and a
// 64-bit key to 128 random bits with no state in between, so a request's
// draws depend only on (seed, step, stream): not on other requests, threads,
// or the order in which steps are computed.

#include <array>
#include <cstdint>

namespace rowlm::sampling {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// The Philox4x32 bijection with 10 rounds (the Random123 reference variant).
PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key);

// Independent draw sequences within one step. Each use of randomness at a
// step has its own stream so that, say, speculative acceptance tests never
// reuse the bits of a plain sample.
enum class RandomStream : uint32_t {
  kSample = 0,        // the next-token draw
  kSpecAccept = 1,    // speculative decoding: the accept/reject test of a draft token
  kSpecResidual = 2,  // speculative decoding: the draw from the residual distribution
  kDraft = 3,         // the draft model's own next-token draw
};

// A uniform double in [0, 1) with 53 random bits, keyed by the request seed
// and addressed by (step, stream).
double uniform01(uint64_t seed, uint64_t step, RandomStream stream);

}  // namespace rowlm::sampling
