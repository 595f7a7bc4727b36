// The launch queue's graph cache against its contract (launch_queue.h): a
// sequence runs eagerly once, is captured on its second submit and replayed
// from then on, and once memory a launch may reference is freed, no graph
// made before is replayed again: capture starts over. The copies' results
// are checked on every path, so a replay that copied nothing would fail.

#include "backend/cuda/launch_queue.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device_owner_test_util.h"

namespace rowlm {
namespace {

using cuda_test::DevicePtr;
using cuda_test::StreamPtr;

// A non-blocking stream on device 0 and device memory freed at the end.
class LaunchQueueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device or driver on this machine: GPU tests skipped";
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    cudaStream_t raw = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking), cudaSuccess);
    stream.reset(raw);
  }
  void* device_memory(std::size_t bytes) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess);
    owned.emplace_back(p);
    return p;
  }
  StreamPtr stream;
  std::vector<DevicePtr> owned;
};

TEST_F(LaunchQueueTest, AFreeDropsEveryGraphAndCaptureStartsOver) {
  constexpr int kN = 1024;
  void* a = device_memory(kN * sizeof(int));
  void* b = device_memory(kN * sizeof(int));

  cuda::LaunchQueue queue(0, stream.get());
  // One step: a memset of a's bytes to `value`, a copy of a to b; then b
  // must hold that everywhere. The value is an argument: steps of one value
  // repeat one sequence.
  auto step = [&](int value) {
    queue.open();
    queue.launch("memset", &cudaMemsetAsync, a, value, std::size_t(kN) * sizeof(int));
    queue.launch("copy", &cudaMemcpyAsync, b, static_cast<const void*>(a), std::size_t(kN) * sizeof(int),
                 cudaMemcpyDeviceToDevice);
    queue.submit_and_close();
    std::vector<int> host(kN);
    ASSERT_EQ(cudaMemcpyAsync(host.data(), b, kN * sizeof(int), cudaMemcpyDeviceToHost, stream.get()), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
    const int expected = value * 0x01010101;  // memset writes the byte into each of an int's four
    for (int i = 0; i < kN; ++i) ASSERT_EQ(host[std::size_t(i)], expected) << "value " << value << ", int " << i;
  };
  auto same_step = [&] { step(6); };

  same_step();
  EXPECT_EQ(queue.stats().captured, 0) << "a sequence seen once runs eagerly";
  same_step();
  EXPECT_EQ(queue.stats().captured, 1) << "its second submit captures it";
  same_step();
  EXPECT_EQ(queue.stats().replayed, 1) << "and the third replays it";

  queue.released()->fetch_add(1);  // what the deleter of a referenced allocation does
  same_step();
  EXPECT_EQ(queue.stats().forgotten, 1);
  EXPECT_EQ(queue.stats().replayed, 1) << "no graph made before the free may replay";
  EXPECT_EQ(queue.stats().captured, 1) << "the sequence was forgotten too: it runs eagerly first";
  same_step();
  EXPECT_EQ(queue.stats().captured, 2);
  same_step();
  EXPECT_EQ(queue.stats().replayed, 2);

  // Other values still give other sequences, which never replay a graph.
  step(1);
  step(2);
  EXPECT_EQ(queue.stats().replayed, 2);
  EXPECT_EQ(queue.stats().forgotten, 1) << "no free since: the graphs stay";
}

// While profiling, every launch runs on its own (no graph is made or
// replayed, however often a sequence repeats), the results are the same, and
// each launch's GPU time is counted under its name, outside windows too.
TEST_F(LaunchQueueTest, ProfilingTimesEveryLaunchByNameAndNeverUsesAGraph) {
  constexpr std::size_t kBytes = std::size_t(64) << 20;  // big enough that a memset takes measurable time
  void* a = device_memory(kBytes);
  void* b = device_memory(kBytes);

  cuda::LaunchQueue queue(0, stream.get());
  queue.set_profiling(true);
  constexpr int kSteps = 4;
  for (int i = 0; i < kSteps; ++i) {
    queue.open();
    queue.launch("memset", &cudaMemsetAsync, a, 3, kBytes);
    queue.launch("copy", &cudaMemcpyAsync, b, static_cast<const void*>(a), kBytes, cudaMemcpyDeviceToDevice);
    queue.submit_and_close();
  }
  queue.launch("direct memset", &cudaMemsetAsync, a, 5, kBytes);  // outside a window
  EXPECT_EQ(queue.stats().captured, 0);
  EXPECT_EQ(queue.stats().replayed, 0);
  const auto& profile = queue.profile();
  ASSERT_EQ(profile.size(), 3u);
  EXPECT_EQ(profile.at("memset").launches, kSteps);
  EXPECT_EQ(profile.at("copy").launches, kSteps);
  EXPECT_EQ(profile.at("direct memset").launches, 1);
  for (const auto& [name, t] : profile) EXPECT_GT(t.seconds, 0.0) << name;

  std::vector<unsigned char> host(kBytes);
  ASSERT_EQ(cudaMemcpyAsync(host.data(), b, kBytes, cudaMemcpyDeviceToHost, stream.get()), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
  for (std::size_t i = 0; i < kBytes; i += 4097) ASSERT_EQ(host[i], 3) << "byte " << i;

  // Off again: the sequence is captured on its second submit, as ever.
  queue.set_profiling(false);
  queue.clear_profile();
  for (int i = 0; i < 2; ++i) {
    queue.open();
    queue.launch("memset", &cudaMemsetAsync, a, 3, kBytes);
    queue.submit_and_close();
  }
  EXPECT_EQ(queue.stats().captured, 1);
  EXPECT_TRUE(queue.profile().empty());
}

}  // namespace
}  // namespace rowlm
