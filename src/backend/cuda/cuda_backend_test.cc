#include "backend/cuda/cuda_backend.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace rowlm {
namespace {

// Without a GPU this says so and skips; with one, it checks what the seam
// promises: a device count, and a clear error (not a crash) for a device
// index past it.
TEST(CudaBackend, ReportsDevicesOrSkips) {
  const int count = cuda_device_count();
  EXPECT_THROW(make_cuda_backend(count + 3, BackendOptions{}), Error);
  if (count == 0) GTEST_SKIP() << "no CUDA device or driver on this machine: GPU tests skipped";
  EXPECT_GT(count, 0);
}

}  // namespace
}  // namespace rowlm
