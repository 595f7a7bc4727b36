#pragma once
// The split/merge contract both tensor-core-precision attention kernels keep
// (attention_split.cu: scalar, any codec; attention_mma.cu: mma.sync, bf16
// KV): a query's keys are cut into kSplitPositions-position splits at fixed
// multiples, each split yields (m, l, o), and the splits are merged in
// increasing order with these explicit roundings: in registers as a block
// walks them (inline mode), or from partials in global memory by the last of
// the query's split blocks to finish (split mode). The same operations on the
// same values either way, so the mode never changes a bit.

#include <cstdint>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kv_kernels.h"

namespace rowlm::cuda {

__device__ __forceinline__ float neg_inf() { return -__int_as_float(0x7f800000); }

// Splits a query with keys [lo, hi] reads (0 when hi < lo).
__host__ __device__ __forceinline__ int64_t split_count(int64_t lo, int64_t hi) {
  return hi < lo ? 0 : hi / kSplitPositions - lo / kSplitPositions + 1;
}

// The query's running state (M, L, O) after one more split (m, l, o);
// M = −inf: nothing merged yet.
__device__ __forceinline__ float merge_scale(float from, float to) {
  return from == neg_inf() ? 0.0f : attention_exp(__fsub_rn(from, to));
}
struct MergeStep {
  float alpha, beta;  // what the running state and the split are scaled by
};
// Moves (M, L) past the split (m, l); the outputs follow with merge_output.
__device__ __forceinline__ MergeStep merge_split(float& M, float& Lsum, float m, float l) {
  const float Mn = fmaxf(M, m);
  const MergeStep step{merge_scale(M, Mn), merge_scale(m, Mn)};
  Lsum = __fadd_rn(__fmul_rn(Lsum, step.alpha), __fmul_rn(l, step.beta));
  M = Mn;
  return step;
}
__device__ __forceinline__ float merge_output(float O, float o, MergeStep step) {
  return __fadd_rn(__fmul_rn(O, step.alpha), __fmul_rn(o, step.beta));
}

// Split mode's partials: part_o [T·heads][splits][head_dim], part_ml
// [T·heads][splits][2] (m, l), where query head row th = t·heads + h.
struct SplitPartials {
  float* o = nullptr;
  float* ml = nullptr;
  int splits = 1;
};

// Feature d of query head row th's output, its n_splits partials merged in
// split order (split mode's last block).
__device__ __forceinline__ float merged_output(const SplitPartials& p, int64_t th, int64_t n_splits, int hd, int d) {
  float M = neg_inf(), Lsum = 0.0f, O = 0.0f;
  for (int64_t s = 0; s < n_splits; ++s) {
    const int64_t at = th * p.splits + s;
    const MergeStep step = merge_split(M, Lsum, __ldcg(p.ml + 2 * at), __ldcg(p.ml + 2 * at + 1));
    O = merge_output(O, __ldcg(p.o + at * hd + d), step);
  }
  return __fdiv_rn(O, Lsum);
}

// Whether this block is the last of the n_splits blocks of its column to
// have written its partials; that block leaves the column's count at zero for
// the next launch. Every thread of the block must call it (it synchronizes);
// `flag` is one int of shared memory.
__device__ __forceinline__ bool last_split_block(int* arrivals, int64_t column, int64_t n_splits, int* flag) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    int& count = arrivals[column];
    *flag = atomicAdd(&count, 1) == int(n_splits) - 1;
    if (*flag) count = 0;
  }
  __syncthreads();
  const bool last = *flag != 0;
  if (last) __threadfence();
  return last;
}

}  // namespace rowlm::cuda
