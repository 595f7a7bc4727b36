#pragma once
// The CUDA backend's matmul for 4-bit affine weights (backend/weight.h) on
// tensor cores, under MatmulPrecision::Bf16:
//   y[m, n] = Σ_k bf16(x[m, k]) · (s[n, g] · q[n, k] + b[n, g]),  g = k / G,
// the exact dequantized weights times the activations rounded to bf16, as
// the bf16 tile path (gemm_bf16.h) multiplies bf16 weights. The codes stay
// 4 bits in GPU memory (CodeOrder::Mma16, below) and enter mma.m16n8k16 as
// the integers they are (exact in bf16); each group's scale and bias are
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

// CodeOrder::Mma16 (4-bit codes, rows and cols multiples of 16): the matrix
// in tiles of 16 rows × 16 columns, row tiles outermost, each tile 32 words
// in lane order. Word L of a tile (g = L / 4, t = L % 4) holds the eight
// codes lane L feeds to mma.m16n8k16 as the A operand: register i (0..3) at
// row g + 8·(i & 1), columns 2t + 8·(i >> 1) and the next, its first code
// in bits [4i, 4i + 4) and its second in bits [16 + 4i, 20 + 4i).
// Whether a weight's shape takes it:
inline bool mma16_fits(int64_t rows, int64_t cols, int bits, int group_size) {
  return bits == 4 && rows % 16 == 0 && cols % 16 == 0 && group_size % 16 == 0 && kAffineChunk % group_size == 0;
}
// Stream-order 4-bit codes [rows, cols / 8] words rewritten in Mma16 order.
void affine_mma16_from_stream(const uint32_t* stream_words, uint32_t* mma_words, int64_t rows, int64_t cols,
                              cudaStream_t stream);

// Device bytes of workspace affine_mma needs: the chunks' partials where it
// splits over K, else 0.
std::size_t affine_mma_workspace_bytes(int64_t M, int64_t N, int64_t K, int sms);

// y = x · wᵀ for a 4-bit Mma16 weight `w` [N, K] (w.order == kMma16Order);
// x f32 [M, K] (rows 16-byte aligned: K is a multiple of 16); workspace: at
// least affine_mma_workspace_bytes (may be null when that is 0).
void affine_mma(const float* x, const WeightRef& w, float* y, int64_t M, int64_t N, int64_t K, float* workspace,
                int sms, cudaStream_t stream);

}  // namespace rowlm::cuda
