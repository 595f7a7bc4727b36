// The AMX bf16 matmul (amx_bf16.h) against a scalar statement of AMX's
// order, bit for bit, and batch invariance through the backend. Runs where
// the CPU grants AMX-BF16 tiles (the accelerator host); skipped elsewhere.
// The vector statement of the same order (amx_bf16_rows.h) is held to the
// same oracle wherever the CPU has AVX-512, AMX or not.

#include <gtest/gtest.h>

#include <xmmintrin.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/amx_bf16.h"
#include "backend/cpu/amx_bf16_rows.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/test_util.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/isa.h"
#include "core/thread_pool.h"

namespace rowlm {
namespace {

using testing::float_bits;

// AMX's order for one output, written out: blocks of 32, even and odd
// products summed apart from zero with one rounding each, then
// acc + (even + odd); FTZ and DAZ as the tiles run (flush false: the same
// sums with subnormals kept, to show that a test meets them).
float amx_order_dot(const std::vector<uint16_t>& x, const std::vector<uint16_t>& w, int64_t K, bool flush = true) {
  const unsigned saved = _mm_getcsr();
  if (flush) _mm_setcsr(saved | 0x8040);  // FTZ, DAZ
  // DAZ written out as well: the oracle does not lean on how std::fma meets MXCSR.
  auto at = [K, flush](const std::vector<uint16_t>& v, int64_t k) {
    if (k >= K) return 0.0f;
    const uint16_t b = v[std::size_t(k)];
    return flush && (b & 0x7f80) == 0 ? std::copysign(0.0f, bf16_to_f32(b)) : bf16_to_f32(b);
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

// A bf16 of random sign and mantissa with exponent in [lo, hi], or one
// time in `subnormal_one_in` a subnormal.
uint16_t draw_scaled_bf16(std::mt19937& rng, int lo, int hi, int subnormal_one_in) {
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(lo, hi), kind(1, subnormal_one_in);
  const uint16_t sign = rng() & 1u ? 0x8000 : 0;
  if (kind(rng) == 1) return uint16_t(sign | (0x0001 + (rng() & 0x7f)));
  return uint16_t(sign | f32_to_bf16(std::ldexp(mantissa(rng), exponent(rng))));
}
// Near 2^-63, a tenth subnormal: products fall on both sides of the
// smallest normal (2^-126) and their sums cancel into the subnormal range,
// so FTZ decides many outputs, results included.
uint16_t draw_tiny_bf16(std::mt19937& rng) { return draw_scaled_bf16(rng, -66, -61, 10); }
// Half subnormal, half the lowest normals; met by draw_large_bf16 their
// products are normal, so DAZ alone decides.
uint16_t draw_bottom_bf16(std::mt19937& rng) { return draw_scaled_bf16(rng, -126, -120, 2); }
uint16_t draw_large_bf16(std::mt19937& rng) { return draw_scaled_bf16(rng, 8, 16, 1 << 30); }

using Draw = uint16_t (*)(std::mt19937&);
// Which values x and w are drawn from.
struct Values {
  const char* name;
  Draw x, w;
};
constexpr Values kValues[] = {{"wide", draw_bf16, draw_bf16},
                              {"tiny", draw_tiny_bf16, draw_tiny_bf16},
                              {"subnormal x", draw_bottom_bf16, draw_large_bf16},
                              {"subnormal w", draw_large_bf16, draw_bottom_bf16}};

// x as f32 values that are not bf16-exact (so its rounding shows), w as bf16.
struct Operands {
  std::vector<float> x;
  std::vector<uint16_t> w;
};
Operands draw_operands(int64_t M, int64_t K, int64_t N, const Values& values, std::mt19937& rng) {
  Operands o{std::vector<float>(std::size_t(M * K)), std::vector<uint16_t>(std::size_t(N * K))};
  for (float& v : o.x) v = bf16_to_f32(values.x(rng)) * 1.0001f;
  for (uint16_t& v : o.w) v = values.w(rng);
  return o;
}

// y [M, N] by the oracle, x rounded to bf16 as the kernels round it.
std::vector<float> amx_order_matmul(const Operands& o, int64_t M, int64_t K, int64_t N, bool flush = true) {
  std::vector<float> y(std::size_t(M * N));
  for (int64_t m = 0; m < M; ++m) {
    std::vector<uint16_t> xr(static_cast<std::size_t>(K));
    for (int64_t k = 0; k < K; ++k) xr[std::size_t(k)] = f32_to_bf16(o.x[std::size_t(m * K + k)]);
    for (int64_t n = 0; n < N; ++n) {
      std::vector<uint16_t> wr(o.w.begin() + n * K, o.w.begin() + (n + 1) * K);
      y[std::size_t(m * N + n)] = amx_order_dot(xr, wr, K, flush);
    }
  }
  return y;
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
    const Operands o = draw_operands(M, K, N, kValues[0], rng);
    const std::vector<float> want = amx_order_matmul(o, M, K, N);
    for (int threads : {1, 3})
      for (int64_t chunk_bytes : {int64_t(1), int64_t(1) << 20})
        // 0: every M on the tiles; kAmxRowsMax: up to 4 rows on the vector units.
        for (int64_t vector_rows : {int64_t(0), cpu::kAmxRowsMax}) {
          ThreadPool pool(threads);
          std::vector<float> y(std::size_t(M * N), -1.0f);
          cpu::matmul_amx_bf16(pool, o.x.data(), M, K, o.w.data(), K, N, y.data(),
                               cpu::MatmulTuning{chunk_bytes, vector_rows});
          for (int64_t i = 0; i < M * N; ++i)
            ASSERT_EQ(float_bits(y[std::size_t(i)]), float_bits(want[std::size_t(i)]))
                << "M=" << M << " K=" << K << " N=" << N << " threads=" << threads << " chunk_bytes=" << chunk_bytes
                << " vector_rows=" << vector_rows << " at m=" << i / N << " n=" << i % N << ": "
                << y[std::size_t(i)] << " vs " << want[std::size_t(i)];
        }
  }
}

// The tiles flush in hardware, the vector units under MXCSR: values where
// FTZ and DAZ decide most outputs must give the oracle's bits on both, or
// decode (vector units) and prefill (tiles) would differ on AMX hosts.
TEST(CpuMatmulAmx, TilesAndVectorUnitsAgreeWhereSubnormalsDecide) {
  if (!cpu::amx_bf16_usable()) GTEST_SKIP() << "this CPU has no AMX-BF16 tiles (or the kernel refused them)";
  std::mt19937 rng(7);
  ThreadPool pool(2);
  const int64_t shapes[][3] = {{1, 33, 17}, {3, 200, 40}, {2, 1000, 100}};
  for (const auto& s : shapes)
    for (const Values& values : kValues) {
      const int64_t M = s[0], K = s[1], N = s[2];
      const Operands o = draw_operands(M, K, N, values, rng);
      const std::vector<float> want = amx_order_matmul(o, M, K, N);
      std::vector<float> tiles(std::size_t(M * N)), vector(std::size_t(M * N));
      cpu::matmul_amx_bf16(pool, o.x.data(), M, K, o.w.data(), K, N, tiles.data(),
                           cpu::MatmulTuning{.amx_vector_rows = 0});
      cpu::matmul_amx_bf16_rows(pool, o.x.data(), M, K, o.w.data(), K, N, vector.data());
      for (int64_t i = 0; i < M * N; ++i) {
        ASSERT_EQ(float_bits(tiles[std::size_t(i)]), float_bits(want[std::size_t(i)]))
            << "tiles, " << values.name << ", M=" << M << " K=" << K << " N=" << N << " at " << i;
        ASSERT_EQ(float_bits(vector[std::size_t(i)]), float_bits(want[std::size_t(i)]))
            << "vector units, " << values.name << ", M=" << M << " K=" << K << " N=" << N << " at " << i;
      }
    }
}

TEST(CpuMatmulAmx, ARowsResultDoesNotDependOnTheRestOfTheBatch) {
  if (!cpu::amx_bf16_usable()) GTEST_SKIP() << "this CPU has no AMX-BF16 tiles (or the kernel refused them)";
  std::mt19937 rng(5);
  const int64_t K = 300, N = 70;
  const Tensor w = testing::narrowed(testing::random_f32({N, K}, rng, 0.3f), DType::BF16);
  const Tensor batch = testing::random_f32({37, K}, rng);
  // Tiles for every M, then calls of up to 4 rows on the vector units
  // (ROWLM_CPU_AMX=rows): a lone row goes to the one and the batch to the
  // other, with the same bits.
  for (int64_t vector_rows : {int64_t(0), cpu::kAmxRowsMax}) {
    auto backend = make_cpu_backend_amx(2, vector_rows);
    EXPECT_NE(backend->name().find("AMX"), std::string::npos) << backend->name();
    const auto weight = backend->prepare_weight(Weight::dense(w));
    Tensor all(DType::F32, {37, N});
    backend->matmul(batch, weight, all);
    for (int64_t m : {0, 15, 16, 36}) {
      Tensor one(DType::F32, {1, K}), y(DType::F32, {1, N});
      std::copy(batch.data<float>() + m * K, batch.data<float>() + (m + 1) * K, one.data<float>());
      backend->matmul(one, weight, y);
      for (int64_t n = 0; n < N; ++n)
        ASSERT_EQ(float_bits(y.data<float>()[n]), float_bits(all.data<float>()[m * N + n]))
            << "vector_rows=" << vector_rows << " row " << m << " n=" << n;
    }
  }
}

// ROWLM_CPU_AMX takes 0, 1 or rows; anything else names the variable
// rather than silently picking a path (on any CPU, AMX or not).
TEST(CpuBackendAmxChoice, AnUnknownRowlmCpuAmxValueIsAnError) {
  struct RestoreEnv {
    std::string saved;
    bool had = false;
    RestoreEnv() {
      if (const char* v = std::getenv("ROWLM_CPU_AMX")) saved = v, had = true;
    }
    ~RestoreEnv() {
      if (had) setenv("ROWLM_CPU_AMX", saved.c_str(), 1);
      else unsetenv("ROWLM_CPU_AMX");
    }
  } restore;
  setenv("ROWLM_CPU_AMX", "tile", 1);
  try {
    make_cpu_backend(1, MatmulPrecision::Bf16);
    FAIL() << "ROWLM_CPU_AMX=tile was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ROWLM_CPU_AMX must be 0, 1 or rows, got 'tile'"), std::string::npos)
        << e.what();
  }
  for (const char* ok : {"0", "1", "rows"}) {
    setenv("ROWLM_CPU_AMX", ok, 1);
    EXPECT_NO_THROW(make_cpu_backend(1, MatmulPrecision::Bf16)) << ok;
  }
  try {
    make_cpu_backend_amx(1, cpu::kAmxRowsMax + 1);
    FAIL() << "5 vector rows were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vector_rows must be 0 to 4, got 5"), std::string::npos) << e.what();
  }
}

