#pragma once
// The CUDA backend (built with -DROWLM_CUDA=ON): backend.h on one NVIDIA
// GPU, with activations, weights and the KV arenas in its memory.
//
// Status: the seam only. The target compiles and links against the CUDA
// runtime so that the backend's implementation is an addition; until it
// lands, make_cuda_backend reports that it is not available.

#include <memory>

#include "backend/backend.h"

namespace rowlm {

// GPUs the CUDA runtime sees (0 without a driver or device).
int cuda_device_count();

// The backend on GPU `index`; an Error naming what is missing otherwise.
std::unique_ptr<Backend> make_cuda_backend(int index, const BackendOptions& options);

}  // namespace rowlm
