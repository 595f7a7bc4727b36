#include "backend/cuda/gemm_bf16.h"

#include <algorithm>

#include <cooperative_groups.h>

#include "backend/cuda/chunk_sums.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/gemm_hopper.h"
#include "backend/cuda/gemm_outputs.cuh"
#include "backend/cuda/launch_dependent.h"
#include "backend/cuda/mma_sync.cuh"

namespace rowlm::cuda {
namespace {

// --- The kernel, one template for every configuration

template <int BM_, int BN_, int BK_, int WM_, int WN_, int STAGES_, bool kSumsInLastBlock = BM_ * BN_ <= 16 * 64>
struct Config {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WM = WM_, WN = WN_, STAGES = STAGES_;
  static constexpr int kThreads = 32 * WM * WN;
  static constexpr int kWarpM = BM / WM, kWarpN = BN / WN;
  static constexpr int kMt = kWarpM / 16, kNt = kWarpN / 8;
  // Rows padded by 8 elements (16 bytes): the 8 rows an ldmatrix reads then
  // start in 8 different 16-byte bank groups.
  static constexpr int kStride = BK + 8;
  static constexpr int kStageElems = (BM + BN) * kStride;
  static constexpr int kSmemBytes = STAGES * kStageElems * 2;
  // A split launch adds its chunk sums in its last block where the tile is
  // small (no second launch: decode); a large tile's sums would leave one
  // block working alone, so by default they run in a second kernel over the
  // whole output.
  static constexpr bool kSumsInKernel = kSumsInLastBlock;
  static_assert(BM % (16 * WM) == 0 && BN % (16 * WN) == 0, "warp tiles are whole 16×16 tiles");
  static_assert(kGemmChunk % BK == 0 && BK % 16 == 0, "chunks are whole k tiles");
};

using SmallTile = Config<16, 64, 64, 1, 4, 4>;     // M ≤ 16 (decode): bandwidth
using MediumTile = Config<64, 64, 64, 2, 2, 3>;    // M ≤ 128
using LargeTile = Config<128, 128, 32, 2, 4, 3>;   // prefill: tensor-core rate
// Decode candidates (gemm_bench weighs them against SmallTile).
using SmallNarrowTile = Config<16, 32, 64, 1, 2, 8>;      // twice the blocks, a whole chunk in flight
using SmallDeepTile = Config<16, 64, 128, 1, 4, 4>;       // a chunk in four k-tiles
using SmallNarrowDeepTile = Config<16, 32, 128, 1, 2, 4>;
using SmallStagedTile = Config<16, 64, 64, 1, 4, 8>;      // a whole chunk in flight
using MediumWideTile = Config<64, 128, 64, 2, 4, 3>;      // eight warps of 32 × 32
using MediumShortTile = Config<32, 64, 64, 1, 4, 4>;      // half the rows: twice the blocks at M = 64
using MediumSumsTile = Config<64, 64, 64, 2, 2, 3, true>;  // the chunk sums in the last block
using MediumStagedTile = Config<64, 64, 64, 2, 2, 6>;      // five k-tiles in flight
using MediumDeepTile = Config<64, 64, 128, 2, 2, 3>;       // k-tiles of 128
using LargeDeepTile = Config<128, 128, 64, 2, 4, 3>;      // k-tiles of 64
using LargeStagedTile = Config<128, 128, 32, 2, 4, 4>;
using LargeNarrowTile = Config<128, 64, 64, 2, 2, 4>;     // four warps of 64 × 32

// Copies rows [row0, row0 + ROWS) × k [k0, k0 + BK) of a [rows, K] bf16
// matrix into shared memory (zeros outside). kAligned: K % 8 == 0 and the
// base is 16-byte aligned, so whole 16-byte vectors move by cp.async.
template <class C, int ROWS, bool kAligned>
__device__ __forceinline__ void load_tile(uint16_t* smem, const uint16_t* g, int64_t rows, int64_t K, int64_t row0,
                                          int64_t k0) {
  constexpr int kVectors = ROWS * C::BK / 8;
  for (int v = threadIdx.x; v < kVectors; v += C::kThreads) {
    const int r = v / (C::BK / 8), c = (v % (C::BK / 8)) * 8;
    const int64_t gr = row0 + r, gk = k0 + c;
    uint16_t* dst = smem + r * C::kStride + c;
    if constexpr (kAligned) {
      const bool valid = gr < rows && gk < K;
      cp_async_16(dst, valid ? g + gr * K + gk : g, valid);
    } else {
      for (int e = 0; e < 8; ++e) dst[e] = (gr < rows && gk + e < K) ? g[gr * K + gk + e] : uint16_t(0);
    }
  }
}

// One block: a BM × BN tile of one output y over k in [k_begin, k_end).
// Unsplit (partials == nullptr), it covers all of K and folds each chunk's
// sum into its total; split, it covers exactly one chunk and writes that
// chunk's sum to the output's partials[chunk][m][n].
template <class C, bool kAligned, bool kCluster = false>
__global__ void __launch_bounds__(C::kThreads)
    gemm_kernel(const uint16_t* __restrict__ x, const GemmOutputs outs, float* __restrict__ partials_base,
                int* __restrict__ arrivals, int64_t M, int64_t K) {
  extern __shared__ __align__(16) uint16_t smem[];
  // kCluster: split, the chunks of a tile one thread block cluster, their
  // sums added through distributed shared memory (no partials in global
  // memory, no arrival count).
  const bool split = kCluster || partials_base != nullptr;
  const TileOutput to = tile_output<C::BN>(outs, blockIdx.x, M, split ? int64_t(gridDim.z) : 0);
  const uint16_t* __restrict__ w = to.w;
  float* __restrict__ y = to.y;
  const int64_t N = to.N;
  float* __restrict__ partials = split && !kCluster ? partials_base + to.partials_offset : nullptr;
  const int64_t row0 = int64_t(blockIdx.y) * C::BM, col0 = to.col0;
  const int64_t k_begin = split ? int64_t(blockIdx.z) * kGemmChunk : 0;
  const int64_t k_end = split ? std::min<int64_t>(K, k_begin + kGemmChunk) : K;
  const int tiles = int((k_end - k_begin + C::BK - 1) / C::BK);
  constexpr int kTilesPerChunk = int(kGemmChunk / C::BK);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warp_m = warp / C::WN, warp_n = warp % C::WN;

  float part[C::kMt][C::kNt][4], total[C::kMt][C::kNt][4];
  for (int i = 0; i < C::kMt; ++i)
    for (int j = 0; j < C::kNt; ++j)
      for (int e = 0; e < 4; ++e) part[i][j][e] = total[i][j][e] = 0.0f;

  auto stage_a = [&](int s) { return smem + s * C::kStageElems; };
  auto stage_b = [&](int s) { return smem + s * C::kStageElems + C::BM * C::kStride; };
  auto load_x = [&](int t) {
    load_tile<C, C::BM, kAligned>(stage_a(t % C::STAGES), x, M, K, row0, k_begin + int64_t(t) * C::BK);
  };
  auto load_w = [&](int t) {
    load_tile<C, C::BN, kAligned>(stage_b(t % C::STAGES), w, N, K, col0, k_begin + int64_t(t) * C::BK);
  };
  auto load = [&](int t) {
    load_x(t);
    load_w(t);
  };

  // The weights are written by no kernel: the first stages' are requested
  // before waiting for the kernels that write x (device_math.cuh). The
  // first commit group then holds them with stage 0's x, so the pipeline's
  // waits below still cover every stage.
  for (int t = 0; t < C::STAGES - 1; ++t)
    if (t < tiles) load_w(t);
  wait_for_producers();
  for (int t = 0; t < C::STAGES - 1; ++t) {
    if (t < tiles) load_x(t);
    cp_async_commit();
  }
  for (int t = 0; t < tiles; ++t) {
    cp_async_wait<C::STAGES - 2>();
    __syncthreads();
    if (t + C::STAGES - 1 < tiles) load(t + C::STAGES - 1);
    cp_async_commit();

    const uint16_t* As = stage_a(t % C::STAGES);
    const uint16_t* Bs = stage_b(t % C::STAGES);
    const int64_t k0 = k_begin + int64_t(t) * C::BK;
#pragma unroll
    for (int kk = 0; kk < C::BK / 16; ++kk) {
      // The canonical order ends at the last 16-wide step starting below K,
      // whatever BK this configuration loads.
      if (k0 + kk * 16 >= K) break;
      unsigned a[C::kMt][4];
#pragma unroll
      for (int i = 0; i < C::kMt; ++i) {
        const int r = warp_m * C::kWarpM + i * 16 + (lane % 16);
        ldmatrix_x4(As + r * C::kStride + kk * 16 + (lane / 16) * 8, a[i][0], a[i][1], a[i][2], a[i][3]);
      }
#pragma unroll
      for (int j = 0; j < C::kNt; j += 2) {
        const int n = warp_n * C::kWarpN + j * 8 + (lane % 8) + (lane / 16) * 8;
        unsigned b0, b1, b2, b3;
        ldmatrix_x4(Bs + n * C::kStride + kk * 16 + ((lane / 8) % 2) * 8, b0, b1, b2, b3);
#pragma unroll
        for (int i = 0; i < C::kMt; ++i) {
          mma_bf16(part[i][j], a[i], b0, b1);
          mma_bf16(part[i][j + 1], a[i], b2, b3);
        }
      }
    }
    if (!split && ((t + 1) % kTilesPerChunk == 0 || t + 1 == tiles)) {
#pragma unroll
      for (int i = 0; i < C::kMt; ++i)
#pragma unroll
        for (int j = 0; j < C::kNt; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            total[i][j][e] = total[i][j][e] + part[i][j][e];
            part[i][j][e] = 0.0f;
          }
    }
  }
  cp_async_wait<0>();
  allow_dependents();  // the next kernel may start loading its weights

  if constexpr (kCluster) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // Each block's chunk sums into its own shared memory (once every warp is
    // past the last stage), then block 0 of the cluster (chunk 0: the
    // cluster spans z, so a block's rank is its chunk) adds them to 0.0f in
    // chunk order, as the last-block path below does; the second barrier
    // keeps every block's shared memory until block 0 has read it.
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    float* sums = reinterpret_cast<float*>(smem);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < C::kMt; ++i)
#pragma unroll
      for (int j = 0; j < C::kNt; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int m = warp_m * C::kWarpM + i * 16 + lane / 4 + (e / 2) * 8;
          const int n = warp_n * C::kWarpN + j * 8 + (lane % 4) * 2 + (e % 2);
          sums[m * C::BN + n] = part[i][j][e];
        }
    cluster.sync();
    if (cluster.block_rank() == 0) {
      for (int e = threadIdx.x; e < C::BM * C::BN; e += C::kThreads) {
        const int64_t m = row0 + e / C::BN, n = col0 + e % C::BN;
        if (m >= M || n >= N) continue;
        float sum = 0.0f;
        for (unsigned c = 0; c < gridDim.z; ++c) sum = sum + cluster.map_shared_rank(sums, c)[e];
        y[m * N + n] = sum;
      }
    }
    cluster.sync();
    return;
#else
    __trap();  // clusters are Hopper's: launch() never sends this variant to an older GPU
#endif
  }

