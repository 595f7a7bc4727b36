#include "backend/cpu/attention.h"

#include <algorithm>
#include <memory>

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

void attend(const Kernels& kernels, ThreadPool& pool, const KvBlockLayout& layout, std::byte* const* blocks,
            const AttentionBatch& batch, const float* q, const AttentionParams& params, float* out) {
  const std::size_t T = batch.queries.size();
  if (T == 0) return;
  const AttentionLayer kl = attention_layer(layout);
  const int H = params.num_heads, kvh = layout.kv_heads, G = H / kvh, hd = layout.head.head_dim;
  // Split each kv head's query heads so that there is work for every thread;
  // the split never changes a result (each head is computed on its own).
  int per_item = G;
  const int64_t want = pool.size() == 1 ? 1 : 2 * int64_t(pool.size());
  while (per_item % 2 == 0 && int64_t(T) * kvh * (G / per_item) < want) per_item /= 2;
  const int splits = G / per_item;
  const int64_t items = int64_t(T) * kvh * splits;
  const int64_t tasks = std::min<int64_t>(items, 8 * int64_t(pool.size()));
  const std::size_t scratch_floats = attention_scratch_floats(kl, per_item);

  pool.run(tasks, [&](int64_t task) {
    const int64_t begin = items * task / tasks, end = items * (task + 1) / tasks;
    auto scratch = std::make_unique_for_overwrite<float[]>(scratch_floats);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / (int64_t(kvh) * splits);
      const int g = int(item / splits % kvh);
      const int part = int(item % splits);
      const int first_head = g * G + part * per_item;
      const KvKeyRange& range = batch.queries[std::size_t(t)];
      const float* qh = q + (t * H + first_head) * hd;
      float* oh = out + (t * H + first_head) * hd;
      if (range.hi < range.lo) {
        std::fill(oh, oh + int64_t(per_item) * hd, 0.0f);
        continue;
      }
      AttentionWork w;
      w.table = batch.tables[std::size_t(range.table)].data();
      w.blocks = blocks;
      w.lo = range.lo;
      w.hi = range.hi;
      w.kv_head = g;
      w.heads = per_item;
      w.q = qh;
      w.out = oh;
      w.scale = params.scale;
      w.softcap = params.softcap;
      kernels.attend(kl, w, scratch.get());
    }
  });
}

}  // namespace rowlm::cpu
