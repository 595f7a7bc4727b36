// affine_mma (gemm_affine.h): 4-bit affine weights on tensor cores.

#include "backend/cuda/gemm_affine.h"

#include <cuda_bf16.h>

#include <algorithm>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/mma_sync.cuh"
#include "backend/cuda/weight_ref.cuh"

namespace rowlm::cuda {
namespace {

constexpr int kWarps = 4;                  // a block: 4 warps, 16 weight rows each
constexpr int kChunkSteps = int(kAffineChunk / 16);  // 16-wide k steps in a chunk
constexpr int64_t kMostSplitBytes = int64_t(32) << 20;  // partials of a split launch at most

__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
std::size_t align256(std::size_t n) { return (n + 255) / 256 * 256; }

// One thread per Mma16 word: gathers its eight codes from the stream.
__global__ void mma16_from_stream_kernel(const uint32_t* in, uint32_t* out, int64_t rows, int64_t cols) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols / 8) return;
  const int64_t tile = i / 32, col_tiles = cols / 16;
  const int lane = int(i % 32), g = lane / 4, t = lane % 4;
  const int64_t row0 = tile / col_tiles * 16, col0 = tile % col_tiles * 16;
  uint32_t word = 0;
  for (int reg = 0; reg < 4; ++reg)
    for (int e = 0; e < 2; ++e) {
      const int64_t row = row0 + g + 8 * (reg & 1), col = col0 + 2 * t + 8 * (reg >> 1) + e;
      const int64_t bit = (row * cols + col) * 4;
      word |= ((in[bit / 32] >> (bit % 32)) & 0xFu) << (4 * reg + 16 * e);
    }
  out[i] = word;
}

// x rounded to bf16, and each group's sum of the rounded values (added to
// 0.0f in increasing k): a thread per (row, group).
__global__ void affine_prepare_kernel(const float* x, uint16_t* xb, float* xsum, int64_t M, int64_t K, int group) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t groups = K / group;
  if (i >= M * groups) return;
  const int64_t at = i / groups * K + i % groups * group;
  float sum = 0.0f;
  for (int k = 0; k < group; ++k) {
    const uint16_t h = f32_to_bf16(x[at + k]);
    xb[at + k] = h;
    sum = __fadd_rn(sum, bf16_to_f32(h));
  }
  xsum[i] = sum;
}

// Register i of lane's A fragment from its Mma16 word: the two codes as
// bf16 integers (128 + q is exact in bf16's [128, 256) binade, and so is the
// difference).
__device__ __forceinline__ unsigned code_pair(uint32_t word, int i) {
  const uint32_t biased = ((word >> (4 * i)) & 0x000F000Fu) | 0x43004300u;
  const __nv_bfloat162 v = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&biased),
                                   __nv_bfloat162(__float2bfloat16(128.0f), __float2bfloat16(128.0f)));
  return *reinterpret_cast<const unsigned*>(&v);
}

// A warp: 16 weight rows × kNt tiles of 8 tokens, over chunks [c0, c1) of
// K. With `partials` it writes its one chunk's partial there ([chunk][M][N]),
// else y. kAhead: code words loaded before their mma steps run.
template <int kNt>
__global__ void __launch_bounds__(kWarps * 32)
    affine_mma_kernel(const uint16_t* xb, const float* xsum, const WeightRef w, float* y, float* partials, int64_t M,
                      int64_t N, int64_t K) {
  constexpr int kAhead = kNt <= 2 ? kChunkSteps : 8;
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31, g = lane >> 2, t = lane & 3;
  const int64_t row_tile = int64_t(blockIdx.x) * kWarps + warp;
  if (row_tile * 16 >= N) return;
  const int64_t m0 = int64_t(blockIdx.y) * 8 * kNt;
  const int64_t chunks = ceil_div(K, kAffineChunk);
  const int64_t c0 = partials ? blockIdx.z : 0, c1 = partials ? c0 + 1 : chunks;
  const int G = w.group_size, group_steps = G / 16;
  const int64_t groups = K / G;
  const int64_t row_a = row_tile * 16 + g, row_b = row_a + 8;
  const uint32_t* codes = static_cast<const uint32_t*>(w.values) + row_tile * (K / 16) * 32 + lane;
  // Token of B column g in tile nt, and of output columns 2t, 2t + 1.
  const uint16_t* xrow[kNt];
#pragma unroll
  for (int nt = 0; nt < kNt; ++nt) {
    const int64_t tok = m0 + nt * 8 + g;
    xrow[nt] = tok < M ? xb + tok * K + 2 * t : nullptr;
  }
  float out[kNt][4];
#pragma unroll
  for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) out[nt][i] = 0.0f;
  for (int64_t c = c0; c < c1; ++c) {
    const int64_t step0 = c * kChunkSteps;
    const int steps = int(std::min<int64_t>(kChunkSteps, K / 16 - step0));
    float part[kNt][4], q[kNt][4];
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) part[nt][i] = q[nt][i] = 0.0f;
    for (int s0 = 0; s0 < steps; s0 += kAhead) {
      uint32_t words[kAhead];
#pragma unroll
      for (int a = 0; a < kAhead; ++a) words[a] = s0 + a < steps ? __ldg(codes + (step0 + s0 + a) * 32) : 0u;
#pragma unroll
      for (int a = 0; a < kAhead; ++a) {
        const int s = s0 + a;
        if (s >= steps) break;
        const int64_t k0 = (step0 + s) * 16;
        const unsigned frag[4] = {code_pair(words[a], 0), code_pair(words[a], 1), code_pair(words[a], 2),
                                  code_pair(words[a], 3)};
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt) {
          unsigned b0 = 0, b1 = 0;
          if (xrow[nt]) {
            b0 = __ldg(reinterpret_cast<const unsigned*>(xrow[nt] + k0));
            b1 = __ldg(reinterpret_cast<const unsigned*>(xrow[nt] + k0 + 8));
          }
          mma_bf16(q[nt], frag, b0, b1);
        }
        if ((s + 1) % group_steps == 0) {  // the group's scale and bias on its sums
          const int64_t gi = k0 / G;
          const float sa = load_weight(w.scales, w.storage, row_a * groups + gi);
          const float ba = load_weight(w.biases, w.storage, row_a * groups + gi);
          const float sb = load_weight(w.scales, w.storage, row_b * groups + gi);
          const float bb = load_weight(w.biases, w.storage, row_b * groups + gi);
#pragma unroll
          for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int64_t tok = m0 + nt * 8 + 2 * t + e;
              const float xs = tok < M ? xsum[tok * groups + gi] : 0.0f;
              part[nt][e] = fmaf(ba, xs, fmaf(sa, q[nt][e], part[nt][e]));
              part[nt][2 + e] = fmaf(bb, xs, fmaf(sb, q[nt][2 + e], part[nt][2 + e]));
              q[nt][e] = q[nt][2 + e] = 0.0f;
            }
        }
      }
    }
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) out[nt][i] = partials ? part[nt][i] : __fadd_rn(out[nt][i], part[nt][i]);
  }
  float* dst = partials ? partials + c0 * M * N : y;
