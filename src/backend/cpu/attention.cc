#include "backend/cpu/attention.h"

#include <algorithm>

namespace rowlm::cpu {

AttentionLayer attention_layer(const KvBlockLayout& bl) {
  AttentionLayer k;
  k.codec = bl.head.codec;
  k.head_dim = bl.head.head_dim;
  k.hd4 = (k.head_dim + 3) / 4 * 4;
  k.hd16 = (k.head_dim + 15) / 16 * 16;
  k.bits = bl.head.bits;
  k.group_size = bl.head.group_size;
  k.groups = bl.head.groups;
  k.block_size = bl.block_size;
  k.chunks = (bl.block_size + 15) / 16;
  k.head_bytes = bl.head.head_bytes;
  k.value_bytes = bl.head.value_bytes;
  k.k_head_bytes = bl.k_head_bytes;
  k.k_scales_offset = bl.k_scales_offset();
  k.k_biases_offset = bl.k_biases_offset();
  k.k_bytes = bl.k_bytes;
  k.v_head_bytes = bl.v_head_bytes;
  return k;
}

std::size_t attention_scratch_floats(const AttentionLayer& L, int heads) {
  const std::size_t stride = std::size_t(L.chunks) * 16;
  return 16 + std::size_t(L.hd4) * stride + std::size_t(L.block_size) * std::size_t(L.hd16) +
         std::size_t(heads) * std::size_t(L.hd4) + std::size_t(heads) * std::size_t(L.hd16) + 2 * stride +
         2 * std::size_t(heads) + 16;
}

std::size_t attention_tile_floats(const AttentionLayer& L) {
  return std::size_t(L.hd4) * std::size_t(L.chunks) * 16 + std::size_t(L.block_size) * std::size_t(L.hd16);
}

std::size_t attention_fold_state_floats(const AttentionLayer& L, int heads) {
  const std::size_t n = std::size_t(heads) * std::size_t(L.hd4 + L.hd16) + 2 * std::size_t(L.chunks) * 16 +
                        2 * std::size_t(heads);
  return (n + 15) / 16 * 16;  // keeps every item's state 64-byte aligned
}

namespace {

// How a batch is cut into work items: query token × kv head × `splits`
// groups of `per_item` query heads.
struct Split {
  int64_t T = 0;
  int H = 0, kvh = 0, G = 0, hd = 0;
  int per_item = 0, splits = 0;
  int64_t items() const { return T * kvh * splits; }
};

// The tiles of one window, all (query, kv head) pairs together, take about
// this many bytes (a window holds one block at least); two windows are live.
// Bounded so that a long row never needs tiles for all its blocks.
constexpr std::size_t kWindowTileBytes = std::size_t(1) << 20;

// Key positions from which a lone (token, kv head) pair's query heads are
// split over threads.
constexpr int64_t kMinSplitPositions = 512;

void one_phase(const Kernels& kernels, ThreadPool& pool, AttentionScratch& scratch, const AttentionLayer& kl,
               std::byte* const* blocks, const AttentionBatch& batch, const float* q, const AttentionParams& params,
               const Split& s, float* out) {
  const int64_t items = s.items();
  const int64_t tasks = std::min<int64_t>(items, 8 * int64_t(pool.size()));
  const std::size_t per_task = (attention_scratch_floats(kl, s.per_item) + 15) / 16 * 16;
  float* base = scratch.floats(per_task * std::size_t(tasks));
  pool.run(tasks, [&](int64_t task) {
    const int64_t begin = items * task / tasks, end = items * (task + 1) / tasks;
    float* mine = base + per_task * std::size_t(task);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / (int64_t(s.kvh) * s.splits);
      const int g = int(item / s.splits % s.kvh);
      const int part = int(item % s.splits);
      const int first_head = g * s.G + part * s.per_item;
      const KvKeyRange& range = batch.queries[std::size_t(t)];
      float* oh = out + (t * s.H + first_head) * s.hd;
      if (range.hi < range.lo) {
        std::fill(oh, oh + int64_t(s.per_item) * s.hd, 0.0f);
        continue;
      }
      AttentionWork w;
      w.table = batch.tables[std::size_t(range.table)].data();
      w.blocks = blocks;
      w.lo = range.lo;
      w.hi = range.hi;
      w.kv_head = g;
      w.heads = s.per_item;
      w.q = q + (t * s.H + first_head) * s.hd;
      w.out = oh;
      w.scale = params.scale;
      w.softcap = params.softcap;
      kernels.attention.attend(kl, w, mine);
    }
  });
}

// Windows of `window` blocks of every query (counted from its first block).
// Parallel region r folds window r - 1 from its tiles (one item per group of
// heads) and converts window r into the other half of the double buffer (one
// item per block), so each conversion is done once and a window costs one
// region. Fold items come first: they are the long ones.
void two_phase(const Kernels& kernels, ThreadPool& pool, AttentionScratch& scratch, const AttentionLayer& kl,
               std::byte* const* blocks, const AttentionBatch& batch, const float* q, const AttentionParams& params,
               const Split& s, float* out) {
  const int64_t bs = kl.block_size;
  const int64_t pairs = s.T * s.kvh;
  int64_t most_blocks = 0;
  for (const KvKeyRange& r : batch.queries)
    if (r.hi >= r.lo) most_blocks = std::max(most_blocks, r.hi / bs - r.lo / bs + 1);
  const std::size_t tile_floats = attention_tile_floats(kl);
  const int64_t window = std::clamp<int64_t>(
      int64_t(kWindowTileBytes / (tile_floats * sizeof(float) * std::size_t(pairs))), 1, std::max<int64_t>(most_blocks, 1));
  const int64_t windows = (most_blocks + window - 1) / window;
  const std::size_t half = tile_floats * std::size_t(window * pairs);
  const std::size_t state_floats = attention_fold_state_floats(kl, s.per_item);
  float* tiles = scratch.floats(2 * half + state_floats * std::size_t(s.items()));
  float* states = tiles + 2 * half;

  for (int64_t t = 0; t < s.T; ++t) {
    const KvKeyRange& range = batch.queries[std::size_t(t)];
    if (range.hi < range.lo) std::fill(out + t * s.H * s.hd, out + (t + 1) * s.H * s.hd, 0.0f);
  }
  const int64_t folds = s.items(), converts = pairs * window;
  for (int64_t r = 0; r <= windows; ++r) {
    const int64_t fold_items = r > 0 ? folds : 0, tile_items = r < windows ? converts : 0;
    pool.run(fold_items + tile_items, [&](int64_t i) {
      if (i < fold_items) {
        const int64_t w = r - 1;
        const int64_t t = i / (int64_t(s.kvh) * s.splits);
        const int g = int(i / s.splits % s.kvh);
        const int part = int(i % s.splits);
        const KvKeyRange& range = batch.queries[std::size_t(t)];
        const int64_t first = range.lo / bs + w * window, last = std::min(first + window - 1, range.hi / bs);
        if (range.hi < range.lo || first > last) return;
        const int first_head = g * s.G + part * s.per_item;
        AttentionFoldWork f;
        f.tiles = tiles + std::size_t(w % 2) * half + std::size_t((t * s.kvh + g) * window) * tile_floats;
        f.tile_stride = tile_floats;
        f.first_block = first;
        f.last_block = last;
        f.lo = range.lo;
        f.hi = range.hi;
        f.heads = s.per_item;
        f.q = q + (t * s.H + first_head) * s.hd;
        f.out = out + (t * s.H + first_head) * s.hd;
        f.state = states + std::size_t(i) * state_floats;
        f.scale = params.scale;
        f.softcap = params.softcap;
        kernels.attention.fold(kl, f);
        return;
      }
      const int64_t j = i - fold_items, pair = j / window;
      const KvKeyRange& range = batch.queries[std::size_t(pair / s.kvh)];
      const int64_t b = range.lo / bs + r * window + j % window;
      if (range.hi < range.lo || b > range.hi / bs) return;
      AttentionTileWork w;
      w.bytes = blocks[batch.tables[std::size_t(range.table)][std::size_t(b)]];
      w.block = b;
      w.lo = range.lo;
      w.hi = range.hi;
      w.kv_head = int(pair % s.kvh);
      w.tile = tiles + std::size_t(r % 2) * half + std::size_t(j) * tile_floats;
      kernels.attention.tile(kl, w);
    });
  }
}

}  // namespace

