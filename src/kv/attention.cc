#include "kv/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "kv/attention_kernel.h"
#include "kv/codec.h"
#include "kv/kv_cache_impl.h"

namespace rowlm::kv {
namespace detail {

KernelFn kernel_for(Isa isa) {
  if (!cpu::isa_supported(isa))
    throw Error("attention: the " + std::string(cpu::isa_name(isa)) + " path is not available on this CPU");
  switch (isa) {
    case Isa::Scalar: return attend_portable;
    case Isa::Avx2: return attend_avx2;
    case Isa::Avx512: return attend_avx512;
  }
  return attend_portable;
}

std::size_t kernel_scratch_floats(const KernelLayer& L, int heads) {
  const std::size_t stride = std::size_t(L.chunks) * 16;
  return 16 + std::size_t(L.hd4) * stride + std::size_t(L.block_size) * std::size_t(L.hd16) +
         std::size_t(heads) * std::size_t(L.hd4) + std::size_t(heads) * std::size_t(L.hd16) + 2 * stride +
         2 * std::size_t(heads) + 16;
}

namespace {

KernelLayer kernel_layer(const LayerPool& p) {
  const BlockLayout& bl = p.layout;
  KernelLayer k;
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

struct ResolvedQuery {
  const int32_t* table = nullptr;
  int64_t lo = 0, hi = -1;  // hi < lo: no keys
};

}  // namespace

void attend_with_isa(const KvCache& cache, int layer_index, std::span<const AttentionQuery> queries,
                     const float* q, const AttentionParams& params, float* out, ThreadPool& pool, Isa isa) {
  const KernelFn kernel = kernel_for(isa);
  const LayerSpec& spec = cache.layer(layer_index);
  const KvCache::Impl& m = cache.impl();
  const LayerPool& lp = m.pools[std::size_t(layer_index)];
  const std::string where = "attention over KV layer " + std::to_string(layer_index);
  if (params.head_dim != spec.head_dim)
    throw Error(where + ": head_dim " + std::to_string(params.head_dim) + " but the layer stores " +
                std::to_string(spec.head_dim));
  if (params.num_heads <= 0 || params.num_heads % spec.kv_heads != 0)
    throw Error(where + ": " + std::to_string(params.num_heads) + " query heads is not a positive multiple of " +
                std::to_string(spec.kv_heads) + " KV heads");
  if (params.window < 0) throw Error(where + ": negative window");
  if (spec.window > 0 && (params.window == 0 || params.window > spec.window))
    throw Error(where + ": window " + (params.window ? std::to_string(params.window) : std::string("full")) +
                " is wider than the " + std::to_string(spec.window) + " positions the layer keeps");
  if (!std::isfinite(params.scale)) throw Error(where + ": non-finite scale");
  if (!(params.softcap >= 0.0f) || !std::isfinite(params.softcap)) throw Error(where + ": softcap must be >= 0");
  if (queries.empty()) return;
  if (!q || !out) throw Error(where + ": null q or out");

  const int64_t bs = m.bs();
  std::vector<ResolvedQuery> resolved(queries.size());
  for (std::size_t t = 0; t < queries.size(); ++t) {
    const AttentionQuery& aq = queries[t];
    const Row& r = m.row(aq.row);
    const LayerRow& lr = r.layers[std::size_t(layer_index)];
    if (aq.position < 0) throw Error(where + ": negative query position for kv row " + std::to_string(aq.row));
    ResolvedQuery& rq = resolved[t];
    rq.table = lr.blocks.data();
    // A row restored with a limit has no history before `start`.
    rq.lo = std::max(lr.start, params.window ? std::max<int64_t>(0, aq.position - params.window + 1) : 0);
    rq.hi = aq.key_limit >= 0 ? std::min(aq.position, aq.key_limit - 1) : aq.position;
    if (rq.hi < rq.lo) continue;
    const int64_t stored_end = r.length + r.pending;
    if (rq.hi >= stored_end)
      throw Error(where + ": query of kv row " + std::to_string(aq.row) + " at position " +
                  std::to_string(aq.position) + " needs key " + std::to_string(rq.hi) + " but the row stores [" +
                  std::to_string(lr.first) + ", " + std::to_string(stored_end) + ")");
    if (rq.lo < lr.first)
      throw Error(where + ": query of kv row " + std::to_string(aq.row) + " at position " +
                  std::to_string(aq.position) + " needs key " + std::to_string(rq.lo) +
                  ", which the row no longer holds (it holds from " + std::to_string(lr.first) + ")");
    ROWLM_CHECK(rq.hi / bs < int64_t(lr.blocks.size()), "block table shorter than the stored positions");
  }

  const KernelLayer kl = kernel_layer(lp);
  const int H = params.num_heads, kvh = spec.kv_heads, G = H / kvh, hd = spec.head_dim;
  // Split each kv head's query heads so that there is work for every thread;
  // the split never changes a result (each head is computed on its own).
  int per_item = G;
  const int64_t want = pool.size() == 1 ? 1 : 2 * int64_t(pool.size());
  while (per_item % 2 == 0 && int64_t(queries.size()) * kvh * (G / per_item) < want) per_item /= 2;
  const int splits = G / per_item;
  const int64_t items = int64_t(queries.size()) * kvh * splits;
  const int64_t tasks = std::min<int64_t>(items, 8 * int64_t(pool.size()));
  const std::size_t scratch_floats = kernel_scratch_floats(kl, per_item);
  std::byte* const* blocks = lp.data.data();

  pool.run(tasks, [&](int64_t task) {
    const int64_t begin = items * task / tasks, end = items * (task + 1) / tasks;
    auto scratch = std::make_unique_for_overwrite<float[]>(scratch_floats);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / (int64_t(kvh) * splits);
      const int g = int(item / splits % kvh);
      const int part = int(item % splits);
      const int first_head = g * G + part * per_item;
      const ResolvedQuery& rq = resolved[std::size_t(t)];
      const float* qh = q + (t * H + first_head) * hd;
      float* oh = out + (t * H + first_head) * hd;
      if (rq.hi < rq.lo) {
        std::fill(oh, oh + int64_t(per_item) * hd, 0.0f);
        continue;
      }
      KernelWork w;
      w.table = rq.table;
      w.blocks = blocks;
      w.lo = rq.lo;
      w.hi = rq.hi;
      w.kv_head = g;
      w.heads = per_item;
      w.q = qh;
      w.out = oh;
      w.scale = params.scale;
      w.softcap = params.softcap;
      kernel(kl, w, scratch.get());
    }
  });
}

}  // namespace detail

void attend(const KvCache& cache, int layer, std::span<const AttentionQuery> queries, const float* q,
            const AttentionParams& params, float* out, ThreadPool& pool) {
  detail::attend_with_isa(cache, layer, queries, q, params, out, pool, cpu::isa_from_env());
}

}  // namespace rowlm::kv
