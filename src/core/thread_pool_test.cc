#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "core/error.h"

namespace rowlm {
namespace {

TEST(ThreadPool, EveryIndexRunsExactlyOnce) {
  ThreadPool pool(3);
  for (int n : {0, 1, 2, 7, 1000}) {
    std::vector<std::atomic<int>> hits(n);
    pool.run(n, [&](int64_t i) { hits[i].fetch_add(1); });
    for (int i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1);
  }
}

TEST(ThreadPool, ParallelForCoversRange) {
  ThreadPool pool(2);
  std::vector<std::atomic<int>> hits(101);
  pool.parallel_for(101, 10, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ThreadPool, ExceptionReachesCaller) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.run(10, [](int64_t i) { if (i == 5) throw Error("boom"); }), Error);
  std::atomic<int> n{0};
  pool.run(10, [&](int64_t) { n++; });  // still usable
  EXPECT_EQ(n.load(), 10);
}

// A worker held up inside its index (as when it loses its core) is a
// stall: the pool narrows to half its threads rather than to the caller
// alone, and widens again once regions run without stalls. Every index
// still runs exactly once throughout.
TEST(ThreadPool, AStallHalvesTheWidthAndQuietRegionsRestoreIt) {
  ThreadPool pool(4);
  const auto caller = std::this_thread::get_id();
  std::atomic<bool> worker_started{false};
  std::vector<std::atomic<int>> hits(64);
  pool.run(64, [&](int64_t i) {
    hits[i].fetch_add(1);
    if (std::this_thread::get_id() == caller) {
      // The caller's share waits for a worker to hold an index, so that the
      // caller ends up waiting for it (bounded: a worker that never comes
      // only means no stall, which the assertion below reports).
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      while (!worker_started.load() && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    } else if (!worker_started.exchange(true)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(60));
    }
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  const ThreadPool::Stats after_stall = pool.stats();
  ASSERT_GE(after_stall.stalls, 1);
  EXPECT_EQ(after_stall.regions, 1);

  // The next region runs narrowed (within kWidenAfter of the stall) on two
  // threads: the caller and one worker (its indices sleep, so the worker
  // has the time to join, and none of them stalls the caller).
  std::atomic<int> n{0};
  std::mutex ids_mutex;
  std::set<std::thread::id> ids;
  pool.run(16, [&](int64_t) {
    n++;
    {
      std::lock_guard lock(ids_mutex);
      ids.insert(std::this_thread::get_id());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  });
  EXPECT_EQ(n.load(), 16);
  EXPECT_EQ(pool.stats().narrowed, after_stall.narrowed + 1);
  EXPECT_EQ(ids.size(), 2u) << "half of the pool's 4 threads";

  // Quiet regions spaced past kWidenAfter widen it back to all four threads
  // (a few tries: a loaded machine may stall a region of its own).
  bool widened = false;
  int runs = 2;
  for (int attempt = 0; attempt < 20 && !widened; ++attempt, ++runs) {
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    const int64_t narrowed_before = pool.stats().narrowed;
    pool.run(16, [&](int64_t) { n++; });
    widened = pool.stats().narrowed == narrowed_before;
  }
  EXPECT_TRUE(widened);
  EXPECT_EQ(n.load(), 16 * (runs - 1));
}

}  // namespace
}  // namespace rowlm
