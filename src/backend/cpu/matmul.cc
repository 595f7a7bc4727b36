#include "backend/cpu/matmul.h"

#include <algorithm>
#include <atomic>

#include "core/error.h"

namespace rowlm::cpu {
namespace {

// Below this many multiply-adds a parallel region costs more than it saves.
constexpr int64_t kMinParallelMacs = int64_t(1) << 18;
// Weight bytes per streaming chunk: long enough runs for the prefetchers.
constexpr int64_t kStreamChunkBytes = int64_t(1) << 20;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// The weight rows from row `row` on, starting at column `col`.
WeightRows rows_from(const WeightRows& w, int64_t row, int64_t col = 0) {
  WeightRows r = w;
  r.data = static_cast<const char*>(w.data) + (row * w.ld + col) * int64_t(dtype_size(w.dtype));
  return r;
}

}  // namespace

float* Workspace::floats(int slot, std::size_t count) {
  AlignedBuffer& b = slots_.at(std::size_t(slot));
  if (b.size() < count * sizeof(float)) b = AlignedBuffer(count * sizeof(float));
  return b.as<float>();
}

void matmul(const Kernels& kernels, ThreadPool& pool, Workspace& workspace, const float* x,
            int64_t M, int64_t K, const WeightRows& w, int64_t N, float* y,
            const MatmulTuning& tuning) {
  if (M <= 0 || N <= 0) return;
  const int64_t macs = M * N * std::max<int64_t>(K, 1);
  const int threads = macs < kMinParallelMacs ? 1 : pool.size();

  if (M <= kernels.mr) {
    // Streaming: one row group, so every weight row is read exactly once.
    // Threads take chunks of rows from a shared counter rather than one
    // fixed share each, so a thread that the OS preempts delays the call by
    // at most a chunk. Chunks are multiples of 24 rows (whole streaming
    // tiles for 1 to 4 rows of x).
    if (threads == 1) {
      kernels.dot_block(x, K, M, w, N, K, y, N);
      return;
    }
    const int64_t row_bytes = std::max<int64_t>(K, 1) * int64_t(dtype_size(w.dtype));
    int64_t chunk = std::min(ceil_div(kStreamChunkBytes, row_bytes), ceil_div(N, 4 * int64_t(threads)));
    chunk = round_up(std::max<int64_t>(chunk, 1), 24);
    const int64_t chunks = ceil_div(N, chunk);
    pool.run(chunks, [&](int64_t c) {
      const int64_t n0 = c * chunk, count = std::min(chunk, N - n0);
      kernels.dot_block(x, K, M, rows_from(w, n0), count, K, y + n0, N);
    });
    return;
  }

  // Blocked: items of (nb weight rows) x (mb x rows), each walking K in
  // blocks of kb. Per block, bf16/f16 weights are widened into the thread's
  // f32 panel (f32 weights are used in place) and met by every x row group
  // of the item while hot in cache; the 16-lane accumulators carry over
  // between blocks. One block when K is small: no accumulator traffic.
  ROWLM_CHECK(tuning.k_block >= 16 && tuning.k_block % 16 == 0,
              "matmul: k_block must be a positive multiple of 16 (only the last block may have a tail)");
  const int64_t mr = kernels.mr, nr = kernels.nr;
  const int64_t kb = K <= tuning.k_block * 2 ? std::max<int64_t>(K, 1) : tuning.k_block;
  const bool one_block = kb >= K;
  const int64_t kb_padded = round_up(kb, 16);
  const bool widen = w.dtype != DType::F32;
  int64_t nb = int64_t(tuning.panel_bytes) / (kb_padded * int64_t(sizeof(float))) / nr * nr;
  nb = std::clamp<int64_t>(nb, nr, round_up(N, nr));
  const int64_t group_acc_floats = ceil_div(nb, nr) * kernels.acc_floats_per_tile;
  int64_t mb = round_up(M, mr);
  if (!one_block)
    mb = std::clamp<int64_t>(int64_t(tuning.acc_bytes) / (group_acc_floats * int64_t(sizeof(float))) * mr, mr, mb);
  const int64_t n_blocks = ceil_div(N, nb);
  // Few items (small N or M): split M further so every thread has work.
  if (n_blocks * ceil_div(M, mb) < 4 * threads)
    mb = std::min(mb, round_up(ceil_div(M, ceil_div(4 * threads, n_blocks)), mr));
  const int64_t m_blocks = ceil_div(M, mb);
  const int64_t items = n_blocks * m_blocks;
  const std::size_t panel_floats = widen ? std::size_t(nb * kb_padded) : 0;
  const std::size_t acc_floats = one_block ? 0 : std::size_t(ceil_div(mb, mr) * group_acc_floats);

  std::atomic<int64_t> next{0};
  pool.run(std::min<int64_t>(threads, items), [&](int64_t slot) {
    float* scratch = workspace.floats(int(slot), panel_floats + acc_floats);
    float* panel = scratch;
    float* acc = one_block ? nullptr : scratch + panel_floats;
    for (;;) {
      const int64_t item = next.fetch_add(1, std::memory_order_relaxed);
      if (item >= items) break;
      const int64_t bn = item / m_blocks, bm = item % m_blocks;
      const int64_t n0 = bn * nb, n_count = std::min(nb, N - n0);
      const int64_t m0 = bm * mb, m_count = std::min(mb, M - m0);
      for (int64_t k0 = 0; k0 < K || k0 == 0; k0 += kb) {
        const int64_t k_count = std::min(kb, K - k0);
        const WeightRows block = rows_from(w, n0, k0);
        const float* rows = static_cast<const float*>(block.data);
        int64_t ld = w.ld;
        if (widen) {
          kernels.widen_rows(block, n_count, k_count, panel, kb_padded);
          rows = panel;
          ld = kb_padded;
        }
        const bool first = k0 == 0, last = k0 + kb >= K;
        kernels.dot_block_partial(x + m0 * K + k0, K, m_count, rows, ld, n_count, k_count,
                                  first ? nullptr : acc, last ? nullptr : acc, y + m0 * N + n0, N);
      }
    }
  });
}

}  // namespace rowlm::cpu
