#pragma once
// The last step of a GEMM split over K (gemm_bf16, affine_mma): each output
// element is its chunks' partial sums added to 0.0f in increasing chunk
// order, whatever split ran, so the bits do not depend on the split.

#include <cuda_runtime.h>

#include <cstdint>

namespace rowlm::cuda {

// y[i] = ((0.0f + partials[0][i]) + partials[1][i]) + … for i < MN, with
// partials [chunks][MN] (device pointers; asynchronous on `stream`).
void sum_chunks(const float* partials, float* y, int64_t MN, int64_t chunks, cudaStream_t stream);

}  // namespace rowlm::cuda
