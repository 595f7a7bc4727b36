#include "engine/kv_room.h"

#include <algorithm>
#include <cstdint>

namespace rowlm::engine {

std::size_t admission_need(const KvAccounting& store, int64_t tokens, int64_t reusable, int64_t step_tokens) {
  const std::size_t total = store.projected_bytes(tokens, step_tokens);
  return total - std::min(total, store.projected_bytes(reusable, 1));
}

std::size_t admission_room(const KvAccounting& store, std::span<const std::pair<kv::RowId, int64_t>> rows,
                           int64_t step_tokens) {
  const std::size_t free = store.free_bytes();
  if (free == SIZE_MAX) return SIZE_MAX;  // no capacity limit
  std::size_t room = free + store.prefix_cache_bytes();
  for (const auto& [row, length] : rows) {
    const std::size_t held = store.projected_bytes(length, step_tokens);
    room -= std::min(room, held - std::min(held, store.row_bytes(row)));
  }
  return room;
}

}  // namespace rowlm::engine
