// KvCache::attend: resolves each query token's visible keys from the row's
// books (window, history start, key limit), checks they are stored, and hands
// the backend the block tables and key ranges.

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "kv/kv_cache.h"
#include "kv/kv_cache_impl.h"

namespace rowlm::kv {

void KvCache::attend(int layer_index, std::span<const AttentionQuery> queries, const Tensor& q,
                     const AttentionParams& params, Tensor& out) const {
  const LayerSpec& spec = layer(layer_index);
  const Impl& m = *impl_;
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

  const int64_t bs = m.bs();
  std::vector<KvKeyRange> ranges(queries.size());
  for (std::size_t t = 0; t < queries.size(); ++t) {
    const AttentionQuery& aq = queries[t];
    const Row& r = m.row(aq.row);
    const LayerRow& lr = r.layers[std::size_t(layer_index)];
    if (aq.position < 0) throw Error(where + ": negative query position for kv row " + std::to_string(aq.row));
    KvKeyRange& range = ranges[t];
    // A row restored with a limit has no history before `start`.
    range.lo = std::max(lr.start, params.window ? std::max<int64_t>(0, aq.position - params.window + 1) : 0);
    range.hi = aq.key_limit >= 0 ? std::min(aq.position, aq.key_limit - 1) : aq.position;
    if (range.hi < range.lo) continue;
    const int64_t stored_end = r.length + r.pending;
    if (range.hi >= stored_end)
      throw Error(where + ": query of kv row " + std::to_string(aq.row) + " at position " +
                  std::to_string(aq.position) + " needs key " + std::to_string(range.hi) + " but the row stores [" +
                  std::to_string(lr.first) + ", " + std::to_string(stored_end) + ")");
    if (range.lo < lr.first)
      throw Error(where + ": query of kv row " + std::to_string(aq.row) + " at position " +
                  std::to_string(aq.position) + " needs key " + std::to_string(range.lo) +
                  ", which the row no longer holds (it holds from " + std::to_string(lr.first) + ")");
    ROWLM_CHECK(range.hi / bs < int64_t(lr.blocks.size()), "block table shorter than the stored positions");
  }
  // One backend call per stretch of queries whose rows store the layer in
  // the same pool (rows that switched precision read the switch pool); a
  // token's output does not depend on the stretch it is computed in.
  std::vector<std::span<const int32_t>> tables;
  std::unordered_map<RowId, int32_t> table_of;  // row -> index into tables
  for (std::size_t t0 = 0; t0 < queries.size();) {
    const int pid = m.pool_id(m.row(queries[t0].row), layer_index);
    tables.clear();
    table_of.clear();
    std::size_t t1 = t0;
    for (; t1 < queries.size(); ++t1) {
      const Row& r = m.row(queries[t1].row);
      if (m.pool_id(r, layer_index) != pid) break;
      const auto [it, added] = table_of.try_emplace(queries[t1].row, int32_t(tables.size()));
      if (added) tables.emplace_back(r.layers[std::size_t(layer_index)].blocks);
      ranges[t1].table = it->second;
    }
    const AttentionBatch batch{tables, std::span(ranges).subspan(t0, t1 - t0)};
    if (t0 == 0 && t1 == queries.size()) {
      m.pool(pid).backend->attention(q, *m.pool(pid).arena, batch, params, out);
    } else {
      Tensor part = out.rows(int64_t(t0), int64_t(t1));
      m.pool(pid).backend->attention(q.rows(int64_t(t0), int64_t(t1)), *m.pool(pid).arena, batch, params, part);
    }
    t0 = t1;
  }
}

}  // namespace rowlm::kv
