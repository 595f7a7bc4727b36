#include "quant/affine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"

namespace rowlm::quant {
namespace {

std::vector<uint8_t> codes_of(const std::vector<float>& x, int bits, GroupParams* p) {
  std::vector<uint8_t> c(x.size());
  *p = quantize_group(x.data(), int(x.size()), bits, c.data());
  return c;
}

// Hand-worked: the larger-magnitude extreme is the edge. Here it is the
// maximum, so the scale is negative and codes count down from it:
// scale = -(15 - 0) / 15 = -1, q0 = rint(15 / -1) = -15, scale = 15 / -15 = -1,
// bias = 15, code = rint((x - 15) / -1) = 15 - x.
TEST(Affine, PositiveEdgeCountsDownFromTheMaximum) {
  std::vector<float> x(16);
  for (int i = 0; i < 16; ++i) x[std::size_t(i)] = float(i);
  GroupParams p;
  const auto c = codes_of(x, 4, &p);
  EXPECT_EQ(p.scale, -1.0f);
  EXPECT_EQ(p.bias, 15.0f);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(c[std::size_t(i)], 15 - i);
}

// Negative-dominant group, 2 bits: min -3, max 1, |min| > |max| so edge = -3,
// scale = 4/3, q0 = rint(-3 / (4/3)) = rint(-2.25) = -2, scale = -3 / -2 = 1.5,
// bias = -3, codes = rint((x + 3) / 1.5) = rint(0, 1.33, 2, 2.67) = 0, 1, 2, 3.
// The edge is exact after dequantization; the far extreme moves to 1.5.
TEST(Affine, NegativeDominantGroupKeepsTheMinimumExact) {
  GroupParams p;
  const auto c = codes_of({-3.0f, -1.0f, 0.0f, 1.0f}, 2, &p);
  EXPECT_EQ(p.scale, 1.5f);
  EXPECT_EQ(p.bias, -3.0f);
  EXPECT_EQ(c, (std::vector<uint8_t>{0, 1, 2, 3}));
}

// Ties round to even: scale -1, bias 3, so codes = rint(3 - x):
// rint(3, 2.5, 1.5, 0) = 3, 2, 2, 0.
TEST(Affine, TiesRoundToEven) {
  GroupParams p;
  const auto c = codes_of({0.0f, 0.5f, 1.5f, 3.0f}, 2, &p);
  EXPECT_EQ(p.scale, -1.0f);
  EXPECT_EQ(p.bias, 3.0f);
  EXPECT_EQ(c, (std::vector<uint8_t>{3, 2, 2, 0}));
}

// An all-equal group: the range is 0, the scale falls back to -1e-7, q0 is
// far from 0, so bias = the value and every code is 0: dequantization gives
// the value back exactly (up to the storage rounding of the bias).
TEST(Affine, ConstantGroupStoresTheValueAsBias) {
  std::vector<float> x(32, 0.7f);
  std::vector<uint32_t> packed(4);
  uint16_t scales[1], biases[1];
  quantize(x, {4, 32}, DType::BF16, packed, scales, biases);
  for (uint32_t w : packed) EXPECT_EQ(w, 0u);
  EXPECT_EQ(biases[0], f32_to_bf16(0.7f));
  std::vector<float> back(32);
  dequantize(packed, scales, biases, DType::BF16, {4, 32}, back);
  for (float v : back) EXPECT_EQ(v, round_bf16(0.7f));
}

// An all-zero group: q0 = rint(0 / -1e-7) = 0, so the bias stays 0.
TEST(Affine, ZeroGroupHasZeroBias) {
  std::vector<float> x(32, 0.0f);
  std::vector<uint32_t> packed(8);
  float scales[1], biases[1];
  quantize(x, {8, 32}, DType::F32, packed, scales, biases);
  EXPECT_EQ(biases[0], 0.0f);
  EXPECT_EQ(scales[0], -1e-7f);
  for (uint32_t w : packed) EXPECT_EQ(w, 0u);
}

// Packing is little end first: code j of a word at bits [j*bits, (j+1)*bits).
TEST(Affine, PackingIsLittleEndFirst) {
  std::vector<uint8_t> c4 = {0, 1, 2, 3, 4, 5, 6, 7};
  uint32_t w4;
  pack_codes(c4, 4, {&w4, 1});
  EXPECT_EQ(w4, 0x76543210u);
  std::vector<uint8_t> c8 = {1, 2, 3, 4};
  uint32_t w8;
  pack_codes(c8, 8, {&w8, 1});
  EXPECT_EQ(w8, 0x04030201u);
  std::vector<uint8_t> c2 = {0, 1, 2, 3, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  uint32_t w2;
  pack_codes(c2, 2, {&w2, 1});
  EXPECT_EQ(w2, 0x40001BE4u);  // bytes E4 = 0,1,2,3; 1B = 3,2,1,0; top bits = code 1
  std::vector<uint8_t> back(16);
  unpack_codes({&w2, 1}, 2, back);
  EXPECT_EQ(back, c2);
}

// 3-, 5- and 6-bit codes: MLX packs 8 codes in 3 bytes (3-bit), 8 in 5
// bytes (5-bit) and 4 in 3 bytes (6-bit), low bits first, a code crossing a
// byte boundary continuing in the next byte's low bits. The bytes below are
// built by hand from that rule, per byte, independently of pack_codes.
TEST(Affine, OddWidthsPackAsMlxBytePacks) {
  std::mt19937 rng(11);
  for (int bits : {3, 5, 6}) {
    std::uniform_int_distribution<int> code(0, max_code(bits));
    std::vector<uint8_t> c(32);  // 32 codes: a whole number of words and packs
    for (auto& v : c) v = uint8_t(code(rng));
    std::vector<uint8_t> bytes;
    if (bits == 3) {
      for (std::size_t p = 0; p < c.size(); p += 8) {
        const uint8_t* q = &c[p];
        bytes.push_back(uint8_t(q[0] | q[1] << 3 | (q[2] & 3) << 6));
        bytes.push_back(uint8_t(q[2] >> 2 | q[3] << 1 | q[4] << 4 | (q[5] & 1) << 7));
        bytes.push_back(uint8_t(q[5] >> 1 | q[6] << 2 | q[7] << 5));
      }
    } else if (bits == 5) {
      for (std::size_t p = 0; p < c.size(); p += 8) {
        const uint8_t* q = &c[p];
        bytes.push_back(uint8_t(q[0] | (q[1] & 7) << 5));
        bytes.push_back(uint8_t(q[1] >> 3 | q[2] << 2 | (q[3] & 1) << 7));
        bytes.push_back(uint8_t(q[3] >> 1 | (q[4] & 15) << 4));
        bytes.push_back(uint8_t(q[4] >> 4 | q[5] << 1 | (q[6] & 3) << 6));
        bytes.push_back(uint8_t(q[6] >> 2 | q[7] << 3));
      }
    } else {
      for (std::size_t p = 0; p < c.size(); p += 4) {
        const uint8_t* q = &c[p];
        bytes.push_back(uint8_t(q[0] | (q[1] & 3) << 6));
        bytes.push_back(uint8_t(q[1] >> 2 | (q[2] & 15) << 4));
        bytes.push_back(uint8_t(q[2] >> 4 | q[3] << 2));
      }
    }
    std::vector<uint32_t> packed(static_cast<std::size_t>(bits));  // 32 codes · bits / 32
    pack_codes(c, bits, packed);
    ASSERT_EQ(bytes.size(), packed.size() * 4);
    for (std::size_t i = 0; i < bytes.size(); ++i)
      EXPECT_EQ(uint8_t(packed[i / 4] >> (8 * (i % 4))), bytes[i]) << bits << "-bit byte " << i;
    std::vector<uint8_t> back(c.size());
    unpack_codes(packed, bits, back);
    EXPECT_EQ(back, c) << bits;
    for (std::size_t i = 0; i < c.size(); ++i) EXPECT_EQ(code_at(packed.data(), int64_t(i), bits), c[i]);
  }
}

// mlx-community checkpoints hold packed uint32 codes with bf16 scales and
// biases; MLX documents dequantization as w = s * q + beta per group.
// Hand-computed: codes 0..7 then 8..15 (twice) with s = 0.5, beta = -1 give
// -1 + 0.5 * code; a second group with s = -0.25, beta = 2 gives 2 - code/4.
TEST(Affine, DequantizeMatchesMlxDocumentedFormula) {
  std::vector<uint32_t> packed = {0x76543210u, 0xFEDCBA98u, 0x76543210u, 0xFEDCBA98u,
                                  0x76543210u, 0xFEDCBA98u, 0x76543210u, 0xFEDCBA98u};
  const uint16_t scales[2] = {f32_to_bf16(0.5f), f32_to_bf16(-0.25f)};
  const uint16_t biases[2] = {f32_to_bf16(-1.0f), f32_to_bf16(2.0f)};
  std::vector<float> out(64);
  dequantize(packed, scales, biases, DType::BF16, {4, 32}, out);
  for (int i = 0; i < 64; ++i) {
    const int code = i % 16;
    const float want = i < 32 ? -1.0f + 0.5f * float(code) : 2.0f - 0.25f * float(code);
    EXPECT_EQ(out[std::size_t(i)], want) << i;
  }
}

// Properties over random data: codes in range, the edge element exact (f32
// parameters), every element within one step of its value, and packing
// round-trips.
TEST(Affine, RandomGroupsRespectTheFormula) {
  std::mt19937 rng(7);
  for (int bits : {2, 3, 4, 5, 6, 8}) {
    for (int g : {16, 32, 64, 128}) {
      for (int trial = 0; trial < 20; ++trial) {
        std::normal_distribution<float> dist(trial % 3 == 0 ? -2.0f : 0.5f, 1.0f + float(trial));
        std::vector<float> x(std::size_t(g) * 4);  // 4 groups: whole words for every width
        for (float& v : x) v = dist(rng);
        std::vector<uint32_t> packed(x.size() * std::size_t(bits) / 32);
        std::vector<float> scales(4), biases(4), back(x.size());
        quantize(x, {bits, g}, DType::F32, packed, scales.data(), biases.data());
        dequantize(packed, scales.data(), biases.data(), DType::F32, {bits, g}, back);
        for (int grp = 0; grp < 4; ++grp) {
          float lo = INFINITY, hi = -INFINITY;
          for (int j = 0; j < g; ++j) {
            lo = std::min(lo, x[std::size_t(grp * g + j)]);
            hi = std::max(hi, x[std::size_t(grp * g + j)]);
          }
          const float edge = std::fabs(lo) > std::fabs(hi) ? lo : hi;
          const float step = std::fabs(scales[std::size_t(grp)]);
          bool edge_seen = false;
          for (int j = 0; j < g; ++j) {
            const std::size_t i = std::size_t(grp * g + j);
            EXPECT_LE(std::fabs(back[i] - x[i]), step * 1.0001f + 1e-6f) << bits << " " << g;
            if (x[i] == edge) edge_seen = edge_seen || back[i] == edge;
          }
          EXPECT_TRUE(edge_seen) << "edge value not exact, bits " << bits << " group " << g;
        }
        std::vector<uint8_t> codes(x.size());
        unpack_codes(packed, bits, codes);
        for (uint8_t c : codes) EXPECT_LE(c, max_code(bits));
        std::vector<uint32_t> repacked(packed.size());
        pack_codes(codes, bits, repacked);
        EXPECT_EQ(repacked, packed);
      }
    }
  }
}

// Stored (bf16) parameters round the scale and bias; codes are still those of
// the f32 computation, exactly as MLX stores them.
TEST(Affine, StoredParametersAreRoundedAfterCoding) {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(64);
  for (float& v : x) v = dist(rng);
  std::vector<uint32_t> a(8), b(8);
  float fs[1], fb[1];
  uint16_t hs[1], hb[1];
  quantize(x, {4, 64}, DType::F32, a, fs, fb);
  quantize(x, {4, 64}, DType::BF16, b, hs, hb);
  EXPECT_EQ(a, b);
  EXPECT_EQ(hs[0], f32_to_bf16(fs[0]));
  EXPECT_EQ(hb[0], f32_to_bf16(fb[0]));
}

TEST(Affine, NonFiniteInputIsDefinedBehaviour) {
  std::vector<float> x(32, 1.0f);
  x[3] = NAN;
  x[7] = INFINITY;
  std::vector<uint32_t> packed(4);
  float s[1], b[1];
  quantize(x, {4, 32}, DType::F32, packed, s, b);  // must not trap under UBSan
  std::vector<uint8_t> codes(32);
  unpack_codes(packed, 4, codes);
  for (uint8_t c : codes) EXPECT_LE(c, 15);
}

TEST(Affine, RejectsBadSpecs) {
  EXPECT_THROW(check_spec({7, 64}), Error);
  EXPECT_THROW(check_spec({1, 64}), Error);
  EXPECT_THROW(check_spec({4, 48}), Error);
  EXPECT_THROW(check_spec({4, 8}), Error);
  for (int bits : {2, 3, 4, 5, 6, 8})
    for (int g : {16, 32, 64, 128}) EXPECT_NO_THROW(check_spec({bits, g}));
  std::vector<float> x(48);
  std::vector<uint32_t> packed(6);
  float s[2], b[2];
  EXPECT_THROW(quantize(x, {4, 32}, DType::F32, packed, s, b), Error);
  std::vector<float> y(32);
  std::vector<uint32_t> p4(4);
  EXPECT_THROW(quantize(y, {4, 32}, DType::I32, p4, s, b), Error);
  std::vector<float> out(40);
  EXPECT_THROW(dequantize(p4, s, b, DType::F32, {4, 32}, out), Error);
}

}  // namespace
}  // namespace rowlm::quant
