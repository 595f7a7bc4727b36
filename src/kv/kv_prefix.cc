// KvCache's prefix cache: content-addressed full blocks shared by reference
// count; whole chain positions (entries) evicted least recently released
// first, and nothing kept that no prefix could use.

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "kv/kv_cache.h"
#include "kv/kv_cache_impl.h"

namespace rowlm::kv {
namespace {

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 29;
  return h;
}

}  // namespace

uint64_t KvCache::Impl::child_key(int32_t parent, std::span<const int32_t> tokens) const {
  uint64_t h = parent < 0 ? root_key : entries[std::size_t(parent)].key;
  for (int32_t t : tokens) h = mix(h, uint32_t(t));
  return h;
}

int32_t KvCache::Impl::find_child(int32_t parent, std::span<const int32_t> tokens) const {
  const auto [lo, hi] = by_key.equal_range(child_key(parent, tokens));
  for (auto it = lo; it != hi; ++it) {
    // The key only narrows the search; parent and tokens decide.
    const PrefixEntry& e = entries[std::size_t(it->second)];
    if (e.parent == parent && std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin(), tokens.end()))
      return it->second;
  }
  return -1;
}

int32_t KvCache::Impl::add_entry(int32_t parent, std::span<const int32_t> tokens) {
  int32_t id;
  if (!free_entries.empty()) {
    id = free_entries.back();
    free_entries.pop_back();
  } else {
    entries.emplace_back();
    id = int32_t(entries.size() - 1);
  }
  PrefixEntry& e = entries[std::size_t(id)];
  e.live = true;
  e.key = child_key(parent, tokens);
  e.parent = parent;
  e.generation = ++generations;
  e.children.clear();
  e.held = 0;
  e.cache_only = 0;
  e.released_at = 0;
  e.tokens.assign(tokens.begin(), tokens.end());
  e.blocks.assign(pools.size(), kNoBlock);
  by_key.emplace(e.key, id);
  if (parent >= 0) entries[std::size_t(parent)].children.push_back(id);
  return id;
}

void KvCache::Impl::drop_if_empty(int32_t id) {
  while (id >= 0) {
    const PrefixEntry& e = entries[std::size_t(id)];
    if (!e.live || e.held > 0 || !e.children.empty()) return;
    const int32_t parent = e.parent;
    drop_entry(id);
    id = parent;
  }
}

void KvCache::Impl::drop_entry(int32_t id) {
  PrefixEntry& e = entries[std::size_t(id)];
  ROWLM_CHECK(e.live && e.held == 0 && e.children.empty(), "dropping a prefix entry that is still in use");
  {
    const auto [lo, hi] = by_key.equal_range(e.key);
    for (auto it = lo; it != hi; ++it)
      if (it->second == id) {
        by_key.erase(it);
        break;
      }
  }
  e.live = false;
  e.tokens.clear();
  e.blocks.clear();
  free_entries.push_back(id);
  if (e.parent >= 0) std::erase(entries[std::size_t(e.parent)].children, id);
}

void KvCache::Impl::became_cache_only(int32_t id, std::size_t bytes) {
  PrefixEntry& e = entries[std::size_t(id)];
  if (e.cache_only > 0) lru.erase({e.released_at, id});
  e.cache_only += 1;
  e.released_at = ++clock;
  lru.insert({e.released_at, id});
  evictable += bytes;
}

void KvCache::Impl::left_cache_only(int32_t id, std::size_t bytes) {
  PrefixEntry& e = entries[std::size_t(id)];
  ROWLM_CHECK(e.cache_only > 0, "prefix entry cache-only count underflow");
  if (--e.cache_only == 0) lru.erase({e.released_at, id});
  evictable -= bytes;
}

void KvCache::Impl::unregister(int32_t id, int layer) {
  PrefixEntry& e = entries[std::size_t(id)];
  LayerPool& p = pools[std::size_t(layer)];
  const int32_t block = e.blocks[std::size_t(layer)];
  if (p.refs[std::size_t(block)] == 1) left_cache_only(id, p.block_bytes);
  p.cache_entry[std::size_t(block)] = -1;
  e.blocks[std::size_t(layer)] = kNoBlock;
  e.held -= 1;
  release(layer, block);  // frees it unless a row holds it
}

