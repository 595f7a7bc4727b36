#pragma once
// Argument checks every backend runs on the KV descriptions it is handed
// (kv_storage.h), before touching a byte: each throws rowlm::Error naming the
// operation and the first offending entry.

#include <span>

#include "backend/kv_storage.h"

namespace rowlm {

// Every slot lies in the arena's blocks.
void check_kv_slots(const KvArena& arena, std::span<const int64_t> slots, const char* op);
// Every copy names two different blocks of the arena.
void check_kv_copies(const KvArena& arena, std::span<const KvBlockCopy> copies);
// Every query with keys names a table of the batch, reads within it, and the
// table entries it reads are blocks of the arena.
void check_attention_batch(const KvArena& arena, const AttentionBatch& batch);

}  // namespace rowlm
