// affine_mma (gemm_affine.h): 4-, 5-, 6- and 8-bit affine weights on tensor cores.

#include "backend/cuda/gemm_affine.h"

#include <cuda_bf16.h>

#include <algorithm>

#include "backend/cuda/chunk_sums.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/mma_sync.cuh"
#include "backend/cuda/weight_ref.cuh"

namespace rowlm::cuda {
namespace {

constexpr int kWarps = 4;                  // a block: 4 warps, 16 weight rows each
constexpr int kChunkCols = int(kAffineChunk);  // (a value device code can use)
constexpr int64_t kMostSplitBytes = int64_t(32) << 20;  // partials of a split launch at most

__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// One thread per tile lane: gathers its eight codes from the stream and
// writes their low nibbles (a word) and high bits (a field of bits − 4 bytes).
__global__ void mma16_from_stream_kernel(const uint32_t* in, uint32_t* out, int64_t rows, int64_t cols, int bits) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols / 8) return;
  const int64_t tile = i / 32, col_tiles = cols / 16;
  const int lane = int(i % 32), g = lane / 4, t = lane % 4, hi_bits = bits - 4;
  const int64_t row_tile = tile / col_tiles, step = tile % col_tiles;
  const int64_t row0 = row_tile * 16, col0 = step * 16;
  uint32_t word = 0, high = 0;
  for (int reg = 0; reg < 4; ++reg)
    for (int e = 0; e < 2; ++e) {
      const int64_t row = row0 + g + 8 * (reg & 1), col = col0 + 2 * t + 8 * (reg >> 1) + e;
      const uint32_t code = stream_code(in, row * cols + col, bits);
      word |= (code & 0xFu) << (4 * (reg + 4 * e));
      if (hi_bits > 0) high |= (code >> 4) << (hi_bits * (reg + 4 * e));
    }
  out[mma16_row_tile_words(row_tile, cols, bits) + step * 32 + lane] = word;
  if (hi_bits == 0) return;
  unsigned char* fields = reinterpret_cast<unsigned char*>(out) + mma16_high_bytes(row_tile, cols, bits);
  for (int b = 0; b < hi_bits; ++b) fields[(step * 32 + lane) * hi_bits + b] = (unsigned char)(high >> (8 * b));
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

// A lane's high-bit field (kHi bytes: 0 for 4-bit codes), loaded once.
template <int kHi>
__device__ __forceinline__ uint32_t load_high(const unsigned char* p) {
  if constexpr (kHi == 1) return __ldg(p);
  if constexpr (kHi == 2) return __ldg(reinterpret_cast<const unsigned short*>(p));
  if constexpr (kHi == 4) return __ldg(reinterpret_cast<const unsigned int*>(p));
  return 0u;
}
// The field with its e = 1 half moved up to bit 16, so that register i's two
// high parts sit at bits kHi·i and 16 + kHi·i, as code_pair's nibbles do.
template <int kHi>
__device__ __forceinline__ uint32_t spread_high(uint32_t f) {
  if constexpr (kHi == 1) return (f & 0xFu) | (f & 0xF0u) << 12;
  if constexpr (kHi == 2) return (f & 0xFFu) | (f & 0xFF00u) << 8;
  return f;  // kHi == 4: already the nibbles' layout
}
// Register i of the A fragment for codes wider than 4 bits: lo + 16 · hi,
// both exact in bf16 and their fma exact (the code, at most 255, is a bf16
// integer), so the fragment holds the codes exactly as code_pair's does.
template <int kHi>
__device__ __forceinline__ unsigned wide_code_pair(uint32_t word, uint32_t spread, int i) {
  if constexpr (kHi == 0) {
    return code_pair(word, i);
  } else {
    constexpr uint32_t kMask = ((1u << kHi) - 1u) * 0x00010001u;
    const uint32_t biased = ((spread >> (kHi * i)) & kMask) | 0x43004300u;
    const __nv_bfloat162 c128(__float2bfloat16(128.0f), __float2bfloat16(128.0f));
    const __nv_bfloat162 hi = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&biased), c128);
    const unsigned lo_bits = code_pair(word, i);
    const __nv_bfloat162 v = __hfma2(hi, __nv_bfloat162(__float2bfloat16(16.0f), __float2bfloat16(16.0f)),
                                     *reinterpret_cast<const __nv_bfloat162*>(&lo_bits));
    return *reinterpret_cast<const unsigned*>(&v);
  }
}

