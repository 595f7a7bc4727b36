#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace rowlm {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

}  // namespace

int ThreadPool::hardware_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : int(n);
}

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = hardware_threads();
  width_ = threads;
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  workers_.clear();  // joins
}

void ThreadPool::Job::drain() {
  for (;;) {
    const int64_t i = next.fetch_add(1, std::memory_order_relaxed);
    if (i >= n) return;
    try {
      (*fn)(i);
    } catch (...) {
      std::lock_guard lock(error_mutex);
      if (!error) error = std::current_exception();
    }
    done.fetch_add(1, std::memory_order_release);
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;  // the generation at construction; a job may start before this thread runs
  bool spin = true;   // false after a narrowed region left this worker out
  for (;;) {
    // Spin for a short while, then sleep until the generation changes.
    uint64_t g = generation_.load(std::memory_order_acquire);
    if (spin) {
      const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(100);
      while (g == seen && std::chrono::steady_clock::now() < spin_until) {
        for (int k = 0; k < 32; ++k) cpu_relax();
        g = generation_.load(std::memory_order_acquire);
      }
    }
    if (g == seen) {
      generation_.wait(seen);
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load()) return;
    std::shared_ptr<Job> job;
    {
      std::lock_guard lock(job_mutex_);
      job = job_;
    }
    // A worker left out of a narrowed region sleeps until the next one; one
    // that came too late for a region (it had ended) keeps spinning, as
    // the next region is likely near.
    spin = !job || job->seats.fetch_sub(1, std::memory_order_relaxed) > 0;
    if (job && spin) job->drain();
  }
}

namespace {

// A wait this long for workers means one of them is not getting a core.
constexpr auto kStall = std::chrono::microseconds(500);
// How long a narrowed width runs without a stall before it doubles.
constexpr auto kWidenAfter = std::chrono::milliseconds(50);

}  // namespace

ThreadPool::Stats ThreadPool::stats() const {
  return {regions_.load(std::memory_order_relaxed), stalls_.load(std::memory_order_relaxed),
          narrowed_.load(std::memory_order_relaxed)};
}

void ThreadPool::run(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  const int64_t ticks = now.time_since_epoch().count();
  if (width_ < size() && ticks - width_changed_ >= std::chrono::steady_clock::duration(kWidenAfter).count()) {
    width_ = std::min(size(), 2 * width_);
    width_changed_ = ticks;
  }
  regions_.fetch_add(1, std::memory_order_relaxed);
  if (width_ < size()) narrowed_.fetch_add(1, std::memory_order_relaxed);
  if (width_ == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  auto job = std::make_shared<Job>();
  job->fn = &fn;
  job->n = n;
  job->seats.store(width_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard lock(job_mutex_);
    job_ = job;
  }
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  job->drain();
  // Only indices already taken by a worker are outstanding; yield now and
  // then so a worker sharing this core can finish them.
  const auto drained = std::chrono::steady_clock::now();
  const auto draining = drained - now;
  for (int spins = 0; job->done.load(std::memory_order_acquire) != n; ++spins) {
    if (spins % 64 == 63) std::this_thread::yield();
    else cpu_relax();
  }
  const auto finished = std::chrono::steady_clock::now();
  // A stall: waiting long, and longer than the caller's own share took.
  // (Long indices end unevenly by themselves: a worker that finishes its
  // 10 ms index 1 ms after the caller is working, not stalled.)
  const auto waited = finished - drained;
  if (waited > kStall && waited > draining) {
    stalls_.fetch_add(1, std::memory_order_relaxed);
    width_ = std::max(1, width_ / 2);
    width_changed_ = finished.time_since_epoch().count();
  }
  {
    std::lock_guard lock(job_mutex_);
    if (job_ == job) job_.reset();
  }
  if (job->error) std::rethrow_exception(job->error);
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t chunks = std::clamp<int64_t>(n / grain, 1, size());
  const int64_t per = (n + chunks - 1) / chunks;
  run(chunks, [&](int64_t c) {
    const int64_t b = c * per, e = std::min(n, b + per);
    if (b < e) fn(b, e);
  });
}

}  // namespace rowlm
