#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
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

}  // namespace
}  // namespace rowlm
