// The tensor-core matmul (gemm_bf16.h): every tile configuration, split over
// K or not, gives the same bits (the property that makes a row's result
// independent of its batch); the result is within f32 rounding of a
// double-precision host sum; and through the backend, a row's output is the
// same alone and in batches of every size the dispatcher treats differently.

#include "backend/cuda/gemm_bf16.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device_owner_test_util.h"
#include "core/dtype.h"

namespace rowlm {
namespace {

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

using cuda_test::DevicePtr;

DevicePtr device_copy(const void* host, std::size_t bytes) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, std::max<std::size_t>(bytes, 16)), cudaSuccess);
  if (bytes) {
    EXPECT_EQ(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  return DevicePtr(p);
}

DevicePtr device_zeros(std::size_t bytes) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, std::max<std::size_t>(bytes, 16)), cudaSuccess);
  EXPECT_EQ(cudaMemset(p, 0, std::max<std::size_t>(bytes, 16)), cudaSuccess);
  return DevicePtr(p);
}

std::vector<uint16_t> random_bf16(std::mt19937& rng, int64_t n, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<uint16_t> v(static_cast<std::size_t>(n));
  for (auto& e : v) e = f32_to_bf16(dist(rng));
  return v;
}

class GemmBf16 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device or driver on this machine: GPU tests skipped";
  }
  // y = x · wᵀ with one configuration, copied back.
  static std::vector<float> run(cuda::GemmTile tile, bool split, const std::vector<uint16_t>& x,
                                const std::vector<uint16_t>& w, int64_t M, int64_t N, int64_t K) {
    auto dx = device_copy(x.data(), x.size() * 2), dw = device_copy(w.data(), w.size() * 2);
    std::vector<float> y(std::size_t(M * N), -7.0f);
    auto dy = device_copy(y.data(), y.size() * 4);
    const std::size_t scratch_bytes = cuda::gemm_bf16_split_scratch_bytes(M, N, K);
    auto scratch = device_copy(nullptr, 0);
    if (scratch_bytes) {
      void* p = nullptr;
      EXPECT_EQ(cudaMalloc(&p, scratch_bytes), cudaSuccess);
      scratch.reset(p);
    }
    // The arrival counters start at zero; a split launch must leave them
    // zero, so the second launch (y reset in between) writes y again.
    const std::vector<int> zeros(std::size_t(cuda::gemm_bf16_tiles(tile, M, N)), 0);
    auto arrivals = device_copy(zeros.data(), zeros.size() * sizeof(int));
    for (int launch = 0; launch < 2; ++launch) {
      EXPECT_EQ(cudaMemcpy(dy.get(), y.data(), y.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      cuda::gemm_bf16_with(tile, split, static_cast<const uint16_t*>(dx.get()), static_cast<const uint16_t*>(dw.get()),
                           static_cast<float*>(dy.get()), M, N, K, static_cast<float*>(scratch.get()),
                           static_cast<int*>(arrivals.get()), nullptr);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
    EXPECT_EQ(cudaMemcpy(y.data(), dy.get(), y.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return y;
  }
  // Whether the tile runs on this GPU: the Hopper tiles need an sm_90 device
  // and a build for 90a; elsewhere they are left out, saying so once.
  bool runs(cuda::GemmTile tile) {
    if (cuda::gemm_tile_runs(tile, gpu_)) return true;
    if (!said_) std::printf("[ note     ] tile %s does not run on this GPU or build: left out\n", cuda::gemm_tile_name(tile));
    said_ = true;
    return false;
  }
  std::mt19937 rng{11};
  cuda::GemmGpu gpu_ = cuda::gemm_gpu();
  bool said_ = false;
};

TEST_F(GemmBf16, EveryConfigurationGivesTheSameBitsWithinFloatRoundingOfTheExactSum) {
  struct Shape3 {
    int64_t M, N, K;
  };
  const std::vector<Shape3> shapes = {{1, 1, 1},      {3, 5, 15},      {17, 33, 16},    {1, 130, 17},
                                      {100, 64, 100}, {300, 130, 257}, {17, 200, 513},  {129, 65, 1030},
                                      {2, 96, 2560},  {260, 40, 1024}, {33, 257, 1537}, {1, 8, 4096},
                                      // 12, 16, 18 and 24 chunks (E2B's down_proj, its double-wide
                                      // one): past a portable cluster, the last-block path
                                      {1, 70, 6144},  {5, 64, 8192},   {3, 65, 9000},   {1, 40, 12288}};
  for (const Shape3& s : shapes) {
    const auto x = random_bf16(rng, s.M * s.K, 1.0f), w = random_bf16(rng, s.N * s.K, 0.5f);
    const std::string what = "M" + std::to_string(s.M) + " N" + std::to_string(s.N) + " K" + std::to_string(s.K);
    const std::vector<float> want = run(cuda::GemmTile::Small, false, x, w, s.M, s.N, s.K);
    // Within f32 rounding of the exact sum (bf16 products are exact in f32;
    // each of the K/16 accumulation steps rounds once, plus the chunk sums).
    int64_t bad = 0;
    for (int64_t m = 0; m < s.M && bad < 3; ++m)
      for (int64_t n = 0; n < s.N && bad < 3; ++n) {
        double exact = 0, magnitude = 0;
        for (int64_t k = 0; k < s.K; ++k) {
          const double p = double(bf16_to_f32(x[std::size_t(m * s.K + k)])) * bf16_to_f32(w[std::size_t(n * s.K + k)]);
          exact += p;
          magnitude += std::fabs(p);
        }
        const double bound = (double(s.K) / 16 + 4) * std::ldexp(1.0, -22) * magnitude + 1e-30;
        const double got = want[std::size_t(m * s.N + n)];
        if (!(std::fabs(got - exact) <= bound)) {
          ADD_FAILURE() << what << " (" << m << ", " << n << "): " << got << ", exact " << exact << ", bound " << bound;
          ++bad;
        }
      }
    for (cuda::GemmTile tile : cuda::kGemmTiles)
      for (bool split : {false, true}) {
        if (!runs(tile)) continue;
        const std::vector<float> got = run(tile, split, x, w, s.M, s.N, s.K);
        int64_t diff = 0;
        for (std::size_t i = 0; i < got.size(); ++i) diff += float_bits(got[i]) != float_bits(want[i]);
        EXPECT_EQ(diff, 0) << what << ": tile " << cuda::gemm_tile_name(tile) << (split ? " split" : "") << " differs in " << diff
                           << " of " << got.size() << " elements";
      }
  }
}

// Several outputs of one x in one launch (q, k and v; gate and up): each
// output's bits are those of a launch of that output alone, in every
// configuration, whichever output a tile belongs to and however the outputs'
// widths fall on tile edges.
TEST_F(GemmBf16, SeveralOutputsInOneLaunchEqualEachAlone) {
  const std::vector<int64_t> widths = {200, 17, 64, 129};
  // K 1,030: no tile's k-steps fit it whole; 1,024: the Hopper tiles take it.
  for (const auto& [M, K] : std::vector<std::pair<int64_t, int64_t>>{{1, 1030}, {3, 1030}, {70, 1030}, {300, 1030},
                                                                        {3, 1024}, {300, 1024}}) {
    const auto x = random_bf16(rng, M * K, 1.0f);
    std::vector<std::vector<uint16_t>> w;
    std::vector<DevicePtr> dw, dy;
    cuda::GemmOutputs outs;
    int64_t total = 0;
    for (int64_t n : widths) {
      w.push_back(random_bf16(rng, n * K, 0.5f));
      dw.push_back(device_copy(w.back().data(), w.back().size() * 2));
      dy.push_back(device_zeros(std::size_t(M * n) * 4));
      outs.w[outs.count] = static_cast<const uint16_t*>(dw.back().get());
      outs.y[outs.count] = static_cast<float*>(dy.back().get());
      outs.n[outs.count] = n;
      ++outs.count;
      total += n;
    }
    auto dx = device_copy(x.data(), x.size() * 2);
    auto scratch = device_zeros(cuda::gemm_bf16_split_scratch_bytes(M, total, K));
    int64_t tiles = 0;  // arrival counters: as many as the configuration with the most tiles has
    for (cuda::GemmTile tile : cuda::kGemmTiles) {
      int64_t t = 0;
      for (int64_t n : widths) t += cuda::gemm_bf16_tiles(tile, M, n);
      tiles = std::max(tiles, t);
    }
    const std::vector<int> zeros(std::size_t(tiles), 0);
    auto arrivals = device_copy(zeros.data(), zeros.size() * sizeof(int));
    for (cuda::GemmTile tile : cuda::kGemmTiles)
      for (bool split : {false, true}) {
        if (!runs(tile)) continue;
        cuda::gemm_bf16_with(tile, split, static_cast<const uint16_t*>(dx.get()), outs, M, K,
                             static_cast<float*>(scratch.get()), static_cast<int*>(arrivals.get()), nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        for (std::size_t o = 0; o < widths.size(); ++o) {
          std::vector<float> got(std::size_t(M * widths[o]));
          ASSERT_EQ(cudaMemcpy(got.data(), dy[o].get(), got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
          const std::vector<float> want = run(cuda::GemmTile::Small, false, x, w[o], M, widths[o], K);
          int64_t diff = 0;
          for (std::size_t i = 0; i < got.size(); ++i) diff += float_bits(got[i]) != float_bits(want[i]);
          EXPECT_EQ(diff, 0) << "M " << M << ", output " << o << " of " << widths.size() << ", tile " << cuda::gemm_tile_name(tile)
                             << (split ? " split" : "") << ": " << diff << " elements differ";
        }
      }
  }
}

// Through the backend: the dispatcher picks the tile and the split from M
// (and N, K, the SM count); a row's bits must not follow.
TEST_F(GemmBf16, ARowIsTheSameAloneAndInEveryBatchSize) {
  auto gpu = make_cuda_backend(0, BackendOptions{"cuda", 0, MatmulPrecision::Bf16});
  ASSERT_EQ(gpu->matmul_precision(), MatmulPrecision::Bf16);
  const int64_t K = 2560, M = 700;
  for (int64_t N : {int64_t(300), int64_t(20000)}) {
    Tensor x(DType::F32, {M, K}), w(DType::BF16, {N, K});
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = dist(rng);
    for (int64_t i = 0; i < w.numel(); ++i) w.data<uint16_t>()[i] = f32_to_bf16(0.05f * dist(rng));
    const Weight gw = gpu->prepare_weight(Weight::dense(w));
    const Tensor gx = gpu->upload(x);
    auto product = [&](int64_t begin, int64_t rows) {
      Tensor y = gpu->upload(Tensor(DType::F32, {rows, N}));
      gpu->matmul(gx.rows(begin, begin + rows), gw, y);
      Tensor host(DType::F32, {rows, N});
      gpu->copy_to_host(y, host.raw());
      return host;
    };
    const Tensor all = product(0, M);
    for (int64_t rows : {int64_t(1), int64_t(5), int64_t(16), int64_t(17), int64_t(64), int64_t(129), int64_t(300)}) {
      const int64_t begin = (M - rows) / 2;
      const Tensor part = product(begin, rows);
      int64_t diff = 0;
      for (int64_t i = 0; i < rows * N; ++i) diff += float_bits(part.data<float>()[i]) != float_bits(all.data<float>()[begin * N + i]);
      EXPECT_EQ(diff, 0) << rows << " rows of " << M << ", N " << N << ": " << diff << " elements differ";
    }
    // The CPU's bf16 mode rounds the same inputs and sums in another order:
    // the two agree within f32 accumulation error.
    auto cpu = make_cpu_backend(2, MatmulPrecision::Bf16);
    const int64_t rows = 3;
    Tensor want(DType::F32, {rows, N});
    cpu->matmul(x.rows(0, rows), cpu->prepare_weight(Weight::dense(w)), want);
    double worst = 0;
    for (int64_t i = 0; i < rows * N; ++i)
      worst = std::max(worst, double(std::fabs(want.data<float>()[i] - all.data<float>()[i])));
    EXPECT_LT(worst, 1e-4) << "N " << N << ": the GPU's and the CPU's bf16 matmuls differ by " << worst;
  }
}

}  // namespace
}  // namespace rowlm
