#pragma once
// Admission arithmetic over one KV cache, shared by the engine's own cache
// and a draft model's.

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

#include "kv/kv_cache.h"

namespace rowlm::engine {

// Bytes a new row reaching `tokens` positions needs beyond the `reusable`
// positions it attaches from the prefix cache.
std::size_t admission_need(const kv::KvCache& cache, int64_t tokens, int64_t reusable, int64_t step_tokens);

// Bytes left for a new row: what is free (cached prefixes are evictable)
// minus what the admitted rows (row, sequence length) still need to hold
// their current sequences. Their later growth is not held back in advance:
// if it outruns the pool, the engine preempts its newest row.
std::size_t admission_room(const kv::KvCache& cache, std::span<const std::pair<kv::RowId, int64_t>> rows,
                           int64_t step_tokens);

}  // namespace rowlm::engine