constexpr int kBlockRows = kWarps * 16;                   // weight rows of a block
constexpr int kMaxChunkGroups = kChunkCols / 16;  // groups in a chunk at most (G = 16)
constexpr int kParamPitch = kMaxChunkGroups + 1;          // a staged row's parameters (odd: no bank conflicts)
constexpr int kXPitch = kChunkCols + 8;           // a staged token's bf16 (+8: B fragments hit 32 banks)
constexpr unsigned kOnes = 0x3F803F80u;                   // two bf16 ones

template <int kNt>
constexpr std::size_t mma_smem_bytes() {
  return std::size_t(8 * kNt) * kXPitch * 2 + 2 * std::size_t(kBlockRows) * kParamPitch * 4;
}

// A block: 4 warps of 16 weight rows × kNt tiles of 8 tokens, over chunks
// [c0, c1) of K. Per chunk the block stages its tokens' activations (rounded
// to bf16) and its rows' scales and biases in shared memory, while each warp's
// first code words are in flight; then a warp runs the chunk's 16-wide steps:
// the codes' mma into Q, an mma of a ones fragment into X (the group's
// activation sums: the same for every row), and at each group's end the
// fold. With `partials` a block runs one chunk and writes its partial there
// ([chunk][M][N]), else y.
template <int kNt, int kHi>
__global__ void __launch_bounds__(kWarps * 32)
    affine_mma_kernel(const float* x, const WeightRef w, float* y, float* partials, int64_t M, int64_t N, int64_t K) {
  constexpr int kTok = 8 * kNt, kAhead = kNt <= 2 ? 16 : 8;
  extern __shared__ __align__(16) unsigned char affine_smem[];
  uint16_t* xs = reinterpret_cast<uint16_t*>(affine_smem);
  float* ps = reinterpret_cast<float*>(affine_smem + std::size_t(kTok) * kXPitch * 2);
  float* pb = ps + kBlockRows * kParamPitch;
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31, g = lane >> 2, t = lane & 3;
  const int64_t row0 = int64_t(blockIdx.x) * kBlockRows;
  const int64_t row_tile = row0 / 16 + warp;
  const bool active = row_tile * 16 < N;  // an idle warp still stages with the block
  const int64_t m0 = int64_t(blockIdx.y) * kTok;
  const int64_t chunks = ceil_div(K, kChunkCols);
  const int64_t c0 = partials ? blockIdx.z : 0, c1 = partials ? c0 + 1 : chunks;
  const int G = w.group_size, group_steps = G / 16;
  const int64_t groups = K / G;
  const int ra = warp * 16 + g, rb = ra + 8;  // this lane's rows within the block
  // This warp's row tile: its low-nibble words, then its high-bit fields.
  const int64_t tile_row = active ? row_tile : 0;
  const uint32_t* codes = static_cast<const uint32_t*>(w.values) + mma16_row_tile_words(tile_row, K, w.bits) + lane;
  const unsigned char* highs =
      static_cast<const unsigned char*>(w.values) + mma16_high_bytes(tile_row, K, w.bits) + lane * kHi;
  float out[kNt][4];
#pragma unroll
  for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) out[nt][i] = 0.0f;
  for (int64_t c = c0; c < c1; ++c) {
    const int64_t kc = c * kChunkCols, step0 = kc / 16;
    const int cols = int(K - kc < kChunkCols ? K - kc : kChunkCols), steps = cols / 16, chunk_groups = cols / G;
    uint32_t next[kAhead], next_hi[kAhead];
#pragma unroll
    for (int a = 0; a < kAhead; ++a) {
      next[a] = active && a < steps ? __ldg(codes + (step0 + a) * 32) : 0u;
      next_hi[a] = active && a < steps ? load_high<kHi>(highs + (step0 + a) * 32 * kHi) : 0u;
    }
    if (c != c0) __syncthreads();  // every warp is done with the last chunk's staging
    // Activations: float4 loads, rounded as round_to_bf16 rounds; rows past M zero.
    for (int i = int(threadIdx.x); i < kTok * (cols / 4); i += kWarps * 32) {
      const int tok = i / (cols / 4), k = i % (cols / 4) * 4;
      float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (m0 + tok < M) v = __ldg(reinterpret_cast<const float4*>(x + (m0 + tok) * K + kc + k));
      uint2 packed;
      packed.x = uint32_t(f32_to_bf16(v.x)) | uint32_t(f32_to_bf16(v.y)) << 16;
      packed.y = uint32_t(f32_to_bf16(v.z)) | uint32_t(f32_to_bf16(v.w)) << 16;
      *reinterpret_cast<uint2*>(xs + tok * kXPitch + k) = packed;
    }
    for (int i = int(threadIdx.x); i < kBlockRows * chunk_groups; i += kWarps * 32) {
      const int r = i / chunk_groups, j = i % chunk_groups;
      if (row0 + r >= N) continue;
      const int64_t at = (row0 + r) * groups + kc / G + j;
      ps[r * kParamPitch + j] = load_weight(w.scales, w.storage, at);
      pb[r * kParamPitch + j] = load_weight(w.biases, w.storage, at);
    }
    __syncthreads();
    if (!active) continue;
    float part[kNt][4], q[kNt][4], xsum[kNt][4];
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) part[nt][i] = q[nt][i] = xsum[nt][i] = 0.0f;
    const unsigned ones[4] = {kOnes, kOnes, kOnes, kOnes};
    for (int s0 = 0; s0 < steps; s0 += kAhead) {
      uint32_t cur[kAhead], cur_hi[kAhead];
#pragma unroll
      for (int a = 0; a < kAhead; ++a) {
        cur[a] = next[a];
        cur_hi[a] = next_hi[a];
      }
      if (s0 + kAhead < steps) {
#pragma unroll
        for (int a = 0; a < kAhead; ++a) {
          const bool in = s0 + kAhead + a < steps;
          next[a] = in ? __ldg(codes + (step0 + s0 + kAhead + a) * 32) : 0u;
          next_hi[a] = in ? load_high<kHi>(highs + (step0 + s0 + kAhead + a) * 32 * kHi) : 0u;
        }
      }
#pragma unroll
      for (int a = 0; a < kAhead; ++a) {
        const int s = s0 + a;
        if (s >= steps) break;
        const uint32_t spread = spread_high<kHi>(cur_hi[a]);
        const unsigned frag[4] = {wide_code_pair<kHi>(cur[a], spread, 0), wide_code_pair<kHi>(cur[a], spread, 1),
                                  wide_code_pair<kHi>(cur[a], spread, 2), wide_code_pair<kHi>(cur[a], spread, 3)};
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt) {
          const uint16_t* b = xs + (nt * 8 + g) * kXPitch + s * 16 + 2 * t;
          const unsigned b0 = *reinterpret_cast<const unsigned*>(b), b1 = *reinterpret_cast<const unsigned*>(b + 8);
          mma_bf16(q[nt], frag, b0, b1);
          mma_bf16(xsum[nt], ones, b0, b1);
        }
        if ((s + 1) % group_steps == 0) {  // the group's scale and bias on its sums
          const int j = s / group_steps;
          const float sa = ps[ra * kParamPitch + j], ba = pb[ra * kParamPitch + j];
          const float sb = ps[rb * kParamPitch + j], bb = pb[rb * kParamPitch + j];
#pragma unroll
          for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              part[nt][e] = fmaf(ba, xsum[nt][e], fmaf(sa, q[nt][e], part[nt][e]));
              part[nt][2 + e] = fmaf(bb, xsum[nt][e], fmaf(sb, q[nt][2 + e], part[nt][2 + e]));
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) q[nt][i] = xsum[nt][i] = 0.0f;
          }
        }
      }
    }
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) out[nt][i] = partials ? part[nt][i] : __fadd_rn(out[nt][i], part[nt][i]);
  }
  if (!active) return;
  float* dst = partials ? partials + c0 * M * N : y;
