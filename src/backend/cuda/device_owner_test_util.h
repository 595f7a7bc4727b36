// Owners for raw CUDA memory and streams in the CUDA backend's tests: the
// tests allocate outside the backend (to test pieces below it), and these
// free what they allocate on every path, a failed assertion's included.
// A header, not a definition per test file: the unity build puts the test
// files in one translation unit.
#pragma once

#include <cuda_runtime.h>

#include <memory>

namespace rowlm::cuda_test {

struct DeviceFree {
  void operator()(void* p) const { cudaFree(p); }
};
using DevicePtr = std::unique_ptr<void, DeviceFree>;

struct StreamDestroy {
  void operator()(CUstream_st* s) const { cudaStreamDestroy(s); }
};
using StreamPtr = std::unique_ptr<CUstream_st, StreamDestroy>;

}  // namespace rowlm::cuda_test
