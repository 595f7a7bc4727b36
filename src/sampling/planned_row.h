#pragma once
// Backend::sample_rows on the host: one row description (backend/
// row_sampling.h, from Sampler::device_plan or draft_device_plan) carried
// out on a row in host memory with the host sampler's own code (the filters
// of logits_processor.h, Sampler::sample's walk, speculative_accept), so its
// token is the one sample() or verify_draft_token gives, by construction.
// The CPU backend's sample_rows runs it (make_backend hands it over); it is
// also the reference the GPU's kernel is tested against.
//
// Threads: any; rows are independent.

#include <cstdint>
#include <span>

#include "backend/row_sampling.h"

namespace rowlm::sampling {

// The row's token (its verdict for a verifying row, or its argmax code for
// a row sample() refuses), as row_sampling.h defines it; `stats` (needed
// when r.logprobs >= 0) gets what it reports of the raw row. The row is
// left processed.
int32_t sample_planned_row(std::span<float> row, const RowSampling& r, std::span<const RowSamplingEdit> edits,
                           std::span<const uint64_t> masks, RowLogprobStats* stats);

}  // namespace rowlm::sampling
