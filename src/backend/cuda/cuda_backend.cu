#include "backend/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <string>

#include "core/error.h"

namespace rowlm {

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

std::unique_ptr<Backend> make_cuda_backend(int index, const BackendOptions&) {
  const int count = cuda_device_count();
  if (index >= count)
    throw Error("device 'cuda:" + std::to_string(index) + "': " +
                (count == 0 ? std::string("no CUDA device (or driver) is available")
                            : "only " + std::to_string(count) + " CUDA device(s) are present"));
  throw Error("device 'cuda:" + std::to_string(index) + "': the CUDA backend's operations are not implemented yet");
}

}  // namespace rowlm
