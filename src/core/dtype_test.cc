#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace rowlm {
namespace {

// Oracle: round to the nearest representable value by exhaustive search of
// neighbours, ties to even mantissa.
TEST(DType, BF16RoundTripAndRounding) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = bf16_to_f32(uint16_t(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_bf16(f), h);
  }
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);  // tie -> even (down)
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82);  // tie -> even (up)
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DType, F16RoundTripAllValues) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_f32(uint16_t(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), h) << std::hex << h;
  }
}

TEST(DType, F16RoundsToNearestEven) {
  // Midpoints between consecutive f16 values round to the even one.
  for (uint32_t h = 0; h < 0x7bff; h += 7) {
    const double a = f16_to_f32(uint16_t(h)), b = f16_to_f32(uint16_t(h + 1));
    const float mid = float((a + b) / 2);
    if (double(mid) != (a + b) / 2) continue;  // not exactly representable
    EXPECT_EQ(f32_to_f16(mid), (h & 1) ? h + 1 : h) << std::hex << h;
    EXPECT_EQ(f32_to_f16(std::nextafter(mid, 0.0f)), h);
    EXPECT_EQ(f32_to_f16(std::nextafter(mid, 1e9f)), h + 1);
  }
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-1e6f), 0xfc00);
}

}  // namespace
}  // namespace rowlm
