// sum_chunks (chunk_sums.h): a thread per output element.

#include "backend/cuda/chunk_sums.h"

namespace rowlm::cuda {
namespace {

__global__ void sum_chunks_kernel(const float* __restrict__ partials, float* __restrict__ y, int64_t MN,
                                  int64_t chunks) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= MN) return;
  float total = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) total = __fadd_rn(total, partials[c * MN + i]);
  y[i] = total;
}

}  // namespace

void sum_chunks(const float* partials, float* y, int64_t MN, int64_t chunks, cudaStream_t stream) {
  if (MN == 0) return;
  sum_chunks_kernel<<<unsigned((MN + 255) / 256), 256, 0, stream>>>(partials, y, MN, chunks);
}

}  // namespace rowlm::cuda
