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
  // Rows of x up to which matmul_amx_bf16 computes AMX's order on the
  // vector units (matmul_amx_bf16_rows) rather than on the tiles: the same
  // bits either way. A tile pass costs the same for 1 row as for 16 and
  // streams a lone row's weights at 77% of the read bandwidth
  // (docs/perf.md); the vector kernel's work grows with the rows: per
  // 16 x 32 block of w (1 KB) a 64-shuffle transpose and 32 shifts and
  // masks, then 32 FMAs per row. At 4 rows, its register limit, that is
  // about 112 cycles per KB on a core with two FMA ports, ~20 GB/s a core
  // at 2.2 GHz: twice what 16 cores need to read 160 GB/s, so decode stays
  // bound by the bandwidth (an estimate; one Zen 4 core streamed 4 rows
  // from DRAM as fast as the pair order, two cores at 85-90% of it). 0
  // keeps every M on the tiles: the default until the vector kernel is
  // measured against the tiles on an AMX host (kernels_bench --only batch
  // reports both), so decode keeps the path whose speed is known.
  int64_t amx_vector_rows = 0;
  // Items (chunk x part of M) per thread wanted at the least, so a thread
  // the OS preempts holds up the call by a fraction of its share.
  int64_t items_per_thread = 4;
  // From this many rows of x on (0: never), the schedule keeps chunks at
  // chunk_bytes and splits M to reach items_per_thread; below it (and
  // always when 0) it shrinks the chunks first. A chunk's rows are what
  // each row of x read from L3 is reused by: at 16 threads, E2B's down
  // projection in 24-row chunks re-reads the whole of a prefill's x (6 MB)
  // 64 times. Off by default: on the 16-core Xeon host it sped some of a
  // prefill's GEMMs and slowed others, within that busy host's noise
  // (docs/perf.md, session 47); `kernels_bench --schedules` weighs it.
  int64_t split_rows_from = 0;
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
// Calls of up to tuning.amx_vector_rows rows go to matmul_amx_bf16_rows,
// which gives the same bits.
void matmul_amx_bf16(ThreadPool& pool, const float* x, int64_t M, int64_t K, const uint16_t* w, int64_t ldw,
                     int64_t N, float* y, const MatmulTuning& tuning = {});

// The same matmul, AMX's order bit for bit, on the AVX-512 vector units
// (amx_bf16_rows.h): for decode, whose few rows the tiles stream slowly.
// Any M (in groups of kAmxRowsMax rows, each group streaming w once);
// threads split N in chunks of whole 16-row groups (and M in whole groups
// when N alone gives too few chunks), so a row's result depends on nothing
// else. Runs where isa_supported(Isa::Avx512), AMX or not: off the AMX
// hosts the tests call it directly.
void matmul_amx_bf16_rows(ThreadPool& pool, const float* x, int64_t M, int64_t K, const uint16_t* w, int64_t ldw,
                          int64_t N, float* y, const MatmulTuning& tuning = {});

// The same for an affine-quantized w (N rows of K columns): bitwise the
// dense f32 matmul of the dequantized matrix, whatever M, the thread count
// or the chunking (kernels.h, dot_block_affine). Rows of x up to the tile
// height run against the codes directly (decode); more rows meet tiles
// dequantized once per call and item.
void matmul_affine(const Kernels& kernels, ThreadPool& pool, const float* x, int64_t M, int64_t K,
                   const AffineRows& w, int64_t N, float* y, const MatmulTuning& tuning = {});

// The same under MatmulPrecision::Int8 for an int8_supported w
// (int8_matmul.h): x quantized to 8 bits per 32 elements once per call,
// integer dot products, the header's float epilogue. Each output depends on
// its row of x and row of w alone: not on M, the threads or the chunking.
void matmul_affine_int8(const Kernels& kernels, ThreadPool& pool, const float* x, int64_t M, int64_t K,
                        const AffineRows& w, int64_t N, float* y, const MatmulTuning& tuning = {});

// w's rows from `first_row` on.
AffineRows affine_rows_from(const AffineRows& w, int64_t first_row);

}  // namespace rowlm::cpu
