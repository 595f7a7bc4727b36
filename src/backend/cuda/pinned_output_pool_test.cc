// The pinned output pool against its contract (pinned_output_pool.h): sizes
// round up by at most a quarter, a dropped buffer is handed out again, at
// most kKeep free buffers stay (the largest), and an owner may outlive the
// pool.

#include "backend/cuda/pinned_output_pool.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/cuda_backend.h"

namespace rowlm {
namespace {

using cuda::PinnedOutputPool;

TEST(PinnedOutputPool, SizeClassesHoldTheRequestAndWasteAtMostAQuarter) {
  std::mt19937_64 rng(5);
  std::vector<std::size_t> sizes = {0, 1, 65535, 65536, 65537, std::size_t(1) << 28, (std::size_t(1) << 28) + 1,
                                    268435456 + 12345};
  for (int i = 0; i < 2000; ++i) sizes.push_back(rng() % (std::size_t(1) << 34));
  for (std::size_t b : sizes) {
    const std::size_t c = PinnedOutputPool::size_class(b);
    EXPECT_GE(c, b);
    EXPECT_GE(c, std::size_t(65536));
    if (b > 65536) {
      EXPECT_LE(double(c), 1.25 * double(b)) << b;
    }
    EXPECT_EQ(PinnedOutputPool::size_class(c), c) << "a class is its own class: " << b;
  }
}

TEST(PinnedOutputPool, ADroppedBufferIsReusedAndAtMostKKeepStay) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device or driver on this machine: GPU tests skipped";
  auto pool = PinnedOutputPool::create();
  void* first = nullptr;
  {
    auto a = pool->take(1000000);
    first = a.get();
    std::memset(a.get(), 7, 1000000);  // host memory, writable in full
  }
  EXPECT_EQ(pool->free_buffers(), 1u);
  {
    auto again = pool->take(999000);  // the same class
    EXPECT_EQ(again.get(), first);
    auto other = pool->take(1000000);  // the first is held: a new one
    EXPECT_NE(other.get(), first);
  }
  EXPECT_EQ(pool->free_buffers(), 2u);
  // A request of a much smaller class does not take a large buffer.
  auto small = pool->take(1000);
  EXPECT_NE(small.get(), first);
  small.reset();

  std::vector<std::shared_ptr<void>> held;
  for (int i = 0; i < int(PinnedOutputPool::kKeep) + 3; ++i) held.push_back(pool->take(std::size_t(1 + i) << 20));
  held.clear();
  EXPECT_EQ(pool->free_buffers(), PinnedOutputPool::kKeep);
  // The largest were kept: the largest request of the loop is served from the pool.
  const std::size_t largest = PinnedOutputPool::size_class(std::size_t(PinnedOutputPool::kKeep + 3) << 20);
  EXPECT_GE(pool->free_bytes(), largest);

  auto outlives = pool->take(4096);
  pool.reset();  // the owner's release then frees its buffer (ASan: no leak, no use after free)
  outlives.reset();
}

}  // namespace
}  // namespace rowlm