  float* out = split ? partials + int64_t(blockIdx.z) * M * N : y;
#pragma unroll
  for (int i = 0; i < C::kMt; ++i)
#pragma unroll
    for (int j = 0; j < C::kNt; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t m = row0 + warp_m * C::kWarpM + i * 16 + lane / 4 + (e / 2) * 8;
        const int64_t n = col0 + warp_n * C::kWarpN + j * 8 + (lane % 4) * 2 + (e % 2);
        if (m < M && n < N) out[m * N + n] = split ? part[i][j][e] : total[i][j][e];
      }
  if (!split || !C::kSumsInKernel) return;
  // The last of a tile's chunk blocks to finish adds the chunk sums into y,
  // to 0.0f in increasing chunk order (the order the unsplit path adds in),
  // and leaves the tile's arrival count at zero for the next launch.
  __shared__ int last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    int& count = arrivals[blockIdx.y * gridDim.x + blockIdx.x];
    last = atomicAdd(&count, 1) == int(gridDim.z) - 1;
    if (last) count = 0;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int64_t MN = M * N;
  for (int e = threadIdx.x; e < C::BM * C::BN; e += C::kThreads) {
    const int64_t m = row0 + e / C::BN, n = col0 + e % C::BN;
    if (m >= M || n >= N) continue;
    float sum = 0.0f;
    for (unsigned c = 0; c < gridDim.z; ++c) sum = sum + __ldcg(partials + int64_t(c) * MN + m * N + n);
    y[m * N + n] = sum;
  }
}

