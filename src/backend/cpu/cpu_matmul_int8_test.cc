// MatmulPrecision::Int8 (int8_matmul.h) on every CPU path, against an oracle
// written here from the header's statement: x quantized per 32 elements,
// exact integer sums per unit read from the checkpoint's own codes (stream
// order; the backend reorders 4-bit codes for its kernels), the float
// epilogue in four lanes. Bit for bit on every ISA (the AVX512-VNNI kernels
// where the CPU has them), thread count, M and chunking; and within the
// error 8-bit activations allow of the f32 matmul on the dequantized weights.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/int8_matmul.h"
#include "backend/cpu/test_util.h"
#include "core/dtype.h"
#include "quant/affine.h"

namespace rowlm {
namespace {

using testing::random_f32;

struct Quantized {
  Weight w;                    // as a checkpoint holds it (stream order)
  std::vector<int> codes;      // [rows, cols]
  std::vector<float> scales;   // [rows, groups], widened
  std::vector<float> biases;
};

float widen(const Tensor& t, int64_t i) {
  if (t.dtype() == DType::F32) return t.data<float>()[i];
  const uint16_t h = static_cast<const uint16_t*>(t.raw())[i];
  return t.dtype() == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
}

// Random codes and parameters; with `symmetric` every bias is
// −2^(bits−1)·scale, which prepare_weight drops and the kernels recompute
// (GGUF's Q4_0 and Q8_0).
Quantized random_quantized(int64_t rows, int64_t cols, int bits, int group, DType params, bool symmetric,
                           std::mt19937& rng) {
  Quantized q;
  q.w.format = WeightFormat::Affine;
  q.w.rows = rows;
  q.w.cols = cols;
  q.w.bits = bits;
  q.w.group_size = group;
  q.w.values = Tensor(DType::U32, {rows, cols * bits / 32});
  q.w.scales = Tensor(params, {rows, cols / group});
  q.w.biases = Tensor(params, {rows, cols / group});
  std::uniform_int_distribution<int> code(0, (1 << bits) - 1);
  std::uniform_real_distribution<float> scale(0.001f, 0.02f), bias(-0.2f, 0.1f);
  q.codes.resize(std::size_t(rows * cols));
  auto* words = q.w.values.data<uint32_t>();
  std::fill(words, words + q.w.values.numel(), 0u);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < cols; ++k) {
      const int c = code(rng);
      q.codes[std::size_t(r * cols + k)] = c;
      // Little-end first, a code may straddle two words; rows are whole
      // words (cols · bits is a multiple of 32).
      const int64_t bit = (r * cols + k) * bits;
      words[bit / 32] |= uint32_t(c) << (bit % 32);
      if (bit % 32 + bits > 32) words[bit / 32 + 1] |= uint32_t(c) >> (32 - bit % 32);
    }
  const int64_t groups = rows * (cols / group);
  for (int64_t i = 0; i < groups; ++i) {
    const float s = scale(rng);
    const float b = symmetric ? -float(1 << (bits - 1)) * s : bias(rng);
    if (params == DType::F32) {
      q.w.scales.data<float>()[i] = s;
      q.w.biases.data<float>()[i] = b;
    } else {
      const bool f16 = params == DType::F16;
      static_cast<uint16_t*>(q.w.scales.raw())[i] = f16 ? f32_to_f16(s) : f32_to_bf16(s);
      // The stored bias of a symmetric weight is exactly −2^(bits−1) times the stored scale.
      const float stored_s = widen(q.w.scales, i);
      const float bb = symmetric ? -float(1 << (bits - 1)) * stored_s : b;
      static_cast<uint16_t*>(q.w.biases.raw())[i] = f16 ? f32_to_f16(bb) : f32_to_bf16(bb);
    }
  }
  for (int64_t i = 0; i < groups; ++i) {
    q.scales.push_back(widen(q.w.scales, i));
    q.biases.push_back(widen(q.w.biases, i));
  }
  return q;
}

// The header's statement, from the integer codes.
std::vector<float> oracle(const Tensor& x, const Quantized& q) {
  const int64_t M = x.dim(0), K = x.dim(1), N = q.w.rows, G = q.w.group_size;
  const int U = q.w.bits == 4 ? 32 : 16;  // 6-bit codes reach the kernels as 8-bit ones
  const int64_t units = K / U, padded = (units + 3) / 4 * 4;
  std::vector<float> y(std::size_t(M * N));
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = x.data<float>() + m * K;
    // x's codes and each block's dx.
    std::vector<int> xq(static_cast<std::size_t>(K));
    std::vector<float> dx(std::size_t((K + 31) / 32));
    for (int64_t b = 0; b * 32 < K; ++b) {
      const int64_t end = std::min(K, b * 32 + 32);
      float amax = 0;
      bool finite = true;
      for (int64_t k = b * 32; k < end; ++k) {
        finite = finite && std::isfinite(xr[k]);
        amax = std::max(amax, std::fabs(xr[k]));
      }
      if (!finite) {
        dx[std::size_t(b)] = std::numeric_limits<float>::quiet_NaN();
      } else if (amax >= 0x1p-96f) {
        dx[std::size_t(b)] = amax / 127.0f;
        const float id = 127.0f / amax;
        for (int64_t k = b * 32; k < end; ++k) xq[std::size_t(k)] = int(std::nearbyint(xr[k] * id));
      }
    }
    for (int64_t n = 0; n < N; ++n) {
      float lane[4] = {0, 0, 0, 0};
      for (int64_t u = 0; u < padded; ++u) {
        float v = 0.0f;
        if (u < units) {
          int64_t isum = 0, xs = 0;
          for (int64_t k = u * U; k < (u + 1) * U; ++k) {
            isum += int64_t(q.codes[std::size_t(n * K + k)]) * xq[std::size_t(k)];
            xs += xq[std::size_t(k)];
          }
          const float d = dx[std::size_t(u * U / 32)];
          const int64_t g = n * (K / G) + u * U / G;
          v = std::fma(q.scales[std::size_t(g)], float(isum) * d, q.biases[std::size_t(g)] * (float(xs) * d));
        } else {
          v = std::fma(0.0f, 0.0f, 0.0f);
        }
        lane[u % 4] = lane[u % 4] + v;
      }
      y[std::size_t(m * N + n)] = (lane[0] + lane[1]) + (lane[2] + lane[3]);
    }
  }
  return y;
}

