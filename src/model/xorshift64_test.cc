#include "model/xorshift64.h"

#include <gtest/gtest.h>

namespace rowlm::decoder {
namespace {

// The oracle is the sequential stream itself: a jump of n lands on the
// state n single steps reach, from any start.
TEST(Xorshift64, AJumpLandsWhereSingleStepsLand) {
  for (uint64_t start : {uint64_t(1), uint64_t(0x9E3779B97F4A7C16ull), ~uint64_t(0)}) {
    uint64_t s = start;
    uint64_t n = 0;
    for (uint64_t target : {0u, 1u, 2u, 3u, 63u, 64u, 65u, 1000u, 4096u, 123457u}) {
      for (; n < target; ++n) s = xorshift64_step(s);
      EXPECT_EQ(xorshift64_jump(start, target), s) << "start " << start << ", " << target << " steps";
    }
  }
  // Jumps compose: n then m steps is n + m.
  EXPECT_EQ(xorshift64_jump(xorshift64_jump(77, 1u << 20), 12345), xorshift64_jump(77, (1u << 20) + 12345));
}

}  // namespace
}  // namespace rowlm::decoder