int64_t chunks_of(int64_t K) { return (K + kGemmChunk - 1) / kGemmChunk; }

template <class C>
void launch(bool split, const uint16_t* x, const GemmOutputs& outs, int64_t M, int64_t K, float* scratch,
            int* arrivals, cudaStream_t stream) {
  const int64_t chunks = chunks_of(K);
  split = split && chunks > 1;
  const dim3 grid(unsigned(column_tiles<C::BN>(outs)), unsigned((M + C::BM - 1) / C::BM), unsigned(split ? chunks : 1));
  bool aligned = K % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  for (int s = 0; s < outs.count; ++s) aligned = aligned && reinterpret_cast<uintptr_t>(outs.w[s]) % 16 == 0;
  // A small tile's chunks as one cluster (Hopper on): their sums added on
  // chip, the same order and bits. Per launch 0.6-2 µs faster than the
  // last-block path at M = 1 and 8 on E2B's q and o projections (H100,
  // gemm_bench); the medium tiles' chunks as clusters measured slower than
  // their second kernel. Up to 8 chunks (the portable cluster size): 9-16
  // chunks as a non-portable cluster gave the same bits and a faster
  // down_proj launch (12 chunks) in gemm_bench, but no faster decode step
  // at batch 1, 8 or 64 (docs/perf.md, session 46).
  if (split && C::kSumsInKernel && chunks <= 8 && programmatic_launch_supported()) {
    auto kernel = aligned ? gemm_kernel<C, true, true> : gemm_kernel<C, false, true>;
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes);
    launch_dependent_clusters(unsigned(chunks), kernel, grid, dim3(C::kThreads), C::kSmemBytes, stream, x, outs,
                              static_cast<float*>(nullptr), arrivals, M, K);
    return;
  }
  auto kernel = aligned ? gemm_kernel<C, true> : gemm_kernel<C, false>;
  // Above 48 KiB of shared memory a kernel must opt in; a host-side
  // attribute, cheap, and idempotent.
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes);
  // Launched as a programmatic dependent of the kernel before it where the
  // GPU has that (Hopper on): its weight loads overlap that kernel's end.
  float* partials = split ? scratch : nullptr;
  launch_dependent(kernel, grid, dim3(C::kThreads), C::kSmemBytes, stream, x, outs, partials, arrivals, M, K);
  if (split && !C::kSumsInKernel) {
    int64_t cols_before = 0;
    for (int s = 0; s < outs.count; ++s) {
      const int64_t MN = M * outs.n[s];
      sum_chunks(scratch + chunks * M * cols_before, outs.y[s], MN, chunks, stream);
      cols_before += outs.n[s];
    }
  }
}

