#pragma once
// A fixed set of worker threads for data-parallel kernels. `run(n, fn)`
// calls fn(i) for i in [0, n) spread over the workers and the calling thread,
// and returns when all calls are done. Which thread runs which index never
// changes a result: kernels give each index its own outputs.
//
// Workers spin briefly before sleeping, because a decode step issues
// hundreds of short parallel regions and a sleeping wake-up costs more than
// the work in each.

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace rowlm {

class ThreadPool {
 public:
  // threads = total threads including the caller; 0 means one per core.
  explicit ThreadPool(int threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }

  // Not reentrant: fn must not call run on the same pool.
  void run(int64_t n, const std::function<void(int64_t)>& fn);

  // Splits [0, n) into about size() contiguous ranges of at least `grain`
  // and calls fn(begin, end) for each.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  static int hardware_threads();

 private:
  void worker_loop();
  void drain();

  std::vector<std::jthread> workers_;
  const std::function<void(int64_t)>* job_ = nullptr;
  int64_t job_size_ = 0;
  std::atomic<int64_t> next_{0};
  std::atomic<int> active_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

}  // namespace rowlm