struct Backend8 {
  cpu::Isa isa;
  int threads;
  std::unique_ptr<Backend> backend;
  std::string label() const {
    return std::string(cpu::isa_name(isa)) + "/" + std::to_string(threads) + "t (" + backend->name() + ")";
  }
};

std::vector<Backend8> int8_backends() {
  std::vector<Backend8> out;
  for (cpu::Isa isa : cpu::supported_isas())
    for (int threads : {1, 3}) out.push_back({isa, threads, make_cpu_backend(threads, isa, MatmulPrecision::Int8)});
  return out;
}

void expect_same_bits(const Tensor& y, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(y.numel(), int64_t(want.size())) << what;
  for (int64_t i = 0; i < y.numel(); ++i) {
    const float got = y.data<float>()[i], w = want[std::size_t(i)];
    if (std::isnan(w) && std::isnan(got)) continue;
    ASSERT_EQ(testing::float_bits(got), testing::float_bits(w))
        << what << ": element " << i << " is " << got << ", the order gives " << w;
  }
}

struct Case {
  int bits, group;
  DType params;
  bool symmetric;
  int64_t K, N;
};

// Every supported layout: 4-bit groups of 32/64/128, 8-bit of 16/32/64/128,
// 6-bit of 16 (GGUF's Q6_K: prepare_weight widens them to 8-bit codes), K leaving a partial
// last step (and for 8-bit a last x block of 16), N leaving partial tiles,
// parameters of every dtype, biases stored or implied.
const Case kCases[] = {{4, 32, DType::F16, true, 96, 7},     {8, 16, DType::F16, true, 48, 2}, {4, 64, DType::BF16, false, 256, 29},
                       {4, 128, DType::F32, false, 384, 5},  {4, 32, DType::BF16, false, 1568, 9},
                       {8, 16, DType::F32, false, 80, 13},   {8, 32, DType::F16, true, 96, 6},
                       {8, 64, DType::BF16, false, 320, 11}, {8, 128, DType::BF16, true, 256, 4},
                       {8, 16, DType::BF16, false, 1040, 3},  {6, 16, DType::F32, false, 96, 5}};

TEST(CpuMatmulInt8, EveryPathIsTheStatedOrderBitForBit) {
  std::mt19937 rng(81);
  auto backends = int8_backends();
  for (const Case& c : kCases) {
    const Quantized q = random_quantized(c.N, c.K, c.bits, c.group, c.params, c.symmetric, rng);
    for (int64_t M : {1, 2, 3, 4, 5, 9, 37}) {
      Tensor x = random_f32({M, c.K}, rng);
      // A row of zeros, one of tiny values and one with a NaN: the header's special blocks.
      if (M >= 5) {
        std::fill(x.data<float>() + 1 * c.K, x.data<float>() + 2 * c.K, 0.0f);
        for (int64_t k = 0; k < c.K; ++k) x.data<float>()[2 * c.K + k] *= 0x1p-100f;
        x.data<float>()[3 * c.K + c.K / 2] = std::numeric_limits<float>::quiet_NaN();
      }
      const auto want = oracle(x, q);
      for (auto& b : backends) {
        Tensor y(DType::F32, {M, c.N});
        b.backend->matmul(x, b.backend->prepare_weight(q.w), y);
        expect_same_bits(y, want,
                         b.label() + " " + q.w.describe() + " " + std::string(dtype_name(c.params)) +
                             (c.symmetric ? " symmetric" : "") + " M=" + std::to_string(M));
      }
    }
  }
}

