#pragma once
// The attention kernel's per-ISA entry points (internal to the kv module).
// attention_kernel.inl is compiled once per instruction set, each copy in its
// own namespace; all copies give bitwise identical results.

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/isa.h"
#include "kv/attention.h"
#include "kv/attention_kernel_types.h"
#include "kv/kv_cache.h"

namespace rowlm::kv::detail {

using cpu::Isa;

std::size_t kernel_scratch_floats(const KernelLayer& layer, int heads);

KernelFn kernel_for(Isa isa);

// attend() on a chosen instruction-set path (tests and benchmarks compare
// them); attend() itself uses best_isa().
void attend_with_isa(const KvCache& cache, int layer, std::span<const AttentionQuery> queries,
                     const float* q, const AttentionParams& params, float* out, ThreadPool& pool, Isa isa);

}  // namespace rowlm::kv::detail
