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
  const int bs = arena.block_size();
  for (const KvKeyRange& r : batch.queries) {
    if (r.hi < r.lo) continue;
    if (r.table < 0 || std::size_t(r.table) >= batch.tables.size() || r.lo < 0)
      throw Error("attention: a query names a block table outside the batch");
    const std::span<const int32_t> table = batch.tables[std::size_t(r.table)];
    if (r.hi / bs >= int64_t(table.size())) throw Error("attention: a query reads past its block table");
    for (int64_t b = r.lo / bs; b <= r.hi / bs; ++b)
      if (table[std::size_t(b)] < 0 || table[std::size_t(b)] >= arena.blocks())
        throw Error("attention: block table entry " + std::to_string(table[std::size_t(b)]) + " is not a block");
  }
}

}  // namespace rowlm
