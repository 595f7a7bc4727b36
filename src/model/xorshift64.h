#pragma once
// The synthetic weights' random stream: xorshift64 with shifts 13, 7, 17,
// and a jump that lands where `steps` single steps would land. The step is
// linear over GF(2)^64, so a jump is a 64×64 bit matrix raised to `steps`:
// a large tensor's elements can be drawn in parallel chunks, each starting
// at its offset's state, and still be exactly the sequential stream's.

#include <cstdint>

namespace rowlm::decoder {

inline uint64_t xorshift64_step(uint64_t s) {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

// The state after `steps` applications of xorshift64_step (O(log steps)
// bit-matrix products).
uint64_t xorshift64_jump(uint64_t state, uint64_t steps);

}  // namespace rowlm::decoder
