// The sampler's row kernels (scan_blocks, first_above, shift_divide,
// remove_below, exp_blocks) against plain loops and double-precision exp,
// on random rows of every length around the vector and block edges, with
// NaN, ±inf and ±0 mixed in; and every ISA against every other, bitwise.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/test_util.h"
#include "core/isa.h"

namespace rowlm {
namespace {

using testing::float_bits;
using testing::ulp_distance;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A row of normal values with specials sprinkled in at random positions.
std::vector<float> random_row(std::mt19937& rng, int64_t n, bool specials) {
  std::normal_distribution<float> value(0.0f, 4.0f);
  std::uniform_int_distribution<int> pick(0, 39);
  std::vector<float> row(static_cast<std::size_t>(n));
  for (float& x : row) {
    x = value(rng);
    if (!specials) continue;
    switch (pick(rng)) {
      case 0: x = kNaN; break;
      case 1: x = kInf; break;
      case 2: x = -kInf; break;
      case 3: x = 0.0f; break;
      case 4: x = -0.0f; break;
      default: break;
    }
  }
  return row;
}

std::vector<int64_t> lengths() {
  std::vector<int64_t> out = {1, 2, 15, 16, 17, 31, 63, 64, 65, 1023, 1024, 1025, 3000};
  return out;
}

TEST(CpuRowKernels, ScanBlocksFindsEachBlocksMaxAndFlags) {
  std::mt19937 rng(11);
  for (int64_t n : lengths())
    for (int64_t block : {16, 64, 1024})
      for (int trial = 0; trial < 4; ++trial) {
        const bool specials = trial % 2 == 1;
        std::vector<float> row = random_row(rng, n, specials);
        if (trial == 3) std::fill(row.begin(), row.end(), -kInf);  // no finite value
        const std::size_t blocks = std::size_t((n + block - 1) / block);
        std::vector<cpu::RowScan> first;
        for (cpu::Isa isa : cpu::supported_isas()) {
          std::vector<cpu::RowScan> got(blocks);
          cpu::kernels_for(isa).scan_blocks(row.data(), n, block, got.data());
          for (std::size_t b = 0; b < blocks; ++b) {
            float max = -kInf;
            bool bad = false, finite = false;
            for (int64_t i = int64_t(b) * block; i < std::min(n, int64_t(b + 1) * block); ++i) {
              const float x = row[std::size_t(i)];
              if (x > max) max = x;
              bad = bad || std::isnan(x) || x == kInf;
              finite = finite || std::isfinite(x);
            }
            const std::string where = std::string(cpu::isa_name(isa)) + " n=" + std::to_string(n) +
                                      " block=" + std::to_string(block) + " b=" + std::to_string(b);
            EXPECT_EQ(got[b].max, max) << where;  // +0 and -0 equal
            EXPECT_EQ(got[b].bad, bad) << where;
            EXPECT_EQ(got[b].any_finite, finite) << where;
            if (!first.empty()) {
              EXPECT_EQ(float_bits(got[b].max), float_bits(first[b].max)) << where;
            }
          }
          if (first.empty()) first = got;
        }
      }
}

TEST(CpuRowKernels, FirstAboveIsTheFirstLargerEntry) {
  std::mt19937 rng(12);
  for (int64_t n : lengths())
    for (int trial = 0; trial < 6; ++trial) {
      std::vector<float> row = random_row(rng, n, trial % 2 == 1);
      if (trial == 5) std::fill(row.begin(), row.end(), -5.0f);  // nothing above -3, where a lane past the end is
      for (float t : {-kInf, -3.0f, 0.0f, -0.0f, 5.0f, 9.5f, kInf}) {
        int64_t want = n;
        for (int64_t i = 0; i < n; ++i)
          if (row[std::size_t(i)] > t) {
            want = i;
            break;
          }
        for (cpu::Isa isa : cpu::supported_isas())
          EXPECT_EQ(cpu::kernels_for(isa).first_above(row.data(), n, t), want)
              << cpu::isa_name(isa) << " n=" << n << " t=" << t;
      }
    }
}

TEST(CpuRowKernels, ShiftDivideAndRemoveBelowAreTheScalarOperations) {
  std::mt19937 rng(13);
  for (int64_t n : lengths()) {
    const std::vector<float> row = random_row(rng, n, true);
    for (cpu::Isa isa : cpu::supported_isas()) {
      const cpu::Kernels& k = cpu::kernels_for(isa);
      std::vector<float> shifted = row, removed = row;
      k.shift_divide(shifted.data(), n, 3.25f, 0.7f);
      k.remove_below(removed.data(), n, -1.5f);
      for (int64_t i = 0; i < n; ++i) {
        const float x = row[std::size_t(i)];
        const volatile float diff = x - 3.25f;  // one rounding each, as the kernel's
        EXPECT_EQ(float_bits(shifted[std::size_t(i)]), float_bits(diff / 0.7f)) << cpu::isa_name(isa) << " " << x;
        EXPECT_EQ(float_bits(removed[std::size_t(i)]), float_bits(x < -1.5f ? -kInf : x)) << cpu::isa_name(isa) << " " << x;
      }
    }
  }
}

TEST(CpuRowKernels, ExpBlocksIsWithinThreeUlpAndItsSumsAgreeAcrossPaths) {
  std::mt19937 rng(14);
  int64_t worst = 0;
  for (int64_t n : lengths())
    for (int64_t block : {16, 1024}) {
      std::vector<float> row = random_row(rng, n, false);
      // Specials a processed row may hold: removed tokens, the max, deep tails.
      for (int64_t i = 1; i < n; i += 7) row[std::size_t(i)] = -kInf;  // the shift stays finite
      if (n > 3) row[3] = -90.0f;
      const float shift = *std::max_element(row.begin(), row.end());
      const std::size_t blocks = std::size_t((n + block - 1) / block);
      std::vector<float> first_out, first_sums;
      for (cpu::Isa isa : cpu::supported_isas()) {
        const cpu::Kernels& k = cpu::kernels_for(isa);
        std::vector<float> out(static_cast<std::size_t>(n)), sums(blocks), sums_only(blocks);
        k.exp_blocks(row.data(), n, shift, block, out.data(), sums.data());
        k.exp_blocks(row.data(), n, shift, block, nullptr, sums_only.data());
        for (int64_t i = 0; i < n; ++i) {
          const double y = double(row[std::size_t(i)] - shift);
          const float got = out[std::size_t(i)];
          if (y < -87.0) {
            EXPECT_EQ(float_bits(got), float_bits(0.0f)) << "exp(" << y << ")";
            continue;
          }
          const float want = float(std::exp(y));
          worst = std::max(worst, ulp_distance(got, want));
          ASSERT_LE(ulp_distance(got, want), 3) << cpu::isa_name(isa) << " exp(" << y << ") = " << got;
        }
        for (std::size_t b = 0; b < blocks; ++b) {
          double exact = 0;
          for (int64_t i = int64_t(b) * block; i < std::min(n, int64_t(b + 1) * block); ++i) exact += out[std::size_t(i)];
          EXPECT_NEAR(sums[b], exact, 1e-6 * exact + 1e-30) << cpu::isa_name(isa) << " block " << b;
          EXPECT_EQ(float_bits(sums_only[b]), float_bits(sums[b])) << "the sums do not depend on storing";
        }
        if (first_out.empty()) {
          first_out = out;
          first_sums = sums;
          continue;
        }
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(float_bits(out[std::size_t(i)]), float_bits(first_out[std::size_t(i)])) << cpu::isa_name(isa) << " " << i;
        for (std::size_t b = 0; b < blocks; ++b)
          ASSERT_EQ(float_bits(sums[b]), float_bits(first_sums[b])) << cpu::isa_name(isa) << " block " << b;
      }
    }
  RecordProperty("exp_max_ulp", int(worst));
}

}  // namespace
}  // namespace rowlm
