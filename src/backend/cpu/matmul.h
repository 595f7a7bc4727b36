#pragma once
// The matmul driver: picks the streaming (GEMV-like) or the blocked (GEMM)
// schedule and spreads it over the pool's threads. Both schedules run the
// same per-element canonical order, and threads only ever split N and M, so
// results do not depend on M, on the thread count or on the schedule.

#include <cstdint>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/buffer.h"
#include "core/thread_pool.h"

namespace rowlm::cpu {

// Scratch memory for kernels, one growable slot per pool thread index.
// Slot i is only touched by the work item with index i of a pool.run().
class Workspace {
 public:
  explicit Workspace(int slots) : slots_(std::size_t(slots)) {}
  float* floats(int slot, std::size_t count);

 private:
  std::vector<AlignedBuffer> slots_;
};

// How the blocked schedule is cut; exposed so tests and benchmarks can
// exercise other shapes. Values are in bytes of f32 panel per work item.
struct MatmulTuning {
  std::size_t panel_bytes = 384 * 1024;  // widened weight rows kept hot in L2
};

// y[m, n] = Σ_k x[m, k] · w[n, k]; x is [M, K] and y is [M, N], both dense.
void matmul(const Kernels& kernels, ThreadPool& pool, Workspace& workspace, const float* x,
            int64_t M, int64_t K, const WeightRows& w, int64_t N, float* y,
            const MatmulTuning& tuning = {});

}  // namespace rowlm::cpu