// The vector statement of AMX's order needs AVX-512 only: these run on
// every AVX-512 machine, the development machine without AMX included.
bool have_avx512() { return cpu::isa_supported(cpu::Isa::Avx512); }

TEST(CpuMatmulAmxRows, MatchesAmxOrderBitwiseForEveryShapeAndSchedule) {
  if (!have_avx512()) GTEST_SKIP() << "this CPU has no AVX-512";
  std::mt19937 rng(11);
  ThreadPool one(1), three(3);
  // N and K around the 16-row groups and 32-element blocks (K = 2048: rows
  // of 4 KB, where the odd rows lag, amx_bf16_rows.h); the last few are
  // large enough (2^18 multiply-adds) for the threads to split them.
  std::vector<std::array<int64_t, 3>> shapes;
  for (int64_t M : {1, 2, 3})
    for (int64_t N : {1, 15, 16, 17, 100})
      for (int64_t K : {1, 31, 32, 33, 200, 1000, 2048}) shapes.push_back({M, K, N});
  for (const auto& s : {std::array<int64_t, 3>{1, 600, 517}, {3, 1000, 200}, {2, 2000, 70}, {4, 777, 130},
                        {2, 4096, 131}})
    shapes.push_back(s);
  for (const auto& [M, K, N] : shapes)
    for (const Values& values : kValues) {
      const Operands o = draw_operands(M, K, N, values, rng);
      const std::vector<float> want = amx_order_matmul(o, M, K, N);
      for (ThreadPool* pool : {&one, &three})
        for (int64_t chunk_bytes : {int64_t(1), int64_t(1) << 20}) {
          std::vector<float> y(std::size_t(M * N), -1.0f);
          cpu::matmul_amx_bf16_rows(*pool, o.x.data(), M, K, o.w.data(), K, N, y.data(),
                                    cpu::MatmulTuning{chunk_bytes});
          for (int64_t i = 0; i < M * N; ++i)
            ASSERT_EQ(float_bits(y[std::size_t(i)]), float_bits(want[std::size_t(i)]))
                << "M=" << M << " K=" << K << " N=" << N << " " << values.name
                << " threads=" << pool->size() << " chunk_bytes=" << chunk_bytes << " at m=" << i / N
                << " n=" << i % N << ": " << y[std::size_t(i)] << " vs " << want[std::size_t(i)];
        }
    }
}

