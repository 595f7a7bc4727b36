#include "backend/cpu/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "core/asan.h"

namespace rowlm::cpu {
namespace {

TEST(HugePages, StartOnA2MiBBoundaryAndHoldWhatWasAskedFor) {
  for (std::size_t bytes : {std::size_t(1), std::size_t(1000), std::size_t(3) << 20}) {
    std::shared_ptr<std::byte> p = allocate_huge_pages(bytes, "test");
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p.get()) % (std::uintptr_t(2) << 20), 0u);
    std::memset(p.get(), 0xA5, bytes);
    EXPECT_EQ(p.get()[bytes - 1], std::byte{0xA5});
    EXPECT_EQ(p.get()[0], std::byte{0xA5});
  }
}

// Under AddressSanitizer the rest of the mapping is poisoned, so a kernel
// that runs past a workspace chunk or a weight copy is reported, as it was
// when these came from malloc.
TEST(HugePagesDeathTest, ReadingPastTheLastCacheLineIsReportedUnderAsan) {
  if (!kAsan) GTEST_SKIP() << "built without AddressSanitizer";
  std::shared_ptr<std::byte> p = allocate_huge_pages(1000, "test");
  volatile std::byte* bytes = p.get();
  const std::byte last = bytes[1023];  // within the last cache line: allowed
  EXPECT_EQ(last, std::byte{0});
  EXPECT_DEATH({ (void)bytes[1024]; }, "use-after-poison");
}

}  // namespace
}  // namespace rowlm::cpu
