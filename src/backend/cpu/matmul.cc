#include "backend/cpu/matmul.h"

#include <algorithm>
#include <vector>

#include "backend/cpu/amx_bf16.h"
#include "backend/cpu/amx_bf16_rows.h"
#include "backend/cpu/int8_matmul.h"
#include "core/buffer.h"
#include "core/dtype.h"

namespace rowlm::cpu {
namespace {

// Below this many multiply-adds a parallel region costs more than it saves.
constexpr int64_t kMinParallelMacs = int64_t(1) << 18;
// Elements of x rounded to bf16 per thread, at the least.
constexpr int64_t kConvertGrain = int64_t(1) << 16;
// Chunks are whole multiples of every tile width (12, 8, 6, 4, 2, 1 rows).
constexpr int64_t kChunkRowMultiple = 24;
// Rows of x up to this many bytes go to the kernel together (weight tiles
// outer, row groups inner: each tile streams once and is reused from L1);
// larger x goes one row group at a time, each group meeting the whole chunk
// in L2, so that x is not re-read for every weight tile. On Zen 4 (1 MB L2)
// 1 MB beat 256 KB where they differ: 16 rows x 10240 f32 against
// 2560x10240 bf16 weights 203 vs 144-193 GFLOP/s, bf16 path 330 vs 275.
constexpr int64_t kPanelBytes = int64_t(1) << 20;

// Dequantized f32 weight rows per tile of the batched affine matmul: they
// stay in L2 while the rows of x pass over them.
constexpr int64_t kDequantizedTileBytes = int64_t(256) << 10;

// The 8-bit-activation kernels' rows of x per pass, and chunks in whole
// tiles of 16 weight rows (int8_matmul_avx512vnni.cc).
constexpr int64_t kInt8RowsPerTile = 4;
constexpr int64_t kInt8ChunkRowMultiple = 48;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// How a call's work is split: weight rows in chunks of `chunk`, rows of x
// in parts of `m_part` (a multiple of the tile height), items numbered
// chunk-major.
struct Schedule {
  int64_t threads = 1, chunk = 1, chunks = 1, m_part = 1, m_parts = 1;
  int64_t items() const { return m_parts * chunks; }
  int64_t n0(int64_t item) const { return item / m_parts * chunk; }
  int64_t m_begin(int64_t item) const { return item % m_parts * m_part; }
};

// mr: rows of x per tile (m_part is a multiple); row_multiple: chunks are
// multiples of it (every tile width of the kernel divides it).
Schedule schedule(int64_t mr, int64_t row_multiple, ThreadPool& pool, int64_t M, int64_t K, int64_t N,
                  int64_t row_bytes, const MatmulTuning& tuning) {
  Schedule s;
  const int64_t depth = std::max<int64_t>(K, 1);
  s.threads = M * N * depth < kMinParallelMacs ? 1 : pool.size();
  const int64_t wanted = std::max<int64_t>(tuning.items_per_thread, 1) * s.threads;
  const int64_t full_chunk = ceil_div(std::max<int64_t>(tuning.chunk_bytes, 1), std::max<int64_t>(row_bytes, 1));
  if (tuning.split_rows_from > 0 && M >= tuning.split_rows_from) {
    // Many rows: whole chunks, M in parts of at least a few row groups.
    s.chunk = round_up(std::min(full_chunk, N), row_multiple);
    s.chunks = ceil_div(N, s.chunk);
    const int64_t min_part = 4 * mr;
    s.m_part = round_up(std::max(ceil_div(M, ceil_div(wanted, s.chunks)), min_part), mr);
    s.m_parts = ceil_div(M, s.m_part);
    if (s.chunks * s.m_parts >= s.threads) return s;
    // Too few items even so: fall through to the chunk-first split.
  }
  // Enough chunks per thread when N allows.
  int64_t chunk = std::min(full_chunk, ceil_div(N, wanted));
  s.chunk = round_up(std::max<int64_t>(chunk, 1), row_multiple);
  s.chunks = ceil_div(N, s.chunk);
  // Too few chunks for the threads (small N): split the rows of x as well.
  s.m_part = round_up(M, mr);
  if (s.chunks < 2 * s.threads) s.m_part = round_up(ceil_div(M, ceil_div(2 * s.threads, s.chunks)), mr);
  s.m_parts = ceil_div(M, s.m_part);
  return s;
}

template <class F>
void run_items(ThreadPool& pool, const Schedule& s, const F& run_item) {
  if (s.threads == 1 || s.items() == 1) {
    for (int64_t item = 0; item < s.items(); ++item) run_item(item);
  } else {
    pool.run(s.items(), run_item);
  }
}

}  // namespace

void matmul(const Kernels& kernels, ThreadPool& pool, const float* x, int64_t M, int64_t K,
            const WeightRows& w, int64_t N, float* y, MatmulPrecision precision, const MatmulTuning& tuning) {
  if (M <= 0 || N <= 0) return;
  // Rounded once per call, element by element, so a row's bf16 values do not
  // depend on the others.
  const bool bf16_dot = precision == MatmulPrecision::Bf16 && w.dtype == DType::BF16;
  std::vector<uint16_t> x_bf16;
  if (bf16_dot) {
    x_bf16.resize(std::size_t(M * K));
    // Split over the threads: for a prefill's x this is milliseconds.
    pool.parallel_for(M * K, kConvertGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) x_bf16[std::size_t(i)] = f32_to_bf16(x[i]);
    });
  }
  const Schedule s = schedule(kernels.mr, kChunkRowMultiple, pool, M, K, N,
                              std::max<int64_t>(K, 1) * int64_t(dtype_size(w.dtype)), tuning);
  const int64_t mr = kernels.mr;
  run_items(pool, s, [&](int64_t item) {
    const int64_t n0 = s.n0(item), n_count = std::min(s.chunk, N - n0);
    const int64_t m_begin = s.m_begin(item), m_end = std::min(M, m_begin + s.m_part);
    const WeightRows rows{w.dtype, static_cast<const char*>(w.data) + n0 * w.ld * int64_t(dtype_size(w.dtype)), w.ld};
    const int64_t x_bytes = (m_end - m_begin) * K * (bf16_dot ? 2 : 4);
    const int64_t rows_per_call = x_bytes <= kPanelBytes ? m_end - m_begin : mr;
    for (int64_t m0 = m_begin; m0 < m_end; m0 += rows_per_call) {
      const int64_t rows_of_x = std::min(rows_per_call, m_end - m0);
      if (bf16_dot)
        kernels.dot_block_bf16(x_bf16.data() + m0 * K, K, rows_of_x, static_cast<const uint16_t*>(rows.data),
                               rows.ld, n_count, K, y + m0 * N + n0, N);
      else
        kernels.dot_block(x + m0 * K, K, rows_of_x, rows, n_count, K, y + m0 * N + n0, N);
    }
  });
}

