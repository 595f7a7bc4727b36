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
#include <utility>

#include "kv/kv_cache.h"

namespace rowlm::engine {

// What admission asks of a KV store; the methods mean what kv::KvCache's
// methods of the same names do (kv/kv_cache.h, "Memory accounting for
// admission" and "Prefix cache").
class KvAccounting {
 public:
  virtual ~KvAccounting() = default;
  // An upper bound on the bytes a row reaching `tokens` positions holds if it
  // appends at most `step_tokens` between settle points.
  virtual std::size_t projected_bytes(int64_t tokens, int64_t step_tokens) const = 0;
  // Capacity minus used bytes; SIZE_MAX when the store has no limit.
  virtual std::size_t free_bytes() const = 0;
  // Bytes held only by the prefix cache (evictable on demand).
  virtual std::size_t prefix_cache_bytes() const = 0;
  // Bytes of the blocks the row references.
  virtual std::size_t row_bytes(kv::RowId row) const = 0;
  // The length of the longest cached prefix of `tokens` (at most max_tokens)
  // a new row could attach.
  virtual int64_t match_prefix(std::span<const int32_t> tokens, int64_t max_tokens) const = 0;
};

// A cache's own accounting. Holds a reference: the cache outlives it.
class CacheAccounting final : public KvAccounting {
 public:
  explicit CacheAccounting(const kv::KvCache& cache) : cache_(cache) {}
  std::size_t projected_bytes(int64_t tokens, int64_t step_tokens) const override {
    return cache_.projected_bytes(tokens, step_tokens);
  }
  std::size_t free_bytes() const override { return cache_.free_bytes(); }
  std::size_t prefix_cache_bytes() const override { return cache_.prefix_cache_bytes(); }
  std::size_t row_bytes(kv::RowId row) const override { return cache_.row_bytes(row); }
  int64_t match_prefix(std::span<const int32_t> tokens, int64_t max_tokens) const override {
    return cache_.match_prefix(tokens, max_tokens);
  }

 private:
  const kv::KvCache& cache_;
};

// Bytes a new row reaching `tokens` positions needs beyond the `reusable`
// positions it attaches from the prefix cache.
std::size_t admission_need(const KvAccounting& store, int64_t tokens, int64_t reusable, int64_t step_tokens);

// Bytes left for a new row: what is free (cached prefixes are evictable)
// minus what the admitted rows (row, sequence length) still need to hold
// their current sequences. Their later growth is not held back in advance:
// if it outruns the pool, the engine preempts its newest row.
std::size_t admission_room(const KvAccounting& store, std::span<const std::pair<kv::RowId, int64_t>> rows,
                           int64_t step_tokens);

}  // namespace rowlm::engine
