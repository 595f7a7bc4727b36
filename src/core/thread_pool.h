#pragma once
// A fixed set of worker threads for data-parallel kernels. `run(n, fn)`
// calls fn(i) for i in [0, n) spread over the workers and the calling thread,
// and returns when all calls are done. Which thread runs which index never
// changes a result: kernels give each index its own outputs.
//
// Workers spin briefly before sleeping, because a decode step issues
// hundreds of short parallel regions and a sleeping wake-up costs more than
// the work in each. The caller never waits for a worker that has not
// started: it takes the remaining indices itself and waits only for indices
// in progress. When other processes take a core, even that wait can cost
// milliseconds per region (a worker preempted while it holds an index).
// The pool then narrows: a stall halves the number of threads that take
// indices (down to the caller alone, when the cores are oversubscribed), and
// a width that has run kWidenAfter without a stall doubles again. Halving
// rather than dropping to the caller alone matters on a many-core host where
// one worker is preempted now and then: there the caller alone would run at
// a sixteenth of the speed for the whole period. Results never depend on
// which thread ran an index, so this changes speed only.

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
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

  // What the narrowing did (for benchmarks: a run whose regions were often
  // narrowed had cores taken by something else). Counted by the thread that
  // calls run(); readable from any thread.
  struct Stats {
    int64_t regions = 0;  // run() calls that could use the workers
    int64_t stalls = 0;   // regions that waited over kStall for a worker
    int64_t narrowed = 0; // regions run on fewer threads than size()
  };
  Stats stats() const;

 private:
  // One call of run(); workers that wake late hold it alive and find no work.
  struct Job {
    const std::function<void(int64_t)>* fn = nullptr;
    int64_t n = 0;
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
    std::atomic<int> seats{0};  // workers that may still join
    std::mutex error_mutex;
    std::exception_ptr error;
    void drain();
  };

  void worker_loop();

  std::vector<std::jthread> workers_;
  std::mutex job_mutex_;
  std::shared_ptr<Job> job_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  // The caller's state: threads (the caller included) that take indices,
  // and the steady_clock tick count when that last changed.
  int width_ = 1;
  int64_t width_changed_ = 0;
  std::atomic<int64_t> regions_{0}, stalls_{0}, narrowed_{0};
};

}  // namespace rowlm