void matmul_amx_bf16(ThreadPool& pool, const float* x, int64_t M, int64_t K, const uint16_t* w, int64_t ldw,
                     int64_t N, float* y, const MatmulTuning& tuning) {
  if (M <= 0 || N <= 0) return;
  if (M <= tuning.amx_vector_rows) {  // decode: the same bits, without the tiles' slow stream
    matmul_amx_bf16_rows(pool, x, M, K, w, ldw, N, y, tuning);
    return;
  }
  // x rounded and packed once per call, tile by tile over the threads.
  const int64_t tiles_m = ceil_div(M, kAmxRows), blocks = amx_blocks(K);
  std::vector<uint16_t> packed(std::size_t(amx_packed_elements(M, K)));
  pool.parallel_for(tiles_m, std::max<int64_t>(1, kConvertGrain / std::max<int64_t>(kAmxRows * K, 1)),
                    [&](int64_t t0, int64_t t1) { amx_pack_x(x, M, K, t0, t1, packed.data()); });
  const Schedule s = schedule(kAmxRows, kAmxRows * 3, pool, M, K, N, std::max<int64_t>(K, 1) * 2, tuning);
  run_items(pool, s, [&](int64_t item) {
    const int64_t n0 = s.n0(item), n_count = std::min(s.chunk, N - n0);
    const int64_t t0 = s.m_begin(item) / kAmxRows, t1 = std::min(tiles_m, t0 + s.m_part / kAmxRows);
    std::vector<uint16_t> scratch(n_count % kAmxRows ? std::size_t(kAmxRows * blocks * kAmxBlock) : 0);
    amx_matmul_bf16(packed.data(), M, K, t0, t1, w + n0 * ldw, ldw, n_count, y + n0, N, scratch.data());
  });
}