template <class C>
int64_t tiles_of(int64_t M, const GemmOutputs& outs) {
  return ((M + C::BM - 1) / C::BM) * column_tiles<C::BN>(outs);
}

// Calls f with a value of the configuration's type.
template <class F>
decltype(auto) with_config(GemmTile tile, F&& f) {
  switch (tile) {
    case GemmTile::Small: return f(SmallTile{});
    case GemmTile::Medium: return f(MediumTile{});
    case GemmTile::SmallNarrow: return f(SmallNarrowTile{});
    case GemmTile::SmallDeep: return f(SmallDeepTile{});
    case GemmTile::SmallNarrowDeep: return f(SmallNarrowDeepTile{});
    case GemmTile::SmallStaged: return f(SmallStagedTile{});
    case GemmTile::MediumWide: return f(MediumWideTile{});
    case GemmTile::MediumShort: return f(MediumShortTile{});
    case GemmTile::MediumSums: return f(MediumSumsTile{});
    case GemmTile::MediumStaged: return f(MediumStagedTile{});
    case GemmTile::MediumDeep: return f(MediumDeepTile{});
    case GemmTile::LargeDeep: return f(LargeDeepTile{});
    case GemmTile::LargeStaged: return f(LargeStagedTile{});
    case GemmTile::LargeNarrow: return f(LargeNarrowTile{});
    // The Hopper tiles' stand-in where they cannot run (gemm_bf16_with).
    case GemmTile::Hopper:
    case GemmTile::HopperShort: return f(LargeDeepTile{});
    case GemmTile::Large: break;
  }
  return f(LargeTile{});
}

int hopper_consumers(GemmTile tile) {
  return tile == GemmTile::Hopper ? 2 : tile == GemmTile::HopperShort ? 1 : 0;
}

int64_t tiles_of(GemmTile tile, int64_t M, const GemmOutputs& outs) {
  if (const int consumers = hopper_consumers(tile)) return hopper::tiles(consumers, M, outs);
  return with_config(tile, [&](auto c) { return tiles_of<decltype(c)>(M, outs); });
}

int64_t total_columns(const GemmOutputs& outs) {
  int64_t n = 0;
  for (int s = 0; s < outs.count; ++s) n += outs.n[s];
  return n;
}