void attend(const Kernels& kernels, ThreadPool& pool, AttentionScratch& scratch, const KvBlockLayout& layout,
            std::byte* const* blocks, const AttentionBatch& batch, const float* q, const AttentionParams& params,
            float* out) {
  Split s;
  s.T = int64_t(batch.queries.size());
  if (s.T == 0) return;
  const AttentionLayer kl = attention_layer(layout);
  s.H = params.num_heads;
  s.kvh = layout.kv_heads;
  s.G = s.H / s.kvh;
  s.hd = layout.head.head_dim;
  // Split each kv head's query heads so that there is work for every thread;
  // the split never changes a result (each head is computed on its own).
  // Not a lone pair's heads over a short key range: there the parallel
  // regions and the tiles' traffic cost more than the folds they share out
  // (a lone row's 8 heads on two Zen 4 threads, unsplit against split:
  // 10.5 against 15.9 µs at 64 positions, 73 against 86 at 512, 295
  // against 341 at 2,048; on the 16-core Xeon host the split took 39-53 µs
  // a layer at 64-72 positions, more with more threads: docs/perf.md,
  // session 46). From kMinSplitPositions on the split stays, for the 16
  // cores where it may pay (not measured there).
  s.per_item = s.G;
  const bool short_lone_pair = s.T * s.kvh == 1 && batch.queries[0].hi - batch.queries[0].lo + 1 < kMinSplitPositions;
  const int64_t want = pool.size() == 1 || short_lone_pair ? 1 : 2 * int64_t(pool.size());
  while (s.per_item % 2 == 0 && s.T * s.kvh * (s.G / s.per_item) < want) s.per_item /= 2;
  s.splits = s.G / s.per_item;
  // Split heads would each convert every block again in one phase.
  if (s.splits > 1) two_phase(kernels, pool, scratch, kl, blocks, batch, q, params, s, out);
  else one_phase(kernels, pool, scratch, kl, blocks, batch, q, params, s, out);
}

}  // namespace rowlm::cpu