TEST(CpuMatmulAmxRows, FlushesSubnormalsAsTheTilesDoAndRestoresMxcsr) {
  if (!have_avx512()) GTEST_SKIP() << "this CPU has no AVX-512";
  std::mt19937 rng(13);
  const int64_t M = 3, K = 97, N = 40;
  ThreadPool pool(1);
  const unsigned saved = _mm_getcsr();
  for (const Values& values : kValues) {
    if (values.x == draw_bf16) continue;  // flushing rarely shows there
    const Operands o = draw_operands(M, K, N, values, rng);
    const std::vector<float> want = amx_order_matmul(o, M, K, N);
    // The values meet FTZ (tiny) or DAZ (subnormal x or w) in earnest:
    // without them many outputs would differ.
    const std::vector<float> unflushed = amx_order_matmul(o, M, K, N, /*flush=*/false);
    int64_t decided_by_flushing = 0, zeros = 0, subnormal_results = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      decided_by_flushing += float_bits(want[i]) != float_bits(unflushed[i]);
      zeros += want[i] == 0.0f;
      subnormal_results += std::fpclassify(unflushed[i]) == FP_SUBNORMAL;
    }
    EXPECT_GT(decided_by_flushing, M * N / 4) << values.name;
    EXPECT_LT(zeros, M * N) << values.name;
    // Outputs that would be subnormal: FTZ on the result itself shows
    // (under DAZ alone a subnormal sum still reads as zero in the next step).
    if (values.x == draw_tiny_bf16) {
      EXPECT_GT(subnormal_results, 0);
    }
    // Whatever the caller's MXCSR holds, the kernel runs under FTZ and DAZ
    // and hands it back unchanged.
    for (unsigned csr : {saved & ~0x8040u, saved | 0x8040u}) {
      _mm_setcsr(csr);
      std::vector<float> y(std::size_t(M * N), -1.0f);
      cpu::matmul_amx_bf16_rows(pool, o.x.data(), M, K, o.w.data(), K, N, y.data());
      const unsigned after = _mm_getcsr();
      _mm_setcsr(saved);
      EXPECT_EQ(after, csr) << values.name;
      for (int64_t i = 0; i < M * N; ++i)
        ASSERT_EQ(float_bits(y[std::size_t(i)]), float_bits(want[std::size_t(i)]))
            << values.name << ", MXCSR " << std::hex << csr << std::dec << " at m=" << i / N << " n=" << i % N;
    }
  }
}

