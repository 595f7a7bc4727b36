#pragma once
// The CPU's argmax of a row of logits with the checks a sampler needs,
// written once: the CPU backend's argmax_rows and the sampler's greedy path
// both run it, so the two give the same token and the same refusal.

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/kernels.h"

namespace rowlm::cpu {

// The row's scan (kernels.scan_blocks) in blocks of `block` entries (a
// multiple of 16) into `blocks`, and combined: the largest value (NaN
// aside), whether any entry is NaN or +inf, whether any is finite.
RowScan scan_row(const Kernels& kernels, std::span<const float> x, int64_t block, std::vector<RowScan>& blocks);

// The first index whose value equals `max`, searching only the blocks whose
// maximum it is; 0 when none does (a row of NaN).
int64_t first_index_of(std::span<const float> x, std::span<const RowScan> blocks, int64_t block, float max);

// The row's code as backend/argmax_code.h defines it.
int32_t argmax_code(const Kernels& kernels, std::span<const float> x);

}  // namespace rowlm::cpu
