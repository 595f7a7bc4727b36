#pragma once
// Attention of query tokens over the K/V blocks of their own rows.
//
// Keys are reduced in a fixed order of fixed-size splits that depend only
// on the row's own positions (splits at multiples of the block size), so a
// token's output is bitwise the same whatever other rows exist, where its
// blocks sit in the pool, or in what order rows joined. Within a split the
// block's keys are dequantized into a small f32 tile (never a whole row),
// scored in a fixed lane order, and folded into an online softmax in
// increasing position order. The result is also bitwise the same for any
// thread count and on every instruction-set path (portable, AVX2, AVX-512):
// one kernel source is compiled for each, with every rounding written out.
//
// Donor views. A layer may attend over another storage layer: KV-shared
// layers pass their donor's storage layer index, and a draft model passes
// the target model's cache, the target's row ids and `key_limit` = the
// target's length, so it reads the target's rows through the same block
// tables without copying anything.

#include <cstdint>
#include <span>

#include "core/thread_pool.h"
#include "kv/kv_cache.h"

namespace rowlm::kv {

// Which keys a query token sees: its row's positions j with
// max(0, position - window + 1) <= j <= position (window 0 = unbounded),
// and j < key_limit when key_limit >= 0, read from one storage layer. The
// keys must be stored (written in this or an earlier step); a query that
// sees no key at all gets a zero output.
struct AttentionQuery {
  RowId row = 0;
  int64_t position = 0;
  int64_t key_limit = -1;
};

struct AttentionParams {
  int num_heads = 0;      // query head h reads KV head h / (num_heads / kv_heads)
  int head_dim = 0;
  int window = 0;         // 0 = full causal
  float scale = 1.0f;     // multiplies q·k
  float softcap = 0.0f;   // 0 = off; else scores = softcap · tanh(scores / softcap)
};

// q and out are [queries.size(), num_heads, head_dim] f32. Throws rowlm::Error
// (before computing anything) for an unknown row or layer, mismatched
// geometry, a window wider than the storage layer keeps, or keys not stored.
void attend(const KvCache& cache, int layer, std::span<const AttentionQuery> queries,
            const float* q, const AttentionParams& params, float* out, ThreadPool& pool);

}  // namespace rowlm::kv
