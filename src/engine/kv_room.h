#pragma once
// Admission arithmetic over one KV store, shared by the engine's own cache
// and a draft model's.
//
// The arithmetic reads the store through KvAccounting, the few questions
// admission asks of it, so that the scheduler can be tested against a fake
// store without a model or a cache.

#include <cstddef>
#include <cstdint>
#include <span>

#include "kv/kv_cache.h"

namespace rowlm::engine {

// What admission asks of a KV store; the methods mean what kv::KvCache's
// methods of the same names do (kv/kv_cache.h, "Admission counts each byte
// once").
class KvAccounting {
 public:
  virtual ~KvAccounting() = default;
  // Capacity minus used bytes; SIZE_MAX when the store has no limit.
  virtual std::size_t free_bytes() const = 0;
  // Bytes held only by the prefix cache (evictable on demand).
  virtual std::size_t prefix_cache_bytes() const = 0;
  // The room a new row for `tokens` takes: attaching its cached prefix (at
  // most max_reuse positions) and growing to `target` positions.
  virtual std::size_t admission_bytes(std::span<const int32_t> tokens, int64_t max_reuse, int64_t target,
                                      int64_t step_tokens) const = 0;
  // The room a running row may still take to reach `target` positions.
  virtual std::size_t growth_bytes(kv::RowId row, int64_t target, int64_t step_tokens) const = 0;
};

// A cache's own accounting. Holds a reference: the cache outlives it.
class CacheAccounting final : public KvAccounting {
 public:
  explicit CacheAccounting(const kv::KvCache& cache) : cache_(cache) {}
  std::size_t free_bytes() const override { return cache_.free_bytes(); }
  std::size_t prefix_cache_bytes() const override { return cache_.prefix_cache_bytes(); }
  std::size_t admission_bytes(std::span<const int32_t> tokens, int64_t max_reuse, int64_t target,
                              int64_t step_tokens) const override {
    return cache_.admission_bytes(tokens, max_reuse, target, step_tokens);
  }
  std::size_t growth_bytes(kv::RowId row, int64_t target, int64_t step_tokens) const override {
    return cache_.growth_bytes(row, target, step_tokens);
  }

 private:
  const kv::KvCache& cache_;
};

// A row admission holds room for: its KV row and the positions it may reach.
struct HeldRow {
  kv::RowId row = -1;
  int64_t target = 0;
};

// Whether a new row for `tokens` (reusing at most max_reuse cached
// positions, growing to `target`) fits beside `running`, each of which is
// held room to reach its own target: every byte is counted once, so rows
// admitted together never run out of blocks before their targets (up to
// projected_bytes' bound on window layers). Always true for a store
// without a limit.
bool admission_fits(const KvAccounting& store, std::span<const int32_t> tokens, int64_t max_reuse, int64_t target,
                    std::span<const HeldRow> running, int64_t step_tokens);

}  // namespace rowlm::engine
