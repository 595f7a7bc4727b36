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
// [T·heads][splits][groups][2] (m, l), where query head row th = t·heads + h.
// A kernel that cuts the head's features into `groups` column groups, each
// merged by its own last block, gives each group its own (m, l): every group
// computes the same values, and each merging block reads only what the
// blocks it waited for wrote.
struct SplitPartials {
  float* o = nullptr;
  float* ml = nullptr;
  int splits = 1;
  int groups = 1;
  __host__ __device__ int64_t ml_at(int64_t th, int64_t s, int group) const {
    return 2 * ((th * splits + s) * groups + group);
  }
};

// Split mode's last block merges a row's n_splits partials in split order,
// in two passes: first one thread walks the row's (m, l) with merge_split and
// overwrites each with its MergeStep (alpha, beta), returning the final sum;
// then, once the block has synchronized, each feature applies the steps with
// merge_output and divides. The operations of inline mode's merge on the same
// values, so the same bits; the features carry no chain through exp, and
// their loads do not wait on one another.
__device__ __forceinline__ float merge_steps_in_place(const SplitPartials& p, int64_t th, int64_t n_splits, int group) {
  float M = neg_inf(), Lsum = 0.0f;
#pragma unroll 4
  for (int64_t s = 0; s < n_splits; ++s) {
    float* ml = p.ml + p.ml_at(th, s, group);
    const MergeStep step = merge_split(M, Lsum, __ldcg(ml), __ldcg(ml + 1));
    __stcg(ml, step.alpha);
    __stcg(ml + 1, step.beta);
  }
  return Lsum;
}
__device__ __forceinline__ float merged_output_by_steps(const SplitPartials& p, int64_t th, int64_t n_splits, int hd,
                                                        int d, int group, float Lsum) {
  float O = 0.0f;
#pragma unroll 4
  for (int64_t s = 0; s < n_splits; ++s) {
    const float* ml = p.ml + p.ml_at(th, s, group);
    O = merge_output(O, __ldcg(p.o + (th * p.splits + s) * hd + d), MergeStep{__ldcg(ml), __ldcg(ml + 1)});
  }
  return __fdiv_rn(O, Lsum);
}

// Split mode with many splits: the split blocks only write their partials
// (arrivals == nullptr) and this merges them in a launch of its own, a block
// per (query head row, kMergeColumns features). One thread walks the row's
// (m, l) in shared memory with merge_split; each feature then applies the
// steps in split order with merge_output and divides: the operations of
// merge_steps_in_place and merged_output_by_steps on the same values, so the
// same bits as the last-block merge, which reads every partial of a query in
// one block (at 512 splits of a 512-wide head, 8 MB through one SM).
// `lo`, `hi`: the queries' key ranges (device); rows without keys are left
// to the split kernel (it writes their zeros). Reads (m, l) of group 0.
// Merge apart when a launch's split count is above kMergeApartSplits and at
// most kMergeApartMostSplits (its steps then fit in shared memory).
inline constexpr int kMergeApartSplits = 16, kMergeApartMostSplits = 8192;
inline bool merge_apart(int splits) { return splits > kMergeApartSplits && splits <= kMergeApartMostSplits; }
void attention_merge_partials(const SplitPartials& part, const int64_t* lo, const int64_t* hi, int64_t T, int heads,
                              int head_dim, float* out, cudaStream_t stream);

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
