#pragma once
// Attention of query tokens over the K/V blocks of their own rows.
//
// Keys are reduced in a fixed order of fixed-size splits that depend only
// on the row's own positions (splits at multiples of the block size), so a
// token's output is bitwise the same whatever other rows exist, where its
// blocks sit in the pool, or in what order rows joined.

#include <cstdint>
#include <span>

#include "core/thread_pool.h"
#include "kv/kv_cache.h"

namespace rowlm::kv {

// Which keys a query token sees: its row's positions j with
// max(0, position - window + 1) <= j <= position (window 0 = unbounded),
// read from one storage layer.
struct AttentionQuery {
  RowId row = 0;
  int64_t position = 0;
};

struct AttentionParams {
  int num_heads = 0;      // query head h reads KV head h / (num_heads / kv_heads)
  int head_dim = 0;
  int window = 0;         // 0 = full causal
  float scale = 1.0f;     // multiplies q·k
  float softcap = 0.0f;   // 0 = off; else scores = softcap · tanh(scores / softcap)
};

// q and out are [queries.size(), num_heads, head_dim] f32.
void attend(const KvCache& cache, int layer, std::span<const AttentionQuery> queries,
            const float* q, const AttentionParams& params, float* out, ThreadPool& pool);

}  // namespace rowlm::kv
