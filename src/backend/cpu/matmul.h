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
// exercise other shapes. A work item is (weight rows) x (x rows); it walks K
// in blocks, keeping its f32 weight panel and its accumulators in L2.
struct MatmulTuning {
  int64_t k_block = 1024;                // K per block (a multiple of 16)
  std::size_t panel_bytes = 192 * 1024;  // f32 weight rows x one K block
  std::size_t acc_bytes = 256 * 1024;    // 16-lane accumulators of an item
};

// y[m, n] = Σ_k x[m, k] · w[n, k]; x is [M, K] and y is [M, N], both dense.
void matmul(const Kernels& kernels, ThreadPool& pool, Workspace& workspace, const float* x,
            int64_t M, int64_t K, const WeightRows& w, int64_t N, float* y,
            const MatmulTuning& tuning = {});

}  // namespace rowlm::cpu