#pragma unroll
  for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t tok = m0 + nt * 8 + 2 * t + (i & 1), row = row_tile * 16 + g + (i < 2 ? 0 : 8);
      if (tok < M) dst[tok * N + row] = out[nt][i];
    }
}

int tile_tokens(int64_t M) { return M <= 8 ? 1 : M <= 16 ? 2 : M <= 32 ? 4 : 8; }

// Whether a launch splits over K: when its warps alone would leave the SMs
// idle, and the partials stay small.
bool split_over_k(int64_t M, int64_t N, int64_t K, int sms) {
  const int64_t chunks = ceil_div(K, kAffineChunk);
  const int64_t warps = N / 16 * ceil_div(M, 8 * tile_tokens(M));
  return chunks > 1 && warps < int64_t(8) * sms && chunks * M * N * int64_t(sizeof(float)) <= kMostSplitBytes;
}

template <int kNt, int kHi>
void launch_mma(const float* x, const WeightRef& w, float* y, float* partials, int64_t M, int64_t N, int64_t K,
                cudaStream_t stream) {
  const dim3 grid(unsigned(ceil_div(N, kBlockRows)), unsigned(ceil_div(M, 8 * kNt)),
                  partials ? unsigned(ceil_div(K, kAffineChunk)) : 1u);
  constexpr std::size_t smem = mma_smem_bytes<kNt>();
  if constexpr (smem > 48 * 1024)
    cudaFuncSetAttribute(affine_mma_kernel<kNt, kHi>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  affine_mma_kernel<kNt, kHi><<<grid, kWarps * 32, smem, stream>>>(x, w, y, partials, M, N, K);
}
template <int kNt>
void launch_mma(const float* x, const WeightRef& w, float* y, float* partials, int64_t M, int64_t N, int64_t K,
                cudaStream_t stream) {
  switch (w.bits) {
    case 5: return launch_mma<kNt, 1>(x, w, y, partials, M, N, K, stream);
    case 6: return launch_mma<kNt, 2>(x, w, y, partials, M, N, K, stream);
    case 8: return launch_mma<kNt, 4>(x, w, y, partials, M, N, K, stream);
    default: return launch_mma<kNt, 0>(x, w, y, partials, M, N, K, stream);
  }
}

}  // namespace

