#pragma once
// Error checking and device selection shared by the CUDA backend's host code.

#include <cuda_runtime.h>

#include <string>

#include "core/error.h"

namespace rowlm::cuda {

// A CUDA error as rowlm::Error naming what was being done; out of memory as
// OutOfMemory, which callers that can free memory catch.
inline void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // clear a sticky error the call left
  const std::string message = std::string("CUDA: ") + what + ": " + cudaGetErrorString(e);
  if (e == cudaErrorMemoryAllocation) throw OutOfMemory(message);
  throw Error(message);
}

// Selects `device` for the calling thread for the guard's lifetime.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    cudaGetDevice(&previous_);
    if (previous_ != device) check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceGuard() {
    int now = previous_;
    cudaGetDevice(&now);
    if (now != previous_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace rowlm::cuda
