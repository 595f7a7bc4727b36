#include "model/shard_workers.h"

#include "core/error.h"

namespace rowlm::tensor_parallel {

ShardWorkers::ShardWorkers(int shards) : shards_(shards), errors_(std::size_t(shards > 0 ? shards : 0)) {
  ROWLM_CHECK(shards >= 1, "ShardWorkers: at least one shard");
  threads_.reserve(std::size_t(shards - 1));
  try {
    for (int s = 1; s < shards; ++s) threads_.emplace_back([this, s] { work(s); });
  } catch (...) {
    // A thread that could not start: stop the ones that did before unwinding.
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    start_.notify_all();
    for (std::thread& t : threads_) t.join();
    throw;
  }
}

ShardWorkers::~ShardWorkers() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  start_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void ShardWorkers::work(int shard) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* task = nullptr;
    {
      std::unique_lock lock(mu_);
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      task = task_;
    }
    std::exception_ptr error;
    try {
      (*task)(shard);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard lock(mu_);
    errors_[std::size_t(shard)] = error;
    if (--pending_ == 0) done_.notify_one();
  }
}

void ShardWorkers::run(const std::function<void(int shard)>& fn) {
  {
    std::lock_guard lock(mu_);
    task_ = &fn;
    pending_ = shards_ - 1;
    for (std::exception_ptr& e : errors_) e = nullptr;
    ++generation_;
  }
  start_.notify_all();
  std::exception_ptr mine;
  try {
    fn(0);
  } catch (...) {
    mine = std::current_exception();
  }
  std::unique_lock lock(mu_);
  done_.wait(lock, [&] { return pending_ == 0; });
  task_ = nullptr;
  errors_[0] = mine;
  for (const std::exception_ptr& e : errors_)
    if (e) std::rethrow_exception(e);
}

}  // namespace rowlm::tensor_parallel
