// KvCache's admission accounting: what a new or running row takes of the
// room (free blocks and blocks only the prefix cache holds), counting every
// block once. kv_cache.h says what each function promises.

#include <algorithm>

#include "core/error.h"
#include "kv/kv_cache.h"
#include "kv/kv_cache_impl.h"

namespace rowlm::kv {

std::size_t KvCache::admission_bytes(std::span<const int32_t> tokens, int64_t max_reuse, int64_t target,
                                     int64_t step_tokens) const {
  if (max_reuse < 0) throw Error("admission_bytes: negative max_reuse");
  (void)projected_bytes(target, step_tokens);  // checks target and step_tokens
  const Impl& m = *impl_;
  const int64_t B = m.bs();
  const std::vector<int32_t> chain = m.walk(tokens);
  const int64_t L = m.usable_prefix(chain, m.reuse_limit(std::min<int64_t>(max_reuse, int64_t(tokens.size()))));
  std::size_t total = 0;
  for (std::size_t l = 0; l < m.pools.size(); ++l) {
    const LayerPool& p = m.pools[l];
    int64_t kept = 0;  // attached whole blocks another row holds: outside the room, and kept
    if (p.spec.window == 0)
      for (int64_t b = 0; b < L / B; ++b) {
        const int32_t blk = m.entries[std::size_t(chain[std::size_t(b)])].blocks[l];
        if (p.refs[std::size_t(blk)] > 1) ++kept;  // the cache's reference and a row's
      }
    total += m.projected_layer_bytes(int(l), target, step_tokens, false, kept);
  }
  return total;
}

std::size_t KvCache::growth_bytes(RowId id, int64_t target, int64_t step_tokens) const {
  (void)projected_bytes(target, step_tokens);  // checks target and step_tokens
  const Impl& m = *impl_;
  const Row& r = m.row(id);
  if (target <= r.length) return 0;
  const int64_t B = m.bs();
  std::size_t total = 0;
  for (std::size_t l = 0; l < m.pools.size(); ++l) {
    const LayerPool& p = m.pool(m.pool_id(r, int(l)));
    const auto& blocks = r.layers[l].blocks;
    int64_t kept = 0;
    for (std::size_t b = 0; b < blocks.size(); ++b) {
      const int32_t blk = blocks[b];
      if (blk == kNoBlock) continue;
      const int32_t refs = p.refs[std::size_t(blk)];
      const int32_t others = refs - 1 - (p.cache_entry[std::size_t(blk)] >= 0 ? 1 : 0);  // other rows holding it
      const bool written_later = int64_t(b) >= r.length / B;  // its next write lands here
      if (written_later && refs > 1) continue;                // copied on that write
      if (p.spec.window && others > 0) continue;              // does not come back when let go
      ++kept;
    }
    total += m.projected_layer_bytes(int(l), target, step_tokens, r.switched, kept);
  }
  return total;
}

}  // namespace rowlm::kv