TEST(CpuMatmulAmxRows, ARowAloneEqualsTheSameRowInALargerCall) {
  if (!have_avx512()) GTEST_SKIP() << "this CPU has no AVX-512";
  std::mt19937 rng(17);
  ThreadPool one(1), three(3);
  // 3 rows: one kernel call per chunk of w; 9 rows against few rows of w:
  // groups of 4, 4 and 1, the threads splitting M as well as N. K = 2048:
  // the odd rows of w lag.
  for (const auto& [M, K, N] : {std::array<int64_t, 3>{3, 1000, 300}, {9, 1000, 40}, {3, 2048, 150}}) {
    const Operands o = draw_operands(M, K, N, kValues[0], rng);
    for (ThreadPool* pool : {&one, &three}) {
      std::vector<float> all(std::size_t(M * N));
      cpu::matmul_amx_bf16_rows(*pool, o.x.data(), M, K, o.w.data(), K, N, all.data());
      for (int64_t m = 0; m < M; ++m) {
        std::vector<float> y(static_cast<std::size_t>(N));
        cpu::matmul_amx_bf16_rows(*pool, o.x.data() + m * K, 1, K, o.w.data(), K, N, y.data());
        for (int64_t n = 0; n < N; ++n)
          ASSERT_EQ(float_bits(y[std::size_t(n)]), float_bits(all[std::size_t(m * N + n)]))
              << "M=" << M << " K=" << K << " threads=" << pool->size() << " row " << m << " n=" << n;
      }
    }
  }
}

}  // namespace
}  // namespace rowlm
