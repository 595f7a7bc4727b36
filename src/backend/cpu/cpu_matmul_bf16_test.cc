// The bf16-dot matmul (MatmulPrecision::Bf16) against a plain implementation
// of its canonical pair order, bit for bit, on every kernel table: scalar,
// AVX2 and AVX-512 emulating VDPBF16PS, and VDPBF16PS itself where the CPU
// has it. Adversarial bit patterns (denormals, signed zeros, tiny products,
// NaN, infinities) pin the emulation to the instruction. Then the matmul
// driver: rows independent of the batch, schedules and ISAs agree, other
// weight types keep the f32 path.

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/test_util.h"
#include "core/error.h"

namespace rowlm {
namespace {

using testing::float_bits;
using testing::narrowed;
using testing::random_f32;
using testing::widened;

// One VDPBF16PS lane step as the instruction set manual describes it, with
// denormals-are-zero on the inputs and flush-to-zero on the result.
float flush(float f) { return std::fpclassify(f) == FP_SUBNORMAL ? std::copysign(0.0f, f) : f; }
float pair_step(float acc, uint16_t a, uint16_t b) {
  return flush(std::fma(flush(bf16_to_f32(a)), flush(bf16_to_f32(b)), flush(acc)));
}

// The canonical pair order: lane j takes the pairs p ≡ j (mod 16) of a
// zero-padded K in increasing p, odd element first; then the lane tree.
float canonical_pair_dot(const uint16_t* x, const uint16_t* w, int64_t K) {
  float lane[16] = {};
  const int64_t pairs = (K + 31) / 32 * 16;
  auto at = [K](const uint16_t* v, int64_t k) { return k < K ? v[k] : uint16_t(0); };
  for (int64_t p = 0; p < pairs; ++p) {
    float& acc = lane[p % 16];
    acc = pair_step(acc, at(x, 2 * p + 1), at(w, 2 * p + 1));
    acc = pair_step(acc, at(x, 2 * p), at(w, 2 * p));
  }
  for (int width = 8; width >= 1; width /= 2)
    for (int j = 0; j < width; ++j) lane[j] = lane[j] + lane[j + width];
  return lane[0];
}

struct Table {
  std::string label;
  const cpu::Kernels* kernels;
};

std::vector<Table> every_table() {
  std::vector<Table> out;
  for (cpu::Isa isa : cpu::supported_isas()) {
    const cpu::Kernels& k = cpu::kernels_for(isa);
    out.push_back({std::string(cpu::isa_name(isa)) + (k.native_bf16 ? " (VDPBF16PS)" : ""), &k});
    if (isa == cpu::Isa::Avx512 && k.native_bf16)
      out.push_back({"avx512 (emulated)", &cpu::avx512_kernels_emulating_bf16()});
  }
  return out;
}

bool same_result(float a, float b) { return std::isnan(a) ? std::isnan(b) : float_bits(a) == float_bits(b); }

void expect_tables_match_oracle(const std::vector<uint16_t>& x, const std::vector<uint16_t>& w, int64_t M,
                                int64_t N, int64_t K, const std::string& what) {
  std::vector<float> want(std::size_t(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) want[m * N + n] = canonical_pair_dot(x.data() + m * K, w.data() + n * K, K);
  for (const Table& t : every_table()) {
    std::vector<float> y(std::size_t(M * N));
    t.kernels->dot_block_bf16(x.data(), K, M, w.data(), K, N, K, y.data(), N);
    int64_t mismatches = 0;
    for (int64_t i = 0; i < M * N; ++i)
      if (!same_result(y[i], want[i]) && ++mismatches <= 3)
        ADD_FAILURE() << t.label << " " << what << ": element " << i << " is " << y[i] << " ("
                      << std::hex << float_bits(y[i]) << "), canonical " << want[i] << " (" << float_bits(want[i])
                      << std::dec << ")";
    EXPECT_EQ(mismatches, 0) << t.label << " " << what;
  }
}

std::vector<uint16_t> bf16_values(int64_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<uint16_t> out(static_cast<std::size_t>(n));
  for (auto& v : out) v = f32_to_bf16(dist(rng));
  return out;
}

TEST(CpuMatmulBf16, EveryTableMatchesTheCanonicalPairOrderBitwise) {
  std::mt19937 rng(11);
  // Odd K (tails of every parity), N past every tile width, M past every row group.
  const int64_t shapes[][3] = {{1, 1, 1},  {1, 31, 13},  {2, 32, 6},  {3, 33, 7},   {4, 100, 25},
                               {5, 63, 11}, {7, 200, 31}, {17, 70, 19}, {64, 129, 29}, {1, 0, 3},
                               // K in blocks on every table (kernel_algorithms.h, k_block)
                               {9, 3500, 70}, {33, 2100, 150},
                               // more row groups than the carry holds (M in parts)
                               {200, 1300, 9}, {400, 3100, 5}};
  for (const auto& s : shapes) {
    const int64_t M = s[0], K = s[1], N = s[2];
    expect_tables_match_oracle(bf16_values(M * K, rng, 1.0f), bf16_values(N * K, rng, 0.5f), M, N, K,
                               "M=" + std::to_string(M) + " K=" + std::to_string(K) + " N=" + std::to_string(N));
  }
}

// Bit patterns where the semantics show: denormal inputs, signed zeros,
// products and sums around the bottom of the normal range, ties, huge
// values that overflow, NaN.
TEST(CpuMatmulBf16, EmulationEqualsTheInstructionOnAdversarialValues) {
  std::mt19937 rng(12);
  std::uniform_int_distribution<int> pick(0, 9);
  std::uniform_int_distribution<uint32_t> bits(0, 0xffff);
  auto adversarial = [&](int64_t n) {
    std::vector<uint16_t> out(static_cast<std::size_t>(n));
    for (auto& v : out) {
      const uint16_t sign = uint16_t(bits(rng) & 0x8000);
      const uint16_t mantissa = uint16_t(bits(rng) & 0x7f);
      switch (pick(rng)) {
        case 0: v = uint16_t(sign | mantissa); break;                         // denormal or zero
        case 1: v = sign; break;                                              // ±0
        case 2: v = uint16_t(sign | (uint16_t(1 + bits(rng) % 8) << 7) | mantissa); break;   // near 2^-126
        case 3: v = uint16_t(sign | (uint16_t(56 + bits(rng) % 16) << 7) | mantissa); break;  // products near 2^-126
        case 4: v = uint16_t(sign | (uint16_t(127 + bits(rng) % 3) << 7)); break;            // ±1, ±2, ±4: ties
        case 5: v = uint16_t(sign | (uint16_t(103 + bits(rng) % 3) << 7)); break;            // ±2^-24 ...
        case 6: v = uint16_t(sign | (uint16_t(230 + bits(rng) % 24) << 7) | mantissa); break;  // overflow
        case 7: v = bits(rng) % 50 == 0 ? uint16_t(0x7fc1) : uint16_t(sign | 0x3f80); break;  // rare NaN
        default: v = f32_to_bf16(std::normal_distribution<float>(0.0f, 1.0f)(rng)); break;
      }
    }
    return out;
  };
  for (int round = 0; round < 20; ++round) {
    const int64_t M = 1 + round % 5, K = 2 + 37 * (round % 4), N = 3 + round % 13;
    expect_tables_match_oracle(adversarial(M * K), adversarial(N * K), M, N, K, "round " + std::to_string(round));
  }
  // Accumulators that reach the bottom of the normal range and cancel there.
  std::vector<uint16_t> x, w;
  for (int i = 0; i < 64; ++i) {
    x.push_back(f32_to_bf16(i % 2 ? 0x1p-63f : -0x1.8p-63f));
    w.push_back(f32_to_bf16(i % 3 ? 0x1p-63f : 0x1.4p-64f));
  }
  expect_tables_match_oracle(x, w, 1, 1, 64, "cancellation near 2^-126");
}

TEST(CpuMatmulBf16, MatmulRoundsActivationsToBf16AndIsBatchInvariant) {
  std::mt19937 rng(13);
  const int64_t M = 37, K = 131, N = 67;
  const Tensor x = random_f32({M, K}, rng);
  const Tensor w = narrowed(random_f32({N, K}, rng, 0.3f), DType::BF16);
  const Tensor x_bf16 = narrowed(x, DType::BF16);
  std::vector<float> want(std::size_t(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n)
      want[m * N + n] = canonical_pair_dot(x_bf16.data<uint16_t>() + m * K, w.data<uint16_t>() + n * K, K);
  for (cpu::Isa isa : cpu::supported_isas()) {
    const cpu::Kernels& k = cpu::kernels_for(isa);
    for (int threads : {1, 2}) {
      ThreadPool pool(threads);
      for (int64_t chunk_bytes : {int64_t(1), int64_t(4096), int64_t(1) << 20}) {
        const std::string what = std::string(cpu::isa_name(isa)) + " threads=" + std::to_string(threads) +
                                 " chunk_bytes=" + std::to_string(chunk_bytes);
        // The whole batch, then every row alone.
        for (int64_t m0 = -1; m0 < M; ++m0) {
          const int64_t rows = m0 < 0 ? M : 1, first = m0 < 0 ? 0 : m0;
          std::vector<float> y(std::size_t(rows * N));
          cpu::matmul(k, pool, x.data<float>() + first * K, rows, K, cpu::WeightRows{DType::BF16, w.raw(), K}, N,
                      y.data(), MatmulPrecision::Bf16, cpu::MatmulTuning{chunk_bytes});
          for (int64_t i = 0; i < rows * N; ++i)
            ASSERT_EQ(float_bits(y[i]), float_bits(want[first * N + i])) << what << " rows from " << first;
        }
      }
    }
  }
}

TEST(CpuMatmulBf16, OtherWeightTypesKeepTheF32Path) {
  std::mt19937 rng(14);
  const int64_t M = 5, K = 77, N = 9;
  const Tensor x = random_f32({M, K}, rng);
  for (DType dt : {DType::F32, DType::F16}) {
    const Tensor w32 = random_f32({N, K}, rng);
    const Tensor w = dt == DType::F32 ? w32 : narrowed(w32, dt);
    Tensor y_f32(DType::F32, {M, N}), y_bf16(DType::F32, {M, N});
    make_cpu_backend(1, MatmulPrecision::F32)->matmul(x, Weight::dense(w), y_f32);
    make_cpu_backend(1, MatmulPrecision::Bf16)->matmul(x, Weight::dense(w), y_bf16);
    for (int64_t i = 0; i < M * N; ++i)
      ASSERT_EQ(float_bits(y_f32.data<float>()[i]), float_bits(y_bf16.data<float>()[i])) << dtype_name(dt);
  }
}

// The pair order is accurate too: against a double-precision sum of the
// same bf16 products.
TEST(CpuMatmulBf16, CloseToTheExactDotProductOfTheRoundedValues) {
  std::mt19937 rng(15);
  const int64_t M = 6, K = 1000, N = 10;
  const Tensor x = random_f32({M, K}, rng);
  const Tensor w = narrowed(random_f32({N, K}, rng), DType::BF16);
  const auto xr = widened(narrowed(x, DType::BF16)), wr = widened(w);
  Tensor y(DType::F32, {M, N});
  make_cpu_backend(2, MatmulPrecision::Bf16)->matmul(x, Weight::dense(w), y);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double exact = 0, magnitude = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = double(xr[m * K + k]) * wr[n * K + k];
        exact += p;
        magnitude += std::fabs(p);
      }
      EXPECT_NEAR(y.data<float>()[m * N + n], exact, magnitude * 1e-5);
    }
}

TEST(CpuMatmulBf16, PrecisionNamesParseAndUnknownOnesAreRejected) {
  for (MatmulPrecision p : {MatmulPrecision::F32, MatmulPrecision::Bf16})
    EXPECT_EQ(parse_matmul_precision(matmul_precision_name(p)), p);
  try {
    parse_matmul_precision("fp8");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'fp8'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(make_cpu_backend(1, MatmulPrecision::Bf16)->matmul_precision(), MatmulPrecision::Bf16);
}

}  // namespace
}  // namespace rowlm
