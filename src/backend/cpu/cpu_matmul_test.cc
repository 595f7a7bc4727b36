// matmul on every CPU path against a scalar implementation of the canonical
// reduction order, bit for bit; batch invariance; dtype equivalence.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>

#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/test_util.h"
#include "core/error.h"

namespace rowlm {
namespace {

using testing::all_backends;
using testing::expect_bitwise;
using testing::oracle_matmul;
using testing::float_bits;
using testing::narrowed;
using testing::random_f32;
using testing::widened;

struct Shape3 {
  int64_t M, K, N;
};

// Odd K (tails of several lengths, and K = 0), N leaving a remainder after
// every tile width (12, 8, 6 weight rows), M covering every row-group size
// (1 to 4 rows of x) and several groups.
constexpr Shape3 kShapes[] = {{1, 1, 1},   {1, 37, 13},  {2, 16, 6},   {3, 100, 7}, {3, 50, 19},
                              {4, 47, 25}, {5, 33, 11},  {7, 200, 31}, {17, 70, 19},
                              {64, 129, 29}, {1, 0, 3},
                              // large enough for the threaded schedules
                              {2, 1001, 141}, {33, 300, 43},
                              // K in blocks on every path (kernel_algorithms.h, k_block), with
                              // several slabs of N and a tail step in the last block
                              {9, 3500, 70}, {33, 2100, 150},
                              // more row groups than the carry holds (M in parts)
                              {200, 1000, 9}, {400, 2100, 5}};

TEST(CpuMatmul, EveryPathMatchesTheCanonicalOrderBitwise) {
  std::mt19937 rng(1);
  auto backends = all_backends();
  for (const Shape3& s : kShapes) {
    const Tensor x = random_f32({s.M, s.K}, rng);
    const Tensor w32 = random_f32({s.N, s.K}, rng, 0.5f);
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      const Tensor w = dt == DType::F32 ? w32 : narrowed(w32, dt);
      const auto want = oracle_matmul(x, widened(w), s.N);
      for (auto& b : backends) {
        Tensor y(DType::F32, {s.M, s.N});
        b.backend->matmul(x, b.backend->prepare_weight(Weight::dense(w)), y);
        expect_bitwise(y, want, b.label() + " " + std::string(dtype_name(dt)) + " M=" + std::to_string(s.M) +
                                    " K=" + std::to_string(s.K) + " N=" + std::to_string(s.N));
      }
    }
  }
}

// A weight that does not start on a cache line (a safetensors view, packed
// at any even offset) is copied into aligned memory by prepare_weight, with
// the same bytes and the same products; an aligned one stays a view.
TEST(CpuMatmul, MisalignedWeightsAreCopiedAlignedWithTheSameResults) {
  std::mt19937 rng(5);
  const int64_t M = 3, K = 96, N = 40;
  const Tensor x = random_f32({M, K}, rng);
  const Tensor w = narrowed(random_f32({N, K}, rng, 0.5f), DType::BF16);
  // The same bf16 matrix 2 bytes into a buffer: 2-byte aligned, as in a checkpoint.
  Tensor buffer(DType::BF16, {N * K + 32});
  std::memcpy(static_cast<std::byte*>(buffer.raw()) + 2, w.raw(), w.nbytes());
  const Tensor shifted = Tensor::view(DType::BF16, {N, K}, static_cast<const std::byte*>(buffer.raw()) + 2,
                                      std::shared_ptr<const void>(buffer.raw(), [keep = buffer](const void*) {}));
  auto b = make_cpu_backend(2);
  const Weight aligned = b->prepare_weight(Weight::dense(w));
  EXPECT_EQ(aligned.values.raw(), w.raw()) << "an aligned weight stays a view";
  const Weight copied = b->prepare_weight(Weight::dense(shifted));
  EXPECT_NE(copied.values.raw(), shifted.raw());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(copied.values.raw()) % 64, 0u);
  ASSERT_EQ(copied.values.nbytes(), w.nbytes());
  EXPECT_EQ(std::memcmp(copied.values.raw(), w.raw(), w.nbytes()), 0);
  Tensor want(DType::F32, {M, N}), got(DType::F32, {M, N});
  b->matmul(x, aligned, want);
  b->matmul(x, copied, got);
  EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0) << "the copy's products differ";
}

// Small chunks force the schedule through many weight chunks and, with few
// chunks per thread, splits of M, on every ISA, dtype and thread count; a
// split_rows_from at or below M splits M first, in parts of whole row
// groups (37 rows: a part of 24 and one of 13).
TEST(CpuMatmul, ChunkedScheduleMatchesTheOracleForAnyChunking) {
  std::mt19937 rng(2);
  const int64_t M = 37, K = 131, N = 67;  // above the size where threads join in
  const Tensor x = random_f32({M, K}, rng);
  const Tensor w32 = random_f32({N, K}, rng);
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
    const Tensor w = dt == DType::F32 ? w32 : narrowed(w32, dt);
    const auto want = oracle_matmul(x, widened(w), N);
    for (cpu::Isa isa : cpu::supported_isas()) {
      const cpu::Kernels& k = cpu::kernels_for(isa);
      for (int threads : {1, 2}) {
        ThreadPool pool(threads);
        for (int64_t chunk_bytes : {int64_t(1), int64_t(4096), int64_t(1) << 20})
          for (int64_t split_rows_from : {0, 1, 37}) {
            cpu::MatmulTuning tuning{chunk_bytes};
            tuning.split_rows_from = split_rows_from;
            tuning.items_per_thread = split_rows_from ? 3 : 4;
            Tensor y(DType::F32, {M, N});
            cpu::matmul(k, pool, x.data<float>(), M, K, cpu::WeightRows{dt, w.raw(), K}, N, y.data<float>(),
                        MatmulPrecision::F32, tuning);
            expect_bitwise(y, want,
                           std::string(cpu::isa_name(isa)) + " " + std::string(dtype_name(dt)) + " threads=" +
                               std::to_string(threads) + " chunk_bytes=" + std::to_string(chunk_bytes) +
                               " split_rows_from=" + std::to_string(split_rows_from));
          }
      }
    }
  }
}