#pragma unroll
  for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t tok = m0 + nt * 8 + 2 * t + (i & 1), row = i < 2 ? row_a : row_b;
      if (tok < M) dst[tok * N + row] = out[nt][i];
    }
}

// y = ((0.0f + P_0) + P_1) + …: a thread per element.
__global__ void add_chunks_kernel(const float* partials, int64_t chunks, int64_t MN, float* y) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= MN) return;
  float sum = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) sum = __fadd_rn(sum, partials[c * MN + i]);
  y[i] = sum;
}

int tile_tokens(int64_t M) { return M <= 8 ? 1 : M <= 16 ? 2 : M <= 32 ? 4 : 8; }

// Whether a launch splits over K: when its warps alone would leave the SMs
// idle, and the partials stay small.
bool split_over_k(int64_t M, int64_t N, int64_t K, int sms) {
  const int64_t chunks = ceil_div(K, kAffineChunk);
  const int64_t warps = N / 16 * ceil_div(M, 8 * tile_tokens(M));
  return chunks > 1 && warps < int64_t(8) * sms && chunks * M * N * int64_t(sizeof(float)) <= kMostSplitBytes;
}

template <int kNt>
void launch_mma(const uint16_t* xb, const float* xsum, const WeightRef& w, float* y, float* partials, int64_t M,
                int64_t N, int64_t K, cudaStream_t stream) {
  const dim3 grid(unsigned(ceil_div(N / 16, kWarps)), unsigned(ceil_div(M, 8 * kNt)),
                  partials ? unsigned(ceil_div(K, kAffineChunk)) : 1u);
  affine_mma_kernel<kNt><<<grid, kWarps * 32, 0, stream>>>(xb, xsum, w, y, partials, M, N, K);
}

}  // namespace

void affine_mma16_from_stream(const uint32_t* stream_words, uint32_t* mma_words, int64_t rows, int64_t cols,
                              cudaStream_t stream) {
  const int64_t n = rows * cols / 8;
  if (n == 0) return;
  mma16_from_stream_kernel<<<unsigned(ceil_div(n, 256)), 256, 0, stream>>>(stream_words, mma_words, rows, cols);
}

std::size_t affine_mma_workspace_bytes(int64_t M, int64_t N, int64_t K, int group_size, int sms) {
  std::size_t bytes = align256(std::size_t(M * K) * 2) + align256(std::size_t(M * (K / group_size)) * 4);
  if (split_over_k(M, N, K, sms)) bytes += std::size_t(ceil_div(K, kAffineChunk) * M * N) * 4;
  return bytes;
}

void affine_mma(const float* x, const WeightRef& w, float* y, int64_t M, int64_t N, int64_t K, void* workspace,
                int sms, cudaStream_t stream) {
  if (M * N == 0) return;
  auto* base = static_cast<std::byte*>(workspace);
  auto* xb = reinterpret_cast<uint16_t*>(base);
  auto* xsum = reinterpret_cast<float*>(base + align256(std::size_t(M * K) * 2));
  const int64_t groups = K / w.group_size;
  float* partials = split_over_k(M, N, K, sms)
                        ? reinterpret_cast<float*>(base + align256(std::size_t(M * K) * 2) +
                                                   align256(std::size_t(M * groups) * 4))
                        : nullptr;
  affine_prepare_kernel<<<unsigned(ceil_div(M * groups, 256)), 256, 0, stream>>>(x, xb, xsum, M, K, w.group_size);
  switch (tile_tokens(M)) {
    case 1: launch_mma<1>(xb, xsum, w, y, partials, M, N, K, stream); break;
    case 2: launch_mma<2>(xb, xsum, w, y, partials, M, N, K, stream); break;
    case 4: launch_mma<4>(xb, xsum, w, y, partials, M, N, K, stream); break;
    default: launch_mma<8>(xb, xsum, w, y, partials, M, N, K, stream); break;
  }
  if (partials) {
    const int64_t MN = M * N;
    add_chunks_kernel<<<unsigned(ceil_div(MN, 256)), 256, 0, stream>>>(partials, ceil_div(K, kAffineChunk), MN, y);
  }
}

}  // namespace rowlm::cuda
