#include "engine/kv_room.h"

#include <algorithm>
#include <cstdint>

namespace rowlm::engine {

std::size_t admission_need(const kv::KvCache& cache, int64_t tokens, int64_t reusable, int64_t step_tokens) {
  const std::size_t total = cache.projected_bytes(tokens, step_tokens);
  return total - std::min(total, cache.projected_bytes(reusable, 1));
}

std::size_t admission_room(const kv::KvCache& cache, std::span<const std::pair<kv::RowId, int64_t>> rows,
                           int64_t step_tokens) {
  const std::size_t free = cache.free_bytes();
  if (free == SIZE_MAX) return SIZE_MAX;  // no capacity limit
  std::size_t room = free + cache.prefix_cache_bytes();
  for (const auto& [row, length] : rows) {
    const std::size_t held = cache.projected_bytes(length, step_tokens);
    room -= std::min(room, held - std::min(held, cache.row_bytes(row)));
  }
  return room;
}

}  // namespace rowlm::engine