TEST(CpuMatmul, ARowsResultDoesNotDependOnTheRestOfTheBatch) {
  std::mt19937 rng(3);
  const int64_t K = 83, N = 41;
  const Tensor w32 = random_f32({N, K}, rng);
  auto backends = all_backends();
  for (DType dt : {DType::F32, DType::BF16}) {
    const Tensor w = dt == DType::F32 ? w32 : narrowed(w32, dt);
    for (int64_t M : {1, 2, 3, 5, 17, 64}) {
      const Tensor x = random_f32({M, K}, rng);
      for (auto& b : backends) {
        Tensor y(DType::F32, {M, N});
        b.backend->matmul(x, Weight::dense(w), y);
        for (int64_t m = 0; m < M; ++m) {
          Tensor alone(DType::F32, {1, N});
          b.backend->matmul(x.rows(m, m + 1), Weight::dense(w), alone);
          for (int64_t n = 0; n < N; ++n)
            ASSERT_EQ(float_bits(alone.data<float>()[n]), float_bits(y.data<float>()[m * N + n]))
                << b.label() << " M=" << M << " row " << m << " col " << n;
        }
      }
    }
  }
}

TEST(CpuMatmul, NarrowWeightsEqualF32OnTheWidenedValues) {
  std::mt19937 rng(4);
  const int64_t M = 9, K = 190, N = 14;
  const Tensor x = random_f32({M, K}, rng);
  auto backends = all_backends();
  for (DType dt : {DType::BF16, DType::F16}) {
    const Tensor w = narrowed(random_f32({N, K}, rng), dt);
    const auto values = widened(w);
    Tensor w32(DType::F32, {N, K});
    std::copy(values.begin(), values.end(), w32.data<float>());
    for (auto& b : backends) {
      Tensor y_narrow(DType::F32, {M, N}), y_wide(DType::F32, {M, N});
      b.backend->matmul(x, Weight::dense(w), y_narrow);
      b.backend->matmul(x, Weight::dense(w32), y_wide);
      for (int64_t i = 0; i < M * N; ++i)
        ASSERT_EQ(float_bits(y_narrow.data<float>()[i]), float_bits(y_wide.data<float>()[i])) << b.label();
    }
  }
}

// The canonical order is also accurate: compare with a double-precision sum.
TEST(CpuMatmul, CloseToTheExactDotProduct) {
  std::mt19937 rng(5);
  const int64_t M = 6, K = 1000, N = 10;
  const Tensor x = random_f32({M, K}, rng);
  const Tensor w = random_f32({N, K}, rng);
  auto b = make_cpu_backend(2);
  Tensor y(DType::F32, {M, N});
  b->matmul(x, Weight::dense(w), y);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double exact = 0, magnitude = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = double(x.data<float>()[m * K + k]) * w.data<float>()[n * K + k];
        exact += p;
        magnitude += std::fabs(p);
      }
      // 63 sequential FMAs per lane plus a 4-level tree: well under 2^-17 of Σ|x·w|.
      EXPECT_NEAR(y.data<float>()[m * N + n], exact, magnitude * 1e-5);
    }
}

TEST(CpuMatmul, RejectsMismatchedShapesAndTypes) {
  auto b = make_cpu_backend(1);
  Tensor x(DType::F32, {2, 8}), w(DType::F32, {3, 8}), y(DType::F32, {2, 3});
  Tensor w_bad_k(DType::F32, {3, 7}), y_bad(DType::F32, {2, 4}), x_bf16(DType::BF16, {2, 8});
  Tensor w_u8(DType::U8, {3, 8});
  auto message = [&](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { b->matmul(x, Weight::dense(w_bad_k), y); }).find("matmul: w"), std::string::npos);
  EXPECT_NE(message([&] { b->matmul(x, Weight::dense(w), y_bad); }).find("matmul: y"), std::string::npos);
  EXPECT_NE(message([&] { b->matmul(x_bf16, Weight::dense(w), y); }).find("matmul: x"), std::string::npos);
  EXPECT_NE(message([&] { b->matmul(x, Weight::dense(w_u8), y); }).find("matmul: w"), std::string::npos);
  EXPECT_NE(message([&] { b->prepare_weight(Weight::dense(w_u8)); }).find("prepare_weight"), std::string::npos);
  Tensor square(DType::F32, {3, 3});
  EXPECT_NE(message([&] { b->matmul(square, Weight::dense(square), square); }).find("overlap"), std::string::npos);
}

TEST(CpuIsa, ParsesNamesAndRejectsUnknownOnes) {
  for (cpu::Isa isa : {cpu::Isa::Scalar, cpu::Isa::Avx2, cpu::Isa::Avx512})
    EXPECT_EQ(cpu::parse_isa(cpu::isa_name(isa)), isa);
  EXPECT_THROW(cpu::parse_isa("sse9"), Error);
  EXPECT_TRUE(cpu::isa_supported(cpu::Isa::Scalar));
  EXPECT_TRUE(cpu::isa_supported(cpu::best_isa()));
}

}  // namespace
}  // namespace rowlm