void KvCache::Impl::evict_one() {
  ROWLM_CHECK(!lru.empty(), "evict_one with nothing evictable");
  const int32_t id = lru.begin()->second;
  bool lost_full_layer = false;
  for (std::size_t l = 0; l < pools.size(); ++l) {
    const int32_t block = entries[std::size_t(id)].blocks[l];
    if (block == kNoBlock || pools[l].refs[std::size_t(block)] != 1) continue;
    if (pools[l].spec.window == 0) lost_full_layer = true;
    unregister(id, int(l));
  }
  if (lost_full_layer)
    drop_subtree(id);
  else
    drop_if_empty(id);
}

void KvCache::Impl::drop_subtree(int32_t root) {
  // Children before parents (iteratively: chains can be thousands of blocks
  // deep), so every entry is a leaf when it is dropped.
  std::vector<int32_t> stack{root};
  while (!stack.empty()) {
    const int32_t id = stack.back();
    if (!entries[std::size_t(id)].children.empty()) {
      stack.push_back(entries[std::size_t(id)].children.back());
      continue;
    }
    stack.pop_back();
    for (std::size_t l = 0; l < pools.size(); ++l)
      if (entries[std::size_t(id)].blocks[l] != kNoBlock) unregister(id, int(l));
    if (id == root)
      drop_if_empty(id);  // and the ancestors this leaves empty
    else
      drop_entry(id);
  }
}

void KvCache::Impl::enforce_prefix_budget() {
  while (evictable > options.prefix_cache_bytes) evict_one();
}

std::vector<int32_t> KvCache::Impl::walk(std::span<const int32_t> tokens) const {
  std::vector<int32_t> chain;
  int32_t parent = -1;
  const std::size_t B = std::size_t(bs());
  for (std::size_t b = 0; (b + 1) * B <= tokens.size(); ++b) {
    const int32_t e = find_child(parent, tokens.subspan(b * B, B));
    if (e < 0) break;
    chain.push_back(e);
    parent = e;
  }
  return chain;
}

int64_t KvCache::Impl::usable_prefix(const std::vector<int32_t>& chain, int64_t max_tokens) const {
  const int64_t B = bs();
  // Full layers need every block of the prefix.
  int64_t full_ok = 0;
  while (full_ok < int64_t(chain.size())) {
    const PrefixEntry& e = entries[std::size_t(chain[std::size_t(full_ok)])];
    bool ok = true;
    for (std::size_t l = 0; l < pools.size(); ++l)
      if (pools[l].spec.window == 0 && e.blocks[l] == kNoBlock) ok = false;
    if (!ok) break;
    ++full_ok;
  }
  int64_t L = std::min(max_tokens, full_ok * B);
  while (L > 0) {
    // Window layers need the blocks covering the last W - 1 positions.
    bool ok = true;
    for (std::size_t l = 0; l < pools.size() && ok; ++l) {
      const int w = pools[l].spec.window;
      if (w == 0) continue;
      const int64_t from = std::max<int64_t>(0, L - w + 1);
      for (int64_t b = from / B; from < L && b <= (L - 1) / B; ++b)
        if (entries[std::size_t(chain[std::size_t(b)])].blocks[l] == kNoBlock) {
          ok = false;
          break;
        }
    }
    if (ok) return L;
    L = (L % B) ? L - L % B : L - B;
  }
  return 0;
}

int64_t KvCache::publish(RowId id, std::span<const int32_t> tokens) {
  Impl& m = *impl_;
  Row& r = m.row(id);
  if (r.in_step) throw Error("cannot publish kv row " + std::to_string(id) + ": it is part of the open step");
  if (!m.publishable(r)) return 0;
  const int64_t B = m.bs();
  const int64_t frontier = std::min<int64_t>(r.in_round ? r.round_start : r.length, int64_t(tokens.size()));
  const int64_t n_blocks = frontier / B;
  int64_t b = 0;
  int32_t parent = -1;
  if (r.published > 0 && r.published <= n_blocks && r.last_entry >= 0 &&
      m.entries[std::size_t(r.last_entry)].live &&
      m.entries[std::size_t(r.last_entry)].generation == r.last_entry_generation) {
    b = r.published;
    parent = r.last_entry;
  }
  for (; b < n_blocks; ++b) {
    const auto block_tokens = tokens.subspan(std::size_t(b * B), std::size_t(B));
    int32_t e = m.find_child(parent, block_tokens);
    if (e < 0) e = m.add_entry(parent, block_tokens);
    for (std::size_t l = 0; l < m.pools.size(); ++l) {
      const auto& blocks = r.layers[l].blocks;
      const int32_t blk = b < int64_t(blocks.size()) ? blocks[std::size_t(b)] : kNoBlock;
      LayerPool& p = m.pools[l];
      PrefixEntry& pe = m.entries[std::size_t(e)];
      if (blk == kNoBlock || pe.blocks[l] != kNoBlock || p.cache_entry[std::size_t(blk)] >= 0) continue;
      p.refs[std::size_t(blk)] += 1;  // the row holds it, so it is not evictable now
      p.cache_entry[std::size_t(blk)] = e;
      pe.blocks[l] = blk;
      pe.held += 1;
    }
    parent = e;
  }
  r.published = n_blocks;
  r.last_entry = parent;
  r.last_entry_generation = parent >= 0 ? m.entries[std::size_t(parent)].generation : 0;
  // Entries created for blocks no layer could give (all evicted or freed) are dropped.
  if (parent >= 0 && m.entries[std::size_t(parent)].held == 0) {
    m.drop_if_empty(parent);
    r.last_entry = -1;
  }
  // Window blocks kept only until they were published can go now.
  if (r.retain_for_publish && !r.in_round) m.settle(r);
  m.enforce_prefix_budget();
  return n_blocks * B;
}

