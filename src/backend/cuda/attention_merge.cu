// attention_merge_partials (attention_merge.cuh): split mode's merge in a
// launch of its own, for queries with many splits.

#include <algorithm>

#include "backend/cuda/attention_merge.cuh"

namespace rowlm::cuda {
namespace {

constexpr int kMergeColumns = 64;  // features per block (a thread each)

// Shared memory: alpha [splits], beta [splits] (first m and l), Lsum.
__global__ void __launch_bounds__(kMergeColumns) merge_partials_kernel(SplitPartials p, const int64_t* lo,
                                                                         const int64_t* hi, int heads, int hd,
                                                                         float* out) {
  allow_dependents();
  extern __shared__ float merge_smem[];
  float* alpha = merge_smem;
  float* beta = merge_smem + p.splits;
  float* lsum = beta + p.splits;
  const int64_t th = blockIdx.x, t = th / heads;
  const int64_t n = split_count(lo[t], hi[t]);
  if (n == 0) return;
  const int tid = int(threadIdx.x);
  for (int64_t s = tid; s < n; s += kMergeColumns) {
    const float* ml = p.ml + p.ml_at(th, s, 0);
    alpha[s] = __ldcg(ml);
    beta[s] = __ldcg(ml + 1);
  }
  __syncthreads();
  if (tid == 0) {
    float M = neg_inf(), L = 0.0f;
    for (int64_t s = 0; s < n; ++s) {
      const MergeStep step = merge_split(M, L, alpha[s], beta[s]);
      alpha[s] = step.alpha;
      beta[s] = step.beta;
    }
    *lsum = L;
  }
  __syncthreads();
  const int d = int(blockIdx.y) * kMergeColumns + tid;
  if (d >= hd) return;
  const float* o = p.o + th * p.splits * hd + d;
  float O = 0.0f;
#pragma unroll 8
  for (int64_t s = 0; s < n; ++s) O = merge_output(O, __ldcg(o + s * hd), MergeStep{alpha[s], beta[s]});
  out[th * hd + d] = __fdiv_rn(O, *lsum);
}

}  // namespace

void attention_merge_partials(const SplitPartials& part, const int64_t* lo, const int64_t* hi, int64_t T, int heads,
                              int head_dim, float* out, cudaStream_t stream) {
  if (T == 0) return;
  const std::size_t smem = (2 * std::size_t(part.splits) + 1) * sizeof(float);
  if (smem > 48 * 1024)
    cudaFuncSetAttribute(merge_partials_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  const dim3 grid(unsigned(T * heads), unsigned((head_dim + kMergeColumns - 1) / kMergeColumns));
  merge_partials_kernel<<<grid, kMergeColumns, smem, stream>>>(part, lo, hi, heads, head_dim, out);
}

}  // namespace rowlm::cuda
