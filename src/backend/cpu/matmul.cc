#include "backend/cpu/matmul.h"

#include <algorithm>
#include <atomic>

namespace rowlm::cpu {
namespace {

// Below this many multiply-adds a parallel region costs more than it saves.
constexpr int64_t kMinParallelMacs = int64_t(1) << 18;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

WeightRows rows_from(const WeightRows& w, int64_t first) {
  WeightRows r = w;
  r.data = static_cast<const char*>(w.data) + first * w.ld * int64_t(dtype_size(w.dtype));
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
    // Streaming: one row group, so every weight row is read exactly once;
    // each thread takes a contiguous range of rows.
    if (threads == 1) {
      kernels.dot_block(x, K, M, w, N, K, y, N);
      return;
    }
    const int64_t grain = std::max<int64_t>(kernels.nr, ceil_div(kMinParallelMacs, M * std::max<int64_t>(K, 1)));
    pool.parallel_for(N, grain, [&](int64_t n0, int64_t n1) {
      kernels.dot_block(x, K, M, rows_from(w, n0), n1 - n0, K, y + n0, N);
    });
    return;
  }

  // Blocked: items of (nb weight rows) x (mb x rows). A bf16/f16 block is
  // widened once into the thread's f32 panel and then met by every x row
  // group of the item while it is hot in L2; an f32 block is used in place.
  const bool widen = w.dtype != DType::F32;
  const int64_t padded_k = round_up(std::max<int64_t>(K, 1), 16);
  const int64_t nr = kernels.nr, mr = kernels.mr;
  int64_t nb = int64_t(tuning.panel_bytes) / (padded_k * int64_t(sizeof(float))) / nr * nr;
  nb = std::clamp<int64_t>(nb, nr, round_up(N, nr));
  const int64_t n_blocks = ceil_div(N, nb);
  // Few weight blocks (small N): split M as well so every thread has work.
  int64_t m_blocks = 1;
  if (n_blocks < 4 * threads) m_blocks = std::min(ceil_div(M, mr), ceil_div(4 * threads, n_blocks));
  const int64_t mb = round_up(ceil_div(M, m_blocks), mr);
  m_blocks = ceil_div(M, mb);
  const int64_t items = n_blocks * m_blocks;

  std::atomic<int64_t> next{0};
  pool.run(std::min<int64_t>(threads, items), [&](int64_t slot) {
    float* panel = widen ? workspace.floats(int(slot), std::size_t(nb * padded_k)) : nullptr;
    int64_t widened_block = -1;
    for (;;) {
      const int64_t item = next.fetch_add(1, std::memory_order_relaxed);
      if (item >= items) break;
      const int64_t bn = item / m_blocks, bm = item % m_blocks;
      const int64_t n0 = bn * nb, n_count = std::min(nb, N - n0);
      const int64_t m0 = bm * mb, m_count = std::min(mb, M - m0);
      WeightRows block = rows_from(w, n0);
      if (widen) {
        if (widened_block != bn) kernels.widen_rows(block, n_count, K, panel, padded_k);
        widened_block = bn;
        block = WeightRows{DType::F32, panel, padded_k};
      }
      kernels.dot_block(x + m0 * K, K, m_count, block, n_count, K, y + m0 * N + n0, N);
    }
  });
}

}  // namespace rowlm::cpu
