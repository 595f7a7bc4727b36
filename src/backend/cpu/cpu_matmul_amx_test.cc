// The AMX bf16 matmul (amx_bf16.h) against a scalar statement of AMX's
// order, bit for bit, and batch invariance through the backend. Runs where
// the CPU grants AMX-BF16 tiles (the accelerator host); skipped elsewhere.

#include <gtest/gtest.h>

#include <xmmintrin.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/amx_bf16.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/test_util.h"
#include "core/dtype.h"
#include "core/thread_pool.h"

namespace rowlm {
namespace {

using testing::float_bits;

// AMX's order for one output, written out: blocks of 32, even and odd
// products summed apart from zero with one rounding each, then
// acc + (even + odd); FTZ and DAZ as the tiles run.
float amx_order_dot(const std::vector<uint16_t>& x, const std::vector<uint16_t>& w, int64_t K) {
  const unsigned saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040);  // FTZ, DAZ
  // DAZ written out as well: the oracle does not lean on how std::fma meets MXCSR.
  auto at = [K](const std::vector<uint16_t>& v, int64_t k) {
    if (k >= K) return 0.0f;
    const uint16_t b = v[std::size_t(k)];
    return (b & 0x7f80) == 0 ? std::copysign(0.0f, bf16_to_f32(b)) : bf16_to_f32(b);
  };
  volatile float acc = 0.0f;
  for (int64_t k0 = 0; k0 < K; k0 += 32) {
    float even = 0.0f, odd = 0.0f;
    for (int64_t i = 0; i < 16; ++i) {
      even = std::fma(at(x, k0 + 2 * i), at(w, k0 + 2 * i), even);
      odd = std::fma(at(x, k0 + 2 * i + 1), at(w, k0 + 2 * i + 1), odd);
    }
    acc = acc + (even + odd);
  }
  const float out = acc;
  _mm_setcsr(saved);
  return out;
}

// bf16 values over a wide range of exponents, with some zeros and
// subnormals (which the tiles read as zero).
uint16_t draw_bf16(std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-12, 12), kind(0, 49);
  const int k = kind(rng);
  if (k == 0) return 0x8000;                                 // −0
  if (k == 1) return uint16_t(0x0001 + (rng() & 0x7f));      // a subnormal
  return f32_to_bf16(std::ldexp(normal(rng), exponent(rng)));
}

TEST(CpuMatmulAmx, MatchesAmxOrderBitwiseForEveryShapeAndSchedule) {
  if (!cpu::amx_bf16_usable()) GTEST_SKIP() << "this CPU has no AMX-BF16 tiles (or the kernel refused them)";
  std::mt19937 rng(3);
  // K: one element, a block less one, one, one more, several with a tail;
  // N and M around whole tiles of 16.
  const int64_t shapes[][3] = {{1, 1, 1},    {1, 31, 17},  {2, 32, 16},  {15, 33, 15},  {16, 64, 33},
                               {17, 100, 47}, {33, 1000, 40}, {40, 96, 100}, {3, 1537, 64}, {64, 256, 130}};
  for (const auto& s : shapes) {
    const int64_t M = s[0], K = s[1], N = s[2];
    std::vector<float> x(std::size_t(M * K));
    for (float& v : x) v = bf16_to_f32(draw_bf16(rng)) * 1.0001f;  // not bf16-exact: the rounding shows
    std::vector<uint16_t> w(std::size_t(N * K));
    for (uint16_t& v : w) v = draw_bf16(rng);
    std::vector<float> want(std::size_t(M * N));
    for (int64_t m = 0; m < M; ++m) {
      std::vector<uint16_t> xr(static_cast<std::size_t>(K));
      for (int64_t k = 0; k < K; ++k) xr[std::size_t(k)] = f32_to_bf16(x[std::size_t(m * K + k)]);
      for (int64_t n = 0; n < N; ++n) {
        std::vector<uint16_t> wr(w.begin() + n * K, w.begin() + (n + 1) * K);
        want[std::size_t(m * N + n)] = amx_order_dot(xr, wr, K);
      }
    }
    for (int threads : {1, 3})
      for (int64_t chunk_bytes : {int64_t(1), int64_t(1) << 20}) {
        ThreadPool pool(threads);
        std::vector<float> y(std::size_t(M * N), -1.0f);
        cpu::matmul_amx_bf16(pool, x.data(), M, K, w.data(), K, N, y.data(), cpu::MatmulTuning{chunk_bytes});
        for (int64_t i = 0; i < M * N; ++i)
          ASSERT_EQ(float_bits(y[std::size_t(i)]), float_bits(want[std::size_t(i)]))
              << "M=" << M << " K=" << K << " N=" << N << " threads=" << threads << " chunk_bytes=" << chunk_bytes
              << " at m=" << i / N << " n=" << i % N << ": " << y[std::size_t(i)] << " vs " << want[std::size_t(i)];
      }
  }
}

TEST(CpuMatmulAmx, ARowsResultDoesNotDependOnTheRestOfTheBatch) {
  if (!cpu::amx_bf16_usable()) GTEST_SKIP() << "this CPU has no AMX-BF16 tiles (or the kernel refused them)";
  std::mt19937 rng(5);
  const int64_t K = 300, N = 70;
  const Tensor w = testing::narrowed(testing::random_f32({N, K}, rng, 0.3f), DType::BF16);
  auto backend = make_cpu_backend_amx(2);
  EXPECT_NE(backend->name().find("AMX"), std::string::npos) << backend->name();
  const auto weight = backend->prepare_weight(Weight::dense(w));
  const Tensor batch = testing::random_f32({37, K}, rng);
  Tensor all(DType::F32, {37, N});
  backend->matmul(batch, weight, all);
  for (int64_t m : {0, 15, 16, 36}) {
    Tensor one(DType::F32, {1, K}), y(DType::F32, {1, N});
    std::copy(batch.data<float>() + m * K, batch.data<float>() + (m + 1) * K, one.data<float>());
    backend->matmul(one, weight, y);
    for (int64_t n = 0; n < N; ++n)
      ASSERT_EQ(float_bits(y.data<float>()[n]), float_bits(all.data<float>()[m * N + n])) << "row " << m << " n=" << n;
  }
}

}  // namespace
}  // namespace rowlm
