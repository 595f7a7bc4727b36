#include "backend/cpu/matmul.h"

#include <algorithm>
#include <vector>

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

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

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
  const int64_t depth = std::max<int64_t>(K, 1);
  const int64_t threads = M * N * depth < kMinParallelMacs ? 1 : pool.size();
  const int64_t row_bytes = depth * int64_t(dtype_size(w.dtype));
  // At least 4 chunks per thread when N allows, so a thread the OS preempts
  // holds up the call by one chunk at most.
  int64_t chunk = std::min(ceil_div(std::max<int64_t>(tuning.chunk_bytes, 1), row_bytes), ceil_div(N, 4 * threads));
  chunk = round_up(std::max<int64_t>(chunk, 1), kChunkRowMultiple);
  const int64_t chunks = ceil_div(N, chunk);
  // Too few chunks for the threads (small N): split the rows of x as well.
  const int64_t mr = kernels.mr;
  int64_t m_part = round_up(M, mr);
  if (chunks < 2 * threads) m_part = round_up(ceil_div(M, ceil_div(2 * threads, chunks)), mr);
  const int64_t m_parts = ceil_div(M, m_part);

  auto run_item = [&](int64_t item) {
    const int64_t n0 = item / m_parts * chunk, n_count = std::min(chunk, N - n0);
    const int64_t m_begin = item % m_parts * m_part, m_end = std::min(M, m_begin + m_part);
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
  };
  const int64_t items = chunks * m_parts;
  if (threads == 1 || items == 1) {
    for (int64_t item = 0; item < items; ++item) run_item(item);
  } else {
    pool.run(items, run_item);
  }
}

}  // namespace rowlm::cpu
