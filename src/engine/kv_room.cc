#include "engine/kv_room.h"

#include <cstdint>

namespace rowlm::engine {

bool admission_fits(const KvAccounting& store, std::span<const int32_t> tokens, int64_t max_reuse, int64_t target,
                    std::span<const HeldRow> running, int64_t step_tokens) {
  const std::size_t free = store.free_bytes();
  if (free == SIZE_MAX) return true;  // no capacity limit
  std::size_t room = free + store.prefix_cache_bytes();
  for (const HeldRow& r : running) {
    const std::size_t growth = store.growth_bytes(r.row, r.target, step_tokens);
    if (growth > room) return false;
    room -= growth;
  }
  return store.admission_bytes(tokens, max_reuse, target, step_tokens) <= room;
}

}  // namespace rowlm::engine
