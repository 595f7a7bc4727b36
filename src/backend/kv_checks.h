#pragma once
// Argument checks every backend runs on the KV descriptions it is handed
// (kv_storage.h), before touching a byte: each throws rowlm::Error naming the
// operation and the first offending entry.

#include <span>
#include <string>

#include "backend/kv_storage.h"
#include "core/error.h"

namespace rowlm {

// Every slot lies in the arena's blocks.
void check_kv_slots(const KvArena& arena, std::span<const int64_t> slots, const char* op);
// Every copy names two different blocks of the arena.
void check_kv_copies(const KvArena& arena, std::span<const KvBlockCopy> copies);
// Every query with keys names a table of the batch, reads within it, and the
// table entries it reads are blocks of the arena.
void check_attention_batch(const KvArena& arena, const AttentionBatch& batch);
// The same, and `present(block)` holds for every block read (an arena that
// gives memory back names the blocks it can read: a block whose memory was
// given back is an error naming it). One pass over the entries either way.
template <class Present>
void check_attention_batch(const KvArena& arena, const AttentionBatch& batch, Present&& present) {
  const int bs = arena.block_size();
  const int64_t blocks = arena.blocks();
  for (const KvKeyRange& r : batch.queries) {
    if (r.hi < r.lo) continue;
    if (r.table < 0 || std::size_t(r.table) >= batch.tables.size() || r.lo < 0)
      throw Error("attention: a query names a block table outside the batch");
    const std::span<const int32_t> table = batch.tables[std::size_t(r.table)];
    if (r.hi / bs >= int64_t(table.size())) throw Error("attention: a query reads past its block table");
    for (int64_t b = r.lo / bs; b <= r.hi / bs; ++b) {
      const int32_t block = table[std::size_t(b)];
      if (block < 0 || block >= blocks)
        throw Error("attention: block table entry " + std::to_string(block) + " is not a block");
      if (!present(block))
        throw Error("attention: block " + std::to_string(block) + " was given back and not reclaimed");
    }
  }
}

}  // namespace rowlm