void affine_mma16_from_stream(const uint32_t* stream_words, uint32_t* mma_words, int64_t rows, int64_t cols, int bits,
                              cudaStream_t stream) {
  const int64_t n = rows * cols / 8;
  if (n == 0) return;
  mma16_from_stream_kernel<<<unsigned(ceil_div(n, 256)), 256, 0, stream>>>(stream_words, mma_words, rows, cols, bits);
}

std::size_t affine_mma_workspace_bytes(int64_t M, int64_t N, int64_t K, int sms) {
  return split_over_k(M, N, K, sms) ? std::size_t(ceil_div(K, kAffineChunk) * M * N) * sizeof(float) : 0;
}

void affine_mma(const float* x, const WeightRef& w, float* y, int64_t M, int64_t N, int64_t K, float* workspace,
                int sms, cudaStream_t stream) {
  if (M * N == 0) return;
  float* partials = split_over_k(M, N, K, sms) ? workspace : nullptr;
  switch (tile_tokens(M)) {
    case 1: launch_mma<1>(x, w, y, partials, M, N, K, stream); break;
    case 2: launch_mma<2>(x, w, y, partials, M, N, K, stream); break;
    case 4: launch_mma<4>(x, w, y, partials, M, N, K, stream); break;
    default: launch_mma<8>(x, w, y, partials, M, N, K, stream); break;
  }
  if (partials) {
    sum_chunks(partials, y, M * N, ceil_div(K, kAffineChunk), stream);
  }
}

}  // namespace rowlm::cuda