// The configuration for a shape. Any of them gives the same bits; these
// choices are what gemm_bench measured fastest (one graph of launches over
// cold weights, Gemma 4 E2B and E4B shapes; the Hopper tiles on an H100,
// session 30, the others on an H200, session 29).
// Where the Hopper tiles run (never split: their split is 2-6× slower):
//   M > 128:  the 128-row tile, or the 64-row one where its tiles fit in one
//             wave (q_proj, o_proj, down_proj of E2B at M = 512: 12-25%
//             faster);
//   16 < M ≤ 128: the 64-row tile (1.1-2× the medium tile at M = 64) except
//             for a deep K over few tiles (E2B's down_proj: the medium tile
//             split over K, 28% faster);
//   M ≤ 16:   the 64-row tile where its tiles fill half the SMs (gate_up
//             and the head: 3-27% faster), else as below.
// Elsewhere, and where the operands do not fit them:
//   M ≤ 16:   the decode tile, split over K when the tiles alone would leave
//             SMs idle (fewer than four waves' worth of blocks); the deep
//             decode tile where that still makes fewer than two blocks per
//             SM (q_proj, o_proj: 14-17% faster; slower on the MLP and head);
//   M ≤ 128:  the medium tile, split the same way; unsplit (the head), the
//             wide medium tile (13% faster on the head at M = 64);
//   M > 128:  never split (the split's partials and their sums cost more
//             than idle SMs: 1.3-2× slower at M = 512 and 4,096); the narrow
//             large tile up to M = 1,024 (best or within 10% at M = 512),
//             the deep large tile above (20-50% faster than the large tile
//             at M = 4,096).
// The plan never depends on x's address: where x does not suit TMA, the
// Hopper tile's launch runs the deep large tile unsplit instead, so the
// scratch sized from the plan always suffices.
struct GemmPlan {
  GemmTile tile;
  bool split;
};
GemmPlan plan_for(int64_t M, const GemmOutputs& outs, int64_t K, GemmGpu gpu) {
  const int64_t sms = gpu.sms;
  if (gpu.hopper && hopper::operands_fit(nullptr, outs, M, K)) {
    const int64_t short_tiles = hopper::tiles(1, M, outs);
    if (M > 128) return {short_tiles > sms ? GemmTile::Hopper : GemmTile::HopperShort, false};
    if (M > 16 && !(short_tiles * 8 < sms && chunks_of(K) >= 8)) return {GemmTile::HopperShort, false};
    if (M <= 16 && short_tiles * 2 >= sms) return {GemmTile::HopperShort, false};
  }
  if (M > 128) return {M <= 1024 ? GemmTile::LargeNarrow : GemmTile::LargeDeep, false};
  const GemmTile tile = M <= 16 ? GemmTile::Small : GemmTile::Medium;
  const int64_t tiles = tiles_of(tile, M, outs);
  const bool split = chunks_of(K) > 1 && tiles < 4 * sms;
  if (tile == GemmTile::Medium) return {split ? tile : GemmTile::MediumWide, split};
  const int64_t blocks = tiles * (split ? chunks_of(K) : 1);
  return {blocks < 2 * sms ? GemmTile::SmallDeep : tile, split};
}

GemmOutputs one_output(const uint16_t* w, float* y, int64_t N) {
  GemmOutputs outs;
  outs.w[0] = w;
  outs.y[0] = y;
  outs.n[0] = N;
  outs.count = 1;
  return outs;
}

// Eight independent accumulator chains per warp keep the tensor pipe full.
__global__ void mma_chains_kernel(int64_t iters, float* sink) {
  unsigned a[4] = {threadIdx.x, threadIdx.x * 3u, threadIdx.x * 5u, threadIdx.x * 7u};
  float d[8][4] = {};
  for (int64_t i = 0; i < iters; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) mma_bf16(d[j], a, a[j % 4], a[(j + 1) % 4]);
  float s = 0.0f;
  for (int j = 0; j < 8; ++j) s += d[j][0] + d[j][1] + d[j][2] + d[j][3];
  if (s == 12345.678f) *sink = s;
}

}  // namespace

double mma_chains(int64_t iters, float* sink, int sms, cudaStream_t stream) {
  const int blocks = sms * 4, threads = 256;
  mma_chains_kernel<<<blocks, threads, 0, stream>>>(iters, sink);
  // Each warp-wide mma is 16 × 8 × 16 multiply-adds.
  return double(blocks) * (threads / 32) * 8 * double(iters) * 16 * 8 * 16 * 2;
}