void matmul_amx_bf16_rows(ThreadPool& pool, const float* x, int64_t M, int64_t K, const uint16_t* w, int64_t ldw,
                          int64_t N, float* y, const MatmulTuning& tuning) {
  if (M <= 0 || N <= 0) return;
  // x rounded and packed once per call, row by row over the threads.
  const int64_t lag = amx_rows_lag(ldw), ldx = amx_rows_x_stride(K, lag);
  std::vector<float> packed(std::size_t(M * ldx));
  pool.parallel_for(M, std::max<int64_t>(1, kConvertGrain / std::max<int64_t>(K, 1)), [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) amx_rows_pack_x(x + m * K, K, lag, packed.data() + m * ldx);
  });
  // Chunks of whole 16-row groups of w: only the call's last group is short.
  const Schedule s = schedule(kAmxRowsMax, kAmxRows, pool, M, K, N, std::max<int64_t>(K, 1) * 2, tuning);
  run_items(pool, s, [&](int64_t item) {
    const int64_t n0 = s.n0(item), n_count = std::min(s.chunk, N - n0);
    const int64_t m_begin = s.m_begin(item), m_end = std::min(M, m_begin + s.m_part);
    for (int64_t m0 = m_begin; m0 < m_end; m0 += kAmxRowsMax)
      amx_bf16_rows(packed.data() + m0 * ldx, std::min(kAmxRowsMax, m_end - m0), K, lag, w + n0 * ldw, ldw,
                    n_count, y + m0 * N + n0, N);
  });
}

AffineRows affine_rows_from(const AffineRows& w, int64_t first_row) {
  AffineRows r = w;
  const int64_t param_bytes = int64_t(dtype_size(w.param_dtype));
  r.codes = w.codes + first_row * w.code_ld;
  r.scales = static_cast<const char*>(w.scales) + first_row * w.param_ld * param_bytes;
  if (w.biases) r.biases = static_cast<const char*>(w.biases) + first_row * w.param_ld * param_bytes;
  return r;
}

