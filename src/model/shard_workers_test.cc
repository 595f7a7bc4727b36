// ShardWorkers (shard_workers.h): each shard's work on a thread of its own
// (shard 0 on the caller's), a run returning only when all are done, and
// the lowest shard's error rethrown after every shard has finished.

#include "model/shard_workers.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <stdexcept>
#include <string>

namespace rowlm::tensor_parallel {
namespace {

TEST(ShardWorkers, RunsEveryShardOnItsOwnThreadAndWaitsForAll) {
  ShardWorkers workers(4);
  for (int round = 0; round < 50; ++round) {
    std::vector<std::thread::id> ids(4);
    std::vector<int> done(4, 0);
    workers.run([&](int s) {
      ids[std::size_t(s)] = std::this_thread::get_id();
      done[std::size_t(s)] = round + 1;
    });
    for (int s = 0; s < 4; ++s) EXPECT_EQ(done[std::size_t(s)], round + 1) << "shard " << s << " not finished";
    EXPECT_EQ(ids[0], std::this_thread::get_id());
    EXPECT_EQ(std::set<std::thread::id>(ids.begin(), ids.end()).size(), 4u);
  }
}

TEST(ShardWorkers, RethrowsTheLowestShardsErrorAfterAllFinish) {
  ShardWorkers workers(3);
  std::atomic<int> finished{0};
  try {
    workers.run([&](int s) {
      finished++;
      if (s >= 1) throw std::runtime_error("shard " + std::to_string(s));
    });
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "shard 1");
  }
  EXPECT_EQ(finished.load(), 3);
  // The workers survive an error.
  int sum = 0;
  std::mutex mu;
  workers.run([&](int s) {
    std::lock_guard lock(mu);
    sum += s;
  });
  EXPECT_EQ(sum, 3);
}

TEST(ShardWorkers, OneShardRunsOnTheCaller) {
  ShardWorkers one(1);
  std::thread::id id;
  one.run([&](int) { id = std::this_thread::get_id(); });
  EXPECT_EQ(id, std::this_thread::get_id());
}

}  // namespace
}  // namespace rowlm::tensor_parallel