std::size_t gemm_bf16_split_scratch_bytes(int64_t M, int64_t N, int64_t K) {
  return std::size_t(chunks_of(K)) * std::size_t(M) * std::size_t(N) * sizeof(float);
}

std::size_t gemm_bf16_scratch_bytes(int64_t M, int64_t N, int64_t K, GemmGpu gpu) {
  return gemm_bf16_scratch_bytes(M, one_output(nullptr, nullptr, N), K, gpu);
}

std::size_t gemm_bf16_scratch_bytes(int64_t M, const GemmOutputs& outs, int64_t K, GemmGpu gpu) {
  return plan_for(M, outs, K, gpu).split ? gemm_bf16_split_scratch_bytes(M, total_columns(outs), K) : 0;
}

GemmGpu gemm_gpu() {
  GemmGpu gpu;
  int device = 0;
  if (cudaGetDevice(&device) == cudaSuccess) cudaDeviceGetAttribute(&gpu.sms, cudaDevAttrMultiProcessorCount, device);
  gpu.sms = std::max(gpu.sms, 1);
  gpu.hopper = hopper::runs_here() ? 1 : 0;
  return gpu;
}

bool gemm_tile_runs(GemmTile tile, GemmGpu gpu) { return hopper_consumers(tile) == 0 || gpu.hopper != 0; }

void gemm_bf16_with(GemmTile tile, bool split, const uint16_t* x, const GemmOutputs& outs, int64_t M, int64_t K,
                    float* scratch, int* arrivals, cudaStream_t stream) {
  if (M == 0 || total_columns(outs) == 0) return;
  if (const int consumers = hopper_consumers(tile))
    if (hopper::gemm(consumers, split, x, outs, M, K, scratch, arrivals, stream)) return;
  with_config(tile, [&](auto c) { launch<decltype(c)>(split, x, outs, M, K, scratch, arrivals, stream); });
}

const char* gemm_tile_name(GemmTile tile) {
  switch (tile) {
    case GemmTile::Small: return "small";
    case GemmTile::Medium: return "medium";
    case GemmTile::Large: return "large";
    case GemmTile::SmallNarrow: return "small_narrow";
    case GemmTile::SmallDeep: return "small_deep";
    case GemmTile::SmallNarrowDeep: return "small_narrow_deep";
    case GemmTile::SmallStaged: return "small_staged";
    case GemmTile::MediumWide: return "medium_wide";
    case GemmTile::MediumShort: return "medium_short";
    case GemmTile::MediumSums: return "medium_sums";
    case GemmTile::MediumStaged: return "medium_staged";
    case GemmTile::MediumDeep: return "medium_deep";
    case GemmTile::LargeDeep: return "large_deep";
    case GemmTile::LargeStaged: return "large_staged";
    case GemmTile::LargeNarrow: return "large_narrow";
    case GemmTile::Hopper: return "hopper";
    case GemmTile::HopperShort: return "hopper_short";
  }
  return "?";
}

int64_t gemm_tile_rows(GemmTile tile) {
  if (const int consumers = hopper_consumers(tile)) return hopper::tile_rows(consumers);
  return with_config(tile, [](auto c) { return int64_t(decltype(c)::BM); });
}

void gemm_bf16_with(GemmTile tile, bool split, const uint16_t* x, const uint16_t* w, float* y, int64_t M, int64_t N,
                    int64_t K, float* scratch, int* arrivals, cudaStream_t stream) {
  gemm_bf16_with(tile, split, x, one_output(w, y, N), M, K, scratch, arrivals, stream);
}

void gemm_bf16(const uint16_t* x, const GemmOutputs& outs, int64_t M, int64_t K, float* scratch, int* arrivals,
               GemmGpu gpu, cudaStream_t stream) {
  const GemmPlan plan = plan_for(M, outs, K, gpu);
  gemm_bf16_with(plan.tile, plan.split, x, outs, M, K, scratch, arrivals, stream);
}

void gemm_bf16(const uint16_t* x, const uint16_t* w, float* y, int64_t M, int64_t N, int64_t K, float* scratch,
               int* arrivals, GemmGpu gpu, cudaStream_t stream) {
  gemm_bf16(x, one_output(w, y, N), M, K, scratch, arrivals, gpu, stream);
}

int64_t gemm_bf16_tiles(GemmTile tile, int64_t M, int64_t N) { return tiles_of(tile, M, one_output(nullptr, nullptr, N)); }

}  // namespace rowlm::cuda
