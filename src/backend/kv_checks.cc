#include "backend/kv_checks.h"

#include <string>

#include "core/error.h"

namespace rowlm {

void check_kv_slots(const KvArena& arena, std::span<const int64_t> slots, const char* op) {
  const int64_t end = arena.blocks() * arena.block_size();
  for (int64_t s : slots)
    if (s < 0 || s >= end)
      throw Error(std::string(op) + ": slot " + std::to_string(s) + " outside the arena's " + std::to_string(end) +
                  " slots");
}

void check_kv_copies(const KvArena& arena, std::span<const KvBlockCopy> copies) {
  for (const KvBlockCopy& c : copies)
    if (c.src < 0 || c.src >= arena.blocks() || c.dst < 0 || c.dst >= arena.blocks() || c.src == c.dst)
      throw Error("kv_copy_blocks: copy " + std::to_string(c.src) + " -> " + std::to_string(c.dst) +
                  " outside the arena's " + std::to_string(arena.blocks()) + " blocks");
}

void check_attention_batch(const KvArena& arena, const AttentionBatch& batch) {
  check_attention_batch(arena, batch, [](int32_t) { return true; });
}

}  // namespace rowlm