int64_t KvCache::match_prefix(std::span<const int32_t> tokens, int64_t max_tokens) const {
  if (max_tokens < 0) throw Error("match_prefix: negative max_tokens");
  const Impl& m = *impl_;
  return m.usable_prefix(m.walk(tokens), m.reuse_limit(std::min<int64_t>(max_tokens, int64_t(tokens.size()))));
}

int64_t KvCache::attach_prefix(RowId id, std::span<const int32_t> tokens, int64_t max_tokens) {
  Impl& m = *impl_;
  Row& r = m.row(id);
  if (max_tokens < 0) throw Error("attach_prefix: negative max_tokens");
  if (r.in_step || r.in_round || r.length != 0)
    throw Error("attach_prefix: kv row " + std::to_string(id) + " must be empty and idle");
  for (const LayerRow& lr : r.layers)
    if (!lr.blocks.empty()) throw Error("attach_prefix: kv row " + std::to_string(id) + " already holds blocks");
  if (r.switched)
    throw Error("attach_prefix: kv row " + std::to_string(id) +
                " has switched precision; the prefix cache holds the layers' own codecs only");
  const std::vector<int32_t> chain = m.walk(tokens);
  const int64_t L = m.usable_prefix(chain, m.reuse_limit(std::min<int64_t>(max_tokens, int64_t(tokens.size()))));
  if (L == 0) return 0;
  const int64_t B = m.bs();
  for (std::size_t l = 0; l < m.pools.size(); ++l) {
    const int w = m.pools[l].spec.window;
    const int64_t from = w ? std::max<int64_t>(0, L - w + 1) : 0;
    LayerRow& lr = r.layers[l];
    lr.first = from;
    if (from >= L) continue;
    lr.blocks.assign(std::size_t((L - 1) / B + 1), kNoBlock);
    for (int64_t b = from / B; b <= (L - 1) / B; ++b) {
      const int32_t blk = m.entries[std::size_t(chain[std::size_t(b)])].blocks[l];
      m.acquire(int(l), blk);
      lr.blocks[std::size_t(b)] = blk;
    }
  }
  r.length = L;
  r.published = L / B;
  r.last_entry = r.published > 0 ? chain[std::size_t(r.published - 1)] : -1;
  r.last_entry_generation = r.last_entry >= 0 ? m.entries[std::size_t(r.last_entry)].generation : 0;
  return L;
}

void KvCache::clear_prefix_cache() {
  Impl& m = *impl_;
  for (std::size_t e = 0; e < m.entries.size(); ++e) {
    if (!m.entries[e].live) continue;
    for (std::size_t l = 0; l < m.pools.size(); ++l)
      if (m.entries[e].blocks[l] != kNoBlock) m.unregister(int32_t(e), int(l));
  }
  m.entries.clear();
  m.free_entries.clear();
  m.by_key.clear();
  ROWLM_CHECK(m.lru.empty() && m.evictable == 0, "prefix cache cleared but blocks remain evictable");
  for (auto& [id, r] : m.rows) {
    r.published = 0;
    r.last_entry = -1;
  }
}

std::size_t KvCache::prefix_cache_bytes() const { return impl_->evictable; }

int64_t KvCache::prefix_cache_blocks() const {
  int64_t n = 0;
  for (const PrefixEntry& e : impl_->entries)
    if (e.live) n += e.held;
  return n;
}

}  // namespace rowlm::kv