// A row's outputs do not depend on the rows batched with it: row r of a
// call of M rows equals the same row alone, on the threaded schedule with
// its splits of N and M.
TEST(CpuMatmulInt8, ARowIsTheSameAloneAndBatched) {
  std::mt19937 rng(82);
  const int64_t K = 512, N = 300, M = 41;
  auto backend = make_cpu_backend(4, cpu::best_isa(), MatmulPrecision::Int8);
  for (int bits : {4, 8}) {
    const Quantized q = random_quantized(N, K, bits, 64, DType::BF16, false, rng);
    const Weight w = backend->prepare_weight(q.w);
    const Tensor x = random_f32({M, K}, rng);
    Tensor all(DType::F32, {M, N});
    backend->matmul(x, w, all);
    for (int64_t r : {0, 17, 40}) {
      Tensor one(DType::F32, {1, K});
      std::copy(x.data<float>() + r * K, x.data<float>() + (r + 1) * K, one.data<float>());
      Tensor y(DType::F32, {1, N});
      backend->matmul(one, w, y);
      for (int64_t n = 0; n < N; ++n)
        ASSERT_EQ(testing::float_bits(y.data<float>()[n]), testing::float_bits(all.data<float>()[r * N + n]))
            << bits << "-bit, row " << r << ", column " << n;
    }
  }
}

// The precision's cost: each x_k moves by at most half its block's step
// dx, so |y − y_f32| <= Σ_k |w_k| · dx_k / 2 plus the float epilogue's
// roundings, against the f32 matmul on the dequantized weights (in double).
TEST(CpuMatmulInt8, WithinTheQuantizationErrorOfTheF32Matmul) {
  std::mt19937 rng(83);
  auto backend = make_cpu_backend(2, cpu::best_isa(), MatmulPrecision::Int8);
  for (const Case& c : kCases) {
    const Quantized q = random_quantized(c.N, c.K, c.bits, c.group, c.params, c.symmetric, rng);
    const int64_t M = 3;
    const Tensor x = random_f32({M, c.K}, rng);
    Tensor y(DType::F32, {M, c.N});
    backend->matmul(x, backend->prepare_weight(q.w), y);
    for (int64_t m = 0; m < M; ++m) {
      const float* xr = x.data<float>() + m * c.K;
      for (int64_t n = 0; n < c.N; ++n) {
        double exact = 0, bound = 0, magnitude = 0;
        for (int64_t k = 0; k < c.K; ++k) {
          const int64_t g = n * (c.K / c.group) + k / c.group;
          const double wk = double(q.scales[std::size_t(g)]) * q.codes[std::size_t(n * c.K + k)] +
                            double(q.biases[std::size_t(g)]);
          float amax = 0;
          for (int64_t j = k / 32 * 32; j < std::min(c.K, k / 32 * 32 + 32); ++j) amax = std::max(amax, std::fabs(xr[j]));
          exact += wk * xr[k];
          bound += std::fabs(wk) * amax / 127.0 / 2;
          magnitude += std::fabs(wk * xr[k]);
        }
        const double err = std::fabs(double(y.data<float>()[m * c.N + n]) - exact);
        EXPECT_LE(err, bound * 1.001 + 1e-5 * magnitude) << q.w.describe() << " row " << m << " column " << n;
      }
    }
  }
}

TEST(CpuMatmulInt8, OtherWeightsKeepTheF32Path) {
  std::mt19937 rng(84);
  auto int8 = make_cpu_backend(1, cpu::best_isa(), MatmulPrecision::Int8);
  auto f32 = make_cpu_backend(1, cpu::best_isa(), MatmulPrecision::F32);
  // 5-bit codes (no integer path) and 4-bit groups of 16 (a unit is 32).
  for (auto [bits, group] : {std::pair{5, 32}, std::pair{4, 16}}) {
    const Quantized q = random_quantized(10, 64, bits, group, DType::BF16, false, rng);
    const Tensor x = random_f32({2, 64}, rng);
    Tensor a(DType::F32, {2, 10}), b(DType::F32, {2, 10});
    int8->matmul(x, int8->prepare_weight(q.w), a);
    f32->matmul(x, f32->prepare_weight(q.w), b);
    for (int64_t i = 0; i < a.numel(); ++i)
      ASSERT_EQ(testing::float_bits(a.data<float>()[i]), testing::float_bits(b.data<float>()[i])) << bits << "/" << group;
  }
}

}  // namespace
}  // namespace rowlm
