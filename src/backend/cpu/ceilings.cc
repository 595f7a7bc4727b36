#include "backend/cpu/ceilings.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "backend/cpu/amx_bf16.h"
#include "backend/cpu/kernels.h"
#include "core/buffer.h"
#include "core/error.h"

namespace rowlm::cpu {
namespace {

// Seconds taken by one pool.run(size, fn).
template <class F>
double timed_run(ThreadPool& pool, const F& fn) {
  const auto start = std::chrono::steady_clock::now();
  pool.run(pool.size(), fn);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

double measure_read_bandwidth(ThreadPool& pool, std::size_t bytes, int repeats) {
  if (bytes < 4096 || repeats < 1) throw Error("measure_read_bandwidth: need at least 4096 bytes and one repeat");
  const Kernels& k = kernels_for(best_isa());
  const std::size_t threads = std::size_t(pool.size());
  const std::size_t share = bytes / threads / 256 * 256;  // whole 256-byte steps, 64-byte aligned
  AlignedBuffer buffer(share * threads);                   // zero-filled, so every page is mapped
  std::vector<uint64_t> sink(threads);
  auto stream = [&](int64_t i) { sink[std::size_t(i)] ^= k.stream_read(buffer.data() + std::size_t(i) * share, share); };
  timed_run(pool, stream);  // warm-up: wakes the workers, settles the clocks
  double best = 0;
  for (int r = 0; r < repeats; ++r) best = std::max(best, double(share * threads) / timed_run(pool, stream) / 1e9);
  return best;
}

namespace {

// GFLOP/s of `chain` (returning its flops) on every thread, best of `repeats`.
double measure_chains(ThreadPool& pool, int repeats, int64_t chain_length,
                      double (*chain)(int64_t iters, float* sink), const char* what) {
  if (repeats < 1 || chain_length < 1) throw Error(std::string(what) + ": need at least one repeat and one step");
  std::vector<float> sink(std::size_t(pool.size()));
  std::vector<double> flops(std::size_t(pool.size()));
  auto chains = [&](int64_t i) { flops[std::size_t(i)] = chain(chain_length, &sink[std::size_t(i)]); };
  timed_run(pool, chains);
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const double seconds = timed_run(pool, chains);
    double total = 0;
    for (double f : flops) total += f;
    best = std::max(best, total / seconds / 1e9);
  }
  return best;
}

}  // namespace

double measure_fma_peak(ThreadPool& pool, int repeats, int64_t chain_length) {
  return measure_chains(pool, repeats, chain_length, kernels_for(best_isa()).fma_chains, "measure_fma_peak");
}

double measure_bf16_dot_peak(ThreadPool& pool, int repeats, int64_t chain_length) {
  return measure_chains(pool, repeats, chain_length, kernels_for(best_isa()).bf16_dot_chains,
                        "measure_bf16_dot_peak");
}

double measure_int8_dot_peak(ThreadPool& pool, int repeats, int64_t chain_length) {
  const Kernels& k = kernels_for(best_isa());
  if (!k.native_int8) throw Error("measure_int8_dot_peak: this CPU has no AVX512-VNNI");
  return measure_chains(pool, repeats, chain_length, k.int8_dot_chains, "measure_int8_dot_peak");
}

double measure_amx_bf16_peak(ThreadPool& pool, int repeats, int64_t chain_length) {
  if (!amx_bf16_usable()) throw Error("measure_amx_bf16_peak: this CPU has no AMX-BF16 tiles");
  return measure_chains(pool, repeats, chain_length, &amx_bf16_chains, "measure_amx_bf16_peak");
}

}  // namespace rowlm::cpu
