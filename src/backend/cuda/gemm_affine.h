#pragma once
// The CUDA backend's matmul for 4-, 5-, 6- and 8-bit affine weights
// (backend/weight.h) on tensor cores, under MatmulPrecision::Bf16:
//   y[m, n] = Σ_k bf16(x[m, k]) · (s[n, g] · q[n, k] + b[n, g]),  g = k / G,
// the exact dequantized weights times the activations rounded to bf16, as
// the bf16 tile path (gemm_bf16.h) multiplies bf16 weights. The codes keep
// their width in GPU memory (CodeOrder::Mma16, below) and enter
// mma.m16n8k16 as the integers they are (0 … 255: exact in bf16, however
// the fragment was assembled, so every width takes the same canonical
// order and a wider code changes no step of it); each group's scale and bias are
// applied to the group's sums:
//   Q_g[m, n] = Σ_{k in g} x_k · q[n, k]   (mma, f32 accumulation)
//   X_g[m]    = Σ_{k in g} x_k             (mma of a fragment of ones)
//   s · Q_g + b · X_g = Σ_{k in g} x_k · (s · q + b) up to the roundings.
//
// Batch invariance. Every output element is summed in one canonical order,
// whatever M is and whichever launch configuration runs:
//   1. Q_g[m, n]: mma.m16n8k16 steps from 0.0f, 16 k at a time, increasing k;
//   2. X_g[m]: the same steps with every code replaced by 1.
//   3. K is cut into chunks of kAffineChunk columns at fixed offsets; a
//      chunk's partial P starts at 0.0f and takes, group by group in
//      increasing k, P = fma(s, Q_g, P), then P = fma(b, X_g, P).
//   4. y = ((0.0f + P_0) + P_1) + …, chunks in increasing order.
// Element (m, n) depends only on row m of x and row n of w: the tile width
// over the tokens, and whether chunks run in blocks of their own (partials
// then added by a second kernel in chunk order), are picked from M, N and K
// for speed and change no bit. A row's result is the same alone and in any
// batch, in prefill and in decode.
//
// Under MatmulPrecision::F32 affine weights keep weight.h's contract (the
// f32 matmul of the dequantized matrix, the CPU's bits): Lanes16 codes and
// dense_kernels' lane kernel.
//
// All pointers are device pointers; launches are asynchronous on `stream`.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/dense_kernels.h"

namespace rowlm::cuda {

inline constexpr int64_t kAffineChunk = 512;

// CodeOrder::Mma16 (b = 4, 5, 6 or 8 bits; rows and cols multiples of 16):
// the matrix in tiles of 16 rows × 16 columns. Each code is split into its
// low nibble and its b − 4 high bits (none at 4 bits), code = lo + 16 · hi.
//  - Low nibbles: each tile 32 words in lane order. Word L of a tile
//    (g = L / 4, t = L % 4) holds the eight codes lane L feeds to
//    mma.m16n8k16 as the A operand: register i (0..3) at row g + 8·(i & 1),
//    columns 2t + 8·(i >> 1) (element e = 0) and the next (e = 1), the
//    element's nibble at bits 4·(i + 4e).
//  - High bits: each tile 32 fields of b − 4 bytes (1, 2 or 4) in lane
//    order, field L holding the same eight codes' high bits at bits
//    (b − 4)·(i + 4e).
// A row of tiles (16 rows, all K / 16 tiles) is its low-nibble words, then
// its high-bit fields: 16 · K · b / 32 words, as many as the stream's 16
// rows hold, so a range of whole row tiles is a range of the tensor's rows.
// Whether a weight's shape takes it:
inline bool mma16_fits(int64_t rows, int64_t cols, int bits, int group_size) {
  return (bits == 4 || bits == 5 || bits == 6 || bits == 8) && rows % 16 == 0 && cols % 16 == 0 &&
         group_size % 16 == 0 && kAffineChunk % group_size == 0;
}
// Word offset of row tile `row_tile`'s first low-nibble word, and byte
// offset of its high-bit fields from the codes' start.
__host__ __device__ inline int64_t mma16_row_tile_words(int64_t row_tile, int64_t cols, int bits) {
  return row_tile * (cols * bits / 2);
}
__host__ __device__ inline int64_t mma16_high_bytes(int64_t row_tile, int64_t cols, int bits) {
  return (mma16_row_tile_words(row_tile, cols, bits) + cols * 2) * 4;
}
// Stream-order b-bit codes [rows, cols · b / 32] words rewritten in Mma16
// order (the same number of words).
void affine_mma16_from_stream(const uint32_t* stream_words, uint32_t* mma_words, int64_t rows, int64_t cols, int bits,
                              cudaStream_t stream);

// Device bytes of workspace affine_mma needs: the chunks' partials where it
// splits over K, else 0.
std::size_t affine_mma_workspace_bytes(int64_t M, int64_t N, int64_t K, int sms);

// y = x · wᵀ for an Mma16 weight `w` [N, K] (w.order == kMma16Order);
// x f32 [M, K] (rows 16-byte aligned: K is a multiple of 16); workspace: at
// least affine_mma_workspace_bytes (may be null when that is 0).
void affine_mma(const float* x, const WeightRef& w, float* y, int64_t M, int64_t N, int64_t K, float* workspace,
                int sms, cudaStream_t stream);

}  // namespace rowlm::cuda
