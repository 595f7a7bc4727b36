#pragma once
// The CUDA kernel of Backend::sample_rows (backend/row_sampling.h): a block
// per sampled row performs the sampler's steps in the sampler's arithmetic,
// and for a row that verifies a draft, speculative_accept's.

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/row_sampling.h"

namespace rowlm::cuda {

// rows[j] samples row rows[j].row of x ([*, V] f32, processed in place, or
// in copies[j] ([n, V]) for a row asking for logprobs) into tokens[j], and
// such a row's stats into stats[j]; edits are the rows' edit lists;
// masks the rows' grammar masks; block_sums is scratch of n · ceil(V / 1024) floats, lane_sums of as many
// doubles (null when no row verifies a draft). copies and stats may be null when no row asks for logprobs.
void sample_rows(float* x, int64_t V, const RowSampling* rows, int64_t n, const RowSamplingEdit* edits,
                 const uint64_t* masks, float* block_sums, double* lane_sums, float* copies, int32_t* tokens,
                 RowLogprobStats* stats, cudaStream_t stream);

}  // namespace rowlm::cuda
