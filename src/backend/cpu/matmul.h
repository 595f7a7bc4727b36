#pragma once
// The matmul driver. Weight rows are handed out in chunks (~1 MB) from a
// shared counter; each chunk meets every row group of x in turn: the first
// group streams it from memory, the others find it in cache. One schedule
// serves decode (M = 1) and prefill (M in the hundreds) alike. Each element
// is computed whole by one kernel call in the canonical order, and threads
// only ever split N (and M, when N alone gives too few chunks), so results
// do not depend on M, on the thread count or on the chunking.

#include <cstdint>

#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "core/thread_pool.h"

namespace rowlm::cpu {

struct MatmulTuning {
  // Weight bytes per chunk: enough for long DRAM streams, small enough to
  // stay in L2 while every row group of x passes over it.
  int64_t chunk_bytes = int64_t(1) << 20;
};

// y[m, n] = Σ_k x[m, k] · w[n, k]; x is [M, K] and y is [M, N], both dense.
// Under MatmulPrecision::Bf16 with bf16 w, x is rounded to bf16 row by row
// first and the products run through kernels.dot_block_bf16.
void matmul(const Kernels& kernels, ThreadPool& pool, const float* x, int64_t M, int64_t K,
            const WeightRows& w, int64_t N, float* y, MatmulPrecision precision = MatmulPrecision::F32,
            const MatmulTuning& tuning = {});

// The bf16-dot matmul on AMX tiles (amx_bf16.h: AMX's order, not the pair
// order): x rounded to bf16 once per call, w N bf16 rows of stride ldw.
// Only where amx_bf16_usable(). Rows of x go in tiles of 16; threads split
// N (and M in whole tiles), so a row's result depends on nothing else.
void matmul_amx_bf16(ThreadPool& pool, const float* x, int64_t M, int64_t K, const uint16_t* w, int64_t ldw,
                     int64_t N, float* y, const MatmulTuning& tuning = {});

// The same for an affine-quantized w (N rows of K columns): bitwise the
// dense f32 matmul of the dequantized matrix, whatever M, the thread count
// or the chunking (kernels.h, dot_block_affine). Rows of x up to the tile
// height run against the codes directly (decode); more rows meet tiles
// dequantized once per call and item.
void matmul_affine(const Kernels& kernels, ThreadPool& pool, const float* x, int64_t M, int64_t K,
                   const AffineRows& w, int64_t N, float* y, const MatmulTuning& tuning = {});

// w's rows from `first_row` on.
AffineRows affine_rows_from(const AffineRows& w, int64_t first_row);

}  // namespace rowlm::cpu
