#pragma once
// One thread per tensor-parallel shard (issue 17): shard 0's work runs on
// the caller's thread, shard s >= 1's on a thread of its own, started once
// with the model and kept for its life. run(fn) is a meeting point: it
// starts fn(s) on every shard and returns when all have finished. The
// decoder calls it for each phase of a layer whose shards run on their own
// backends (decoder.cc); between two calls the caller alone touches the
// model's state, so every backend keeps its one-caller-at-a-time contract
// (shard s's backend is only ever called from shard s's thread, or from the
// caller while the workers wait).
//
// Errors: every shard's fn runs to its end whatever the others do; then the
// exception of the lowest shard that threw is rethrown (so which error a
// caller sees does not depend on thread timing). The workers survive it.
//
// Threads: run is called by one thread at a time (the model's caller).
// No state is shared beyond this object.

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace rowlm::tensor_parallel {

class ShardWorkers {
 public:
  // shards >= 1; shards - 1 threads are started.
  explicit ShardWorkers(int shards);
  ~ShardWorkers();
  ShardWorkers(const ShardWorkers&) = delete;
  ShardWorkers& operator=(const ShardWorkers&) = delete;

  int shards() const { return shards_; }
  // fn(s) for s in [0, shards): 0 on the calling thread, the rest on theirs.
  void run(const std::function<void(int shard)>& fn);

 private:
  void work(int shard);

  int shards_;
  std::mutex mu_;
  std::condition_variable start_, done_;
  const std::function<void(int)>* task_ = nullptr;  // valid while a run is in flight
  uint64_t generation_ = 0;                         // counts runs; a worker starts on a new value
  int pending_ = 0;                                 // workers still running this generation
  bool stop_ = false;
  std::vector<std::exception_ptr> errors_;          // [shard], of the run in flight
  std::vector<std::thread> threads_;                // joined in the destructor
};

}  // namespace rowlm::tensor_parallel
