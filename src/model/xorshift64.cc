#include "model/xorshift64.h"

#include <array>

namespace rowlm::decoder {
namespace {

// A linear map of GF(2)^64 by its columns: column i is the image of bit i.
using BitMatrix = std::array<uint64_t, 64>;

uint64_t map_bits(const BitMatrix& m, uint64_t v) {
  uint64_t out = 0;
  for (int i = 0; v != 0; ++i, v >>= 1)
    if (v & 1u) out ^= m[std::size_t(i)];
  return out;
}

// a ∘ b: b first.
BitMatrix compose(const BitMatrix& a, const BitMatrix& b) {
  BitMatrix out{};
  for (std::size_t i = 0; i < 64; ++i) out[i] = map_bits(a, b[i]);
  return out;
}

}  // namespace

uint64_t xorshift64_jump(uint64_t state, uint64_t steps) {
  BitMatrix power{};  // the step, then its squares
  for (std::size_t i = 0; i < 64; ++i) power[i] = xorshift64_step(uint64_t(1) << i);
  for (; steps != 0; steps >>= 1) {
    if (steps & 1u) state = map_bits(power, state);
    if (steps > 1) power = compose(power, power);
  }
  return state;
}

}  // namespace rowlm::decoder