void matmul_affine(const Kernels& kernels, ThreadPool& pool, const float* x, int64_t M, int64_t K,
                   const AffineRows& w, int64_t N, float* y, const MatmulTuning& tuning) {
  if (M <= 0 || N <= 0) return;
  const int64_t row_bytes = w.code_ld * 4 + 2 * w.param_ld * int64_t(dtype_size(w.param_dtype));
  const Schedule s = schedule(kernels.mr, kChunkRowMultiple, pool, M, K, N, row_bytes, tuning);
  const int64_t mr = kernels.mr;
  run_items(pool, s, [&](int64_t item) {
    const int64_t n0 = s.n0(item), n_count = std::min(s.chunk, N - n0);
    const int64_t m_begin = s.m_begin(item), m_end = std::min(M, m_begin + s.m_part);
    if (m_end - m_begin <= mr) {
      // Decode: the codes stream once, dequantized in registers.
      kernels.dot_block_affine(x + m_begin * K, K, m_end - m_begin, affine_rows_from(w, n0), n_count, K,
                               y + m_begin * N + n0, N);
      return;
    }
    // Batched: each tile of weight rows dequantized once into f32 (in L2)
    // and met by every row of x, through the dense kernel.
    const int64_t tile = std::clamp<int64_t>(kDequantizedTileBytes / (4 * std::max<int64_t>(K, 1)) / 12 * 12, 12,
                                             round_up(n_count, 12));
    std::vector<float> dequantized(std::size_t(tile * K));
    const WeightRows tile_rows{DType::F32, dequantized.data(), K};
    const int64_t x_bytes = (m_end - m_begin) * K * 4;
    const int64_t rows_per_call = x_bytes <= kPanelBytes ? m_end - m_begin : mr;
    for (int64_t n = n0; n < n0 + n_count; n += tile) {
      const int64_t rows_of_w = std::min(tile, n0 + n_count - n);
      kernels.dequantize_affine(affine_rows_from(w, n), rows_of_w, K, dequantized.data(), K);
      for (int64_t m0 = m_begin; m0 < m_end; m0 += rows_per_call) {
        const int64_t rows_of_x = std::min(rows_per_call, m_end - m0);
        kernels.dot_block(x + m0 * K, K, rows_of_x, tile_rows, rows_of_w, K, y + m0 * N + n, N);
      }
    }
  });
}

void matmul_affine_int8(const Kernels& kernels, ThreadPool& pool, const float* x, int64_t M, int64_t K,
                        const AffineRows& w, int64_t N, float* y, const MatmulTuning& tuning) {
  if (M <= 0 || N <= 0) return;
  const int unit = int8_unit(w.bits);
  const int64_t ldq = int8_x_row_bytes(K, unit);
  // x quantized once per call, row by row over the threads.
  AlignedBuffer xq = AlignedBuffer::uninitialized(std::size_t(M * ldq));  // every byte written
  auto* q = xq.as<uint8_t>();
  pool.parallel_for(M, std::max<int64_t>(1, kConvertGrain / std::max<int64_t>(K, 1)), [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) kernels.quantize_int8(x + m * K, K, unit, q + m * ldq);
  });
  const int64_t row_bytes = w.code_ld * 4 + 2 * w.param_ld * int64_t(dtype_size(w.param_dtype));
  const Schedule s = schedule(kInt8RowsPerTile, kInt8ChunkRowMultiple, pool, M, K, N, row_bytes, tuning);
  // Scratch: a few KB on the stack for decode's items; for a prefill's, one
  // allocation per call, a share per item (not one per item: above glibc's
  // mmap threshold each would map and unmap pages, and every unmap
  // interrupts all the pool's threads).
  const int64_t wide_floats = int8_scratch_floats(K, unit, s.m_part);
  AlignedBuffer wide = s.m_part >= kInt8WideMinRows
                           ? AlignedBuffer::uninitialized(std::size_t(s.items() * wide_floats) * sizeof(float))
                           : AlignedBuffer();
  run_items(pool, s, [&](int64_t item) {
    const int64_t n0 = s.n0(item), n_count = std::min(s.chunk, N - n0);
    const int64_t m_begin = s.m_begin(item), m_end = std::min(M, m_begin + s.m_part);
    alignas(64) float small[kInt8SmallScratchFloats];
    const bool wide_item = m_end - m_begin >= kInt8WideMinRows;
    // Each tile of w meets every row of the item's x: the prefill tiles read
    // x at an eighth of a byte a multiply-add, from L2 or L3.
    kernels.dot_rows_int8(q + m_begin * ldq, ldq, m_end - m_begin, affine_rows_from(w, n0), n_count, K,
                          y + m_begin * N + n0, N, wide_item ? wide.as<float>() + item * wide_floats : small);
  });
}

}  // namespace rowlm::cpu
