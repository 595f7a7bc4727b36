#include "kv/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <unordered_set>

#include "core/error.h"
#include "kv/kv_cache_impl.h"
#include "kv/row_cache.h"

namespace rowlm::kv {
namespace {

std::string row_name(RowId id) { return "kv row " + std::to_string(id); }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

// ---------------------------------------------------------------------------
// Impl: blocks and references

KvCache::Impl::Impl(CacheOptions opts, Backend& be) : options(std::move(opts)), backend(be) {
  if (options.layers.empty()) throw Error("KV cache: no storage layers");
  if (options.block_size <= 0 || options.block_size > 4096)
    throw Error("KV cache: block_size must be in [1, 4096], not " + std::to_string(options.block_size));
  if (!options.layer_backends.empty() && options.layer_backends.size() != options.layers.size())
    throw Error("KV cache: " + std::to_string(options.layer_backends.size()) + " layer backends for " +
                std::to_string(options.layers.size()) + " storage layers");
  // Each layer's arena on its backend (the cache's where none is named).
  auto backend_of = [&](std::size_t i) {
    Backend* b = options.layer_backends.empty() ? nullptr : options.layer_backends[i];
    return b != nullptr ? b : &backend;
  };
  pools.resize(options.layers.size());
  for (std::size_t i = 0; i < options.layers.size(); ++i) {
    check_layer_spec(options.layers[i], int(i));
    pools[i].spec = options.layers[i];
    pools[i].backend = backend_of(i);
    pools[i].arena = pools[i].backend->make_kv_arena(options.layers[i], options.block_size);
    pools[i].block_bytes = pools[i].arena->block_bytes();
    if (options.layers[i].window == 0) has_full_layer = true;
  }
  switch_pools.resize(options.layers.size());
  if (const auto& sw = options.precision_switch) {
    if (sw->after < 0)
      throw Error("KV cache: the precision switch's length must not be negative, not " + std::to_string(sw->after));
    if (sw->codecs.size() != options.layers.size())
      throw Error("KV cache: the precision switch names " + std::to_string(sw->codecs.size()) +
                  " codecs for " + std::to_string(options.layers.size()) + " storage layers");
    for (std::size_t i = 0; i < options.layers.size(); ++i) {
      LayerSpec to = options.layers[i];
      to.codec = sw->codecs[i];
      check_layer_spec(to, int(i));
      if (to == options.layers[i]) continue;
      switch_pools[i].spec = to;
      switch_pools[i].backend = backend_of(i);
      switch_pools[i].arena = switch_pools[i].backend->make_kv_arena(to, options.block_size);
      switch_pools[i].block_bytes = switch_pools[i].arena->block_bytes();
    }
    if (std::none_of(switch_pools.begin(), switch_pools.end(), [](const LayerPool& p) { return p.arena != nullptr; }))
      throw Error("KV cache: the precision switch changes no layer's codec");
    switch_after = sw->after;
  }
  // The root key binds cached blocks to this layout and block size.
  const std::string sig = layout_signature(options.layers) + " B" + std::to_string(options.block_size);
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (char c : sig) h = (h ^ uint8_t(c)) * 0x100000001b3ull;
  root_key = h;
}

Row& KvCache::Impl::row(RowId id) {
  auto it = rows.find(id);
  if (it == rows.end()) throw Error("unknown " + row_name(id));
  return it->second;
}

const Row& KvCache::Impl::row(RowId id) const {
  auto it = rows.find(id);
  if (it == rows.end()) throw Error("unknown " + row_name(id));
  return it->second;
}

int32_t KvCache::Impl::allocate(int pool_id) {
  LayerPool& p = pool(pool_id);
  const int layer = pool_id % num_layers();
  int32_t id;
  if (!p.free_ids.empty()) {
    try {
      p.arena->reclaim(p.free_ids.front());  // the heap's least id, taken below
    } catch (const OutOfMemory& e) {
      throw OutOfBlocks("KV layer " + std::to_string(layer) + ": the device cannot take back a released block (" +
                        e.what() + ")");
    }
    std::pop_heap(p.free_ids.begin(), p.free_ids.end(), std::greater<>());
    id = p.free_ids.back();
    p.free_ids.pop_back();
  } else {
    if (p.refs.size() >= std::size_t(std::numeric_limits<int32_t>::max()))
      throw OutOfBlocks("KV layer " + std::to_string(layer) + ": block ids exhausted");
    try {
      p.arena->grow(int64_t(p.refs.size()) + 1);
    } catch (const OutOfMemory& e) {
      throw OutOfBlocks("KV layer " + std::to_string(layer) + ": the device cannot hold another block (" +
                        e.what() + ")");
    }
    id = int32_t(p.refs.size());
    p.refs.push_back(0);
    p.cache_entry.push_back(-1);
  }
  p.refs[std::size_t(id)] = 1;
  p.in_use += 1;
  used += p.block_bytes;
  return id;
}

void KvCache::Impl::acquire(int pool_id, int32_t id) {
  LayerPool& p = pool(pool_id);
  int32_t& refs = p.refs[std::size_t(id)];
  ROWLM_CHECK(refs > 0, "acquire of a free block");
  if (refs == 1 && p.cache_entry[std::size_t(id)] >= 0) left_cache_only(p.cache_entry[std::size_t(id)], p.block_bytes);
  refs += 1;
}

void KvCache::Impl::release(int pool_id, int32_t id) {
  LayerPool& p = pool(pool_id);
  int32_t& refs = p.refs[std::size_t(id)];
  ROWLM_CHECK(refs > 0, "release of a free block");
  refs -= 1;
  if (refs == 0) {
    ROWLM_CHECK(p.cache_entry[std::size_t(id)] < 0, "freeing a cached block");
    p.free_ids.push_back(id);
    std::push_heap(p.free_ids.begin(), p.free_ids.end(), std::greater<>());
    ++freed_since_release;
    p.in_use -= 1;
    used -= p.block_bytes;
  } else if (refs == 1 && p.cache_entry[std::size_t(id)] >= 0) {
    became_cache_only(p.cache_entry[std::size_t(id)], p.block_bytes);
  }
}

std::size_t KvCache::Impl::available() const {
  if (options.capacity_bytes == 0) return std::numeric_limits<std::size_t>::max();
  return options.capacity_bytes > used ? options.capacity_bytes - used : 0;
}

void KvCache::Impl::reserve(std::size_t bytes, const char* what) {
  if (bytes <= available()) return;
  if (bytes > available() + evictable)
    throw OutOfBlocks(std::string("KV cache: ") + what + " needs " + std::to_string(bytes) + " bytes but only " +
                      std::to_string(available()) + " are free (" + std::to_string(evictable) +
                      " more in evictable prefix blocks) of " + std::to_string(options.capacity_bytes) +
                      "; nothing was changed");
  while (bytes > available()) evict_one();
}

std::vector<std::vector<int32_t>> KvCache::Impl::allocate_all(const std::vector<int64_t>& count, const char* what) {
  ROWLM_CHECK(int(count.size()) == num_pools(), "allocate_all needs a count per pool");
  std::size_t bytes = 0;
  for (int p = 0; p < num_pools(); ++p) bytes += std::size_t(count[std::size_t(p)]) * pool(p).block_bytes;
  reserve(bytes, what);
  auto got = std::vector<std::vector<int32_t>>(std::size_t(num_pools()));
  try {
    for (int p = 0; p < num_pools(); ++p)
      for (int64_t i = 0; i < count[std::size_t(p)]; ++i) got[std::size_t(p)].push_back(allocate(p));
  } catch (...) {
    for (int p = 0; p < num_pools(); ++p)
      for (int32_t id : got[std::size_t(p)]) release(p, id);
    throw;
  }
  return got;
}

void KvCache::Impl::settle(Row& r) {
  for (std::size_t l = 0; l < pools.size(); ++l) {
    const int w = pools[l].spec.window;
    if (w == 0) continue;
    LayerRow& lr = r.layers[l];
    const int64_t cut = r.length - w + 1;  // first position the next query sees
    if (cut <= lr.first) continue;
    int64_t dead = std::min<int64_t>(cut / bs(), int64_t(lr.blocks.size()));
    if (r.retain_for_publish && publishable(r)) dead = std::min(dead, r.published);
    for (int64_t b = dead - 1; b >= lr.first / bs(); --b) {
      int32_t& id = lr.blocks[std::size_t(b)];
      if (id != kNoBlock) release(pool_id(r, int(l)), id);
      id = kNoBlock;
    }
    lr.first = std::max(lr.first, dead * bs());
  }
}

bool KvCache::Impl::publishable(const Row& r) const {
  if (r.min_reusable > 0 || r.switched) return false;
  for (std::size_t l = 0; l < pools.size(); ++l)
    if (pools[l].spec.window == 0 && r.layers[l].start > 0) return false;
  return true;
}

void KvCache::Impl::release_row(Row& r) {
  // Highest positions first, every layer of a position together, so the
  // prefix cache's LRU meets the row's chain tail first and whole.
  std::size_t n = 0;
  for (const LayerRow& lr : r.layers) n = std::max(n, lr.blocks.size());
  for (std::size_t b = n; b-- > 0;)
    for (std::size_t l = 0; l < pools.size(); ++l) {
      const auto& blocks = r.layers[l].blocks;
      if (b < blocks.size() && blocks[b] != kNoBlock) release(pool_id(r, int(l)), blocks[b]);
    }
  for (LayerRow& lr : r.layers) lr.blocks.clear();
}

// ---------------------------------------------------------------------------
// KvCache: forward-facing part

KvCache::KvCache(CacheOptions options, Backend& backend)
    : impl_(std::make_unique<Impl>(std::move(options), backend)) {}

KvCache::~KvCache() = default;
KvCache::KvCache(KvCache&&) noexcept = default;
KvCache& KvCache::operator=(KvCache&&) noexcept = default;

const CacheOptions& KvCache::options() const { return impl_->options; }
Backend& KvCache::backend() const { return impl_->backend; }
Backend& KvCache::layer_backend(int layer_index) const {
  layer(layer_index);  // checks the index
  return *impl_->pools[std::size_t(layer_index)].backend;
}

int64_t KvCache::Impl::projected_blocks(int layer, int64_t tokens, int64_t step_tokens) const {
  const LayerPool& p = pools[std::size_t(layer)];
  // Admission asks about rows without a length limit (INT64_MAX tokens):
  // no overflow, and no row holds more than 2^32 blocks of a layer, so
  // byte totals stay far inside size_t.
  int64_t blocks = std::min<int64_t>(tokens / bs() + (tokens % bs() != 0), int64_t(1) << 32);
  if (p.spec.window) blocks = std::min(blocks, ceil_div(p.spec.window - 1 + step_tokens, bs()) + 1);
  return blocks;
}

int64_t KvCache::Impl::slot(const Row& r, int layer, int64_t position) const {
  const int32_t id = r.layers[std::size_t(layer)].blocks[std::size_t(position / bs())];
  ROWLM_CHECK(id != kNoBlock, "a held position has no block");
  return int64_t(id) * bs() + position % bs();
}
int KvCache::num_layers() const { return int(impl_->pools.size()); }

const LayerSpec& KvCache::layer(int index) const {
  if (index < 0 || index >= num_layers())
    throw Error("KV layer " + std::to_string(index) + " out of range (cache has " + std::to_string(num_layers()) +
                " layers)");
  return impl_->pools[std::size_t(index)].spec;
}

std::string KvCache::layout() const { return layout_signature(impl_->options.layers); }

RowId KvCache::create_row() {
  Impl& m = *impl_;
  if (m.next_row == std::numeric_limits<RowId>::max()) throw Error("KV cache: row ids exhausted");
  Row r;
  r.layers.resize(m.pools.size());
  const RowId id = m.next_row++;
  m.rows.emplace(id, std::move(r));
  return id;
}

void KvCache::retire(RowId id) {
  Impl& m = *impl_;
  Row& r = m.row(id);
  if (r.in_step) throw Error("cannot retire " + row_name(id) + ": it is part of the open step");
  m.release_row(r);
  m.rows.erase(id);
  m.enforce_prefix_budget();
}

int64_t KvCache::length(RowId row) const { return impl_->row(row).length; }

void KvCache::begin_step(std::span<const RowId> rows, std::span<const int32_t> counts) {
  Impl& m = *impl_;
  if (m.step_open) throw Error("KV cache: begin_step while a step is open (call end_step or abort_step)");
  if (rows.size() != counts.size())
    throw Error("KV cache: begin_step got " + std::to_string(rows.size()) + " rows but " +
                std::to_string(counts.size()) + " counts");
  std::unordered_set<RowId> seen;
  const int bs = m.bs();
  const std::size_t L = m.pools.size();
  std::vector<int64_t> need(std::size_t(m.num_pools()), 0);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = m.row(rows[i]);
    if (!seen.insert(rows[i]).second) throw Error("KV cache: " + row_name(rows[i]) + " appears twice in one step");
    if (counts[i] < 0) throw Error("KV cache: negative token count for " + row_name(rows[i]));
    if (counts[i] == 0) continue;
    if (m.switch_after >= 0 && !r.switched && r.length + counts[i] > m.switch_after) {
      // Queries at or past the switch read the switch codec: the row must
      // switch first, and no step may start below it and end past it.
      if (r.length >= m.switch_after)
        throw Error("KV cache: " + row_name(rows[i]) + " holds " + std::to_string(r.length) +
                    " positions, past its precision switch at " + std::to_string(m.switch_after) +
                    ": switch_precision() it before appending");
      throw Error("KV cache: a step of " + std::to_string(counts[i]) + " tokens from position " +
                  std::to_string(r.length) + " would carry " + row_name(rows[i]) + " across its precision switch at " +
                  std::to_string(m.switch_after) + "; end the step there");
    }
    const int64_t b0 = r.length / bs, b1 = (r.length + counts[i] - 1) / bs;
    for (std::size_t l = 0; l < L; ++l) {
      const int pid = m.pool_id(r, int(l));
      const auto& blocks = r.layers[l].blocks;
      for (int64_t b = b0; b <= b1; ++b) {
        const int32_t id = b < int64_t(blocks.size()) ? blocks[std::size_t(b)] : kNoBlock;
        if (id == kNoBlock || m.pool(pid).refs[std::size_t(id)] > 1) need[std::size_t(pid)] += 1;  // new, or a copy
      }
    }
  }
  auto fresh = m.allocate_all(need, "begin_step");
  // Nothing below can fail. A block planned as a copy may turn out unshared
  // by the time it is reached (an earlier row of this step copied its own).
  std::vector<std::size_t> next(std::size_t(m.num_pools()), 0);
  std::vector<std::vector<KvBlockCopy>> copies(std::size_t(m.num_pools()));  // copy-on-write, issued below
  for (std::size_t i = 0; i < rows.size(); ++i) {
    Row& r = m.row(rows[i]);
    r.in_step = true;
    r.pending = counts[i];
    if (counts[i] == 0) continue;
    const int64_t b0 = r.length / bs, b1 = (r.length + counts[i] - 1) / bs;
    for (std::size_t l = 0; l < L; ++l) {
      const int pid = m.pool_id(r, int(l));
      const std::size_t p = std::size_t(pid);
      auto& blocks = r.layers[l].blocks;
      if (int64_t(blocks.size()) <= b1) blocks.resize(std::size_t(b1 + 1), kNoBlock);
      for (int64_t b = b0; b <= b1; ++b) {
        int32_t& id = blocks[std::size_t(b)];
        if (id == kNoBlock) {
          id = fresh[p][next[p]++];
          m.step_allocs.push_back({pid, rows[i], b});
        } else if (m.pool(pid).refs[std::size_t(id)] > 1) {
          // Copy-on-write: the row's earlier positions in this block are kept.
          // The source is shared, so it outlives this release until the
          // copies below (nothing in between frees blocks).
          const int32_t copy = fresh[p][next[p]++];
          copies[p].push_back({id, copy});
          m.release(pid, id);
          id = copy;
        }
      }
    }
  }
  for (int p = 0; p < m.num_pools(); ++p)
    for (std::size_t i = next[std::size_t(p)]; i < fresh[std::size_t(p)].size(); ++i)
      m.release(p, fresh[std::size_t(p)][i]);
  for (int p = 0; p < m.num_pools(); ++p)
    if (!copies[std::size_t(p)].empty()) m.pool(p).backend->kv_copy_blocks(*m.pool(p).arena, copies[std::size_t(p)]);
  m.step_rows.assign(rows.begin(), rows.end());
  m.step_open = true;
}

void KvCache::write(int layer_index, std::span<const TokenRun> runs, const Tensor& k, const Tensor& v) {
  Impl& m = *impl_;
  if (!m.step_open) throw Error("KV cache: write outside a step (call begin_step first)");
  const LayerSpec& spec = layer(layer_index);
  int64_t total = 0;
  for (const TokenRun& run : runs) {
    const Row& r = m.row(run.row);
    if (!r.in_step) throw Error("KV cache: write to " + row_name(run.row) + ", which is not part of the open step");
    if (run.count < 0) throw Error("KV cache: negative write count for " + row_name(run.row));
    if (run.position < r.length || run.position + run.count > r.length + r.pending)
      throw Error("KV cache: write of positions [" + std::to_string(run.position) + ", " +
                  std::to_string(run.position + run.count) + ") to " + row_name(run.row) +
                  " outside its reserved positions [" + std::to_string(r.length) + ", " +
                  std::to_string(r.length + r.pending) + ")");
    total += run.count;
  }
  const int64_t width = int64_t(spec.kv_heads) * spec.head_dim;
  for (const Tensor* t : {&k, &v})
    if (t->empty() ? total > 0 : t->numel() != total * width)
      throw Error("KV cache: write of " + std::to_string(total) + " tokens to KV layer " +
                  std::to_string(layer_index) + " needs K and V of " + std::to_string(total) + " x " +
                  std::to_string(width) + " values, got " + shape_str(t->shape()));
  if (total == 0) return;
  // One kv_write per stretch of runs whose rows store the layer in the same
  // pool (rows that switched precision use the switch pool).
  std::vector<int64_t> slots;
  slots.reserve(std::size_t(total));
  int64_t first_token = 0;
  for (std::size_t i = 0; i < runs.size();) {
    const int pid = m.pool_id(m.row(runs[i].row), layer_index);
    LayerPool& p = m.pool(pid);
    slots.clear();
    for (; i < runs.size() && m.pool_id(m.row(runs[i].row), layer_index) == pid; ++i) {
      const Row& r = m.row(runs[i].row);
      for (int64_t pos = runs[i].position; pos < runs[i].position + runs[i].count; ++pos) {
        const int32_t id = r.layers[std::size_t(layer_index)].blocks[std::size_t(pos / m.bs())];
        ROWLM_CHECK(id != kNoBlock && p.refs[std::size_t(id)] == 1, "write into a block the row does not own alone");
        slots.push_back(int64_t(id) * m.bs() + pos % m.bs());
      }
    }
    const int64_t end_token = first_token + int64_t(slots.size());
    if (first_token == 0 && end_token == total) {
      p.backend->kv_write(*p.arena, slots, k, v);
    } else if (end_token > first_token) {
      p.backend->kv_write(*p.arena, slots, k.rows(first_token, end_token), v.rows(first_token, end_token));
    }
    first_token = end_token;
  }
}

void KvCache::end_step() {
  Impl& m = *impl_;
  if (!m.step_open) throw Error("KV cache: end_step without an open step");
  for (RowId id : m.step_rows) {
    Row& r = m.row(id);
    r.length += r.pending;
    r.pending = 0;
    r.in_step = false;
    if (!r.in_round) m.settle(r);
  }
  m.step_rows.clear();
  m.step_allocs.clear();
  m.step_open = false;
  m.enforce_prefix_budget();
}

void KvCache::abort_step() {
  Impl& m = *impl_;
  if (!m.step_open) throw Error("KV cache: abort_step without an open step");
  for (auto it = m.step_allocs.rbegin(); it != m.step_allocs.rend(); ++it) {
    auto& blocks = m.row(it->row).layers[std::size_t(it->pool % m.num_layers())].blocks;
    m.release(it->pool, blocks[std::size_t(it->index)]);
    blocks[std::size_t(it->index)] = kNoBlock;
  }
  for (RowId id : m.step_rows) {
    Row& r = m.row(id);
    r.pending = 0;
    r.in_step = false;
    for (auto& lr : r.layers)
      while (!lr.blocks.empty() && lr.blocks.back() == kNoBlock) lr.blocks.pop_back();
  }
  m.step_rows.clear();
  m.step_allocs.clear();
  m.step_open = false;
}

bool KvCache::step_open() const { return impl_->step_open; }

int64_t KvCache::pending(RowId row) const { return impl_->row(row).pending; }

std::size_t KvCache::bytes_per_token(int layer_index) const { return token_record_bytes(layer_index); }
// (of a row in the layer's own codec; row_layer() gives a switched row's)

std::size_t KvCache::used_bytes() const { return impl_->used; }

std::size_t KvCache::free_bytes() const { return impl_->available(); }

std::size_t KvCache::release_free_memory() {
  Impl& m = *impl_;
  if (m.step_open) throw Error("KV cache: release_free_memory while a step is open");
  if (m.freed_since_release == 0) return 0;  // what was free before is handed back already
  m.freed_since_release = 0;
  std::size_t released = 0;
  for (int p = 0; p < m.num_pools(); ++p) {
    LayerPool& pool = m.pool(p);
    if (pool.arena) released += pool.arena->release_free_blocks(pool.free_ids);
  }
  return released;
}

std::size_t KvCache::resident_bytes() const {
  const Impl& m = *impl_;
  std::size_t bytes = 0;
  for (int p = 0; p < m.num_pools(); ++p)
    if (m.pool(p).arena) bytes += m.pool(p).arena->resident_bytes();
  return bytes;
}

// ---------------------------------------------------------------------------
// Row lifecycle

RowId KvCache::fork(RowId parent_id) {
  Impl& m = *impl_;
  const Row& parent = m.row(parent_id);
  if (parent.in_step) throw Error("cannot fork " + row_name(parent_id) + ": it is part of the open step");
  Row child = parent;
  child.in_round = false;
  child.round_start = 0;
  child.retain_for_publish = false;  // the engine opts in per row
  const RowId id = create_row();
  for (std::size_t l = 0; l < m.pools.size(); ++l)
    for (int32_t b : child.layers[l].blocks)
      if (b != kNoBlock) m.acquire(m.pool_id(child, int(l)), b);
  m.rows[id] = std::move(child);
  m.settle(m.rows[id]);  // a parent inside a round may hold blocks the child no longer needs
  return id;
}

RowCache KvCache::extract(RowId id, int64_t limit) const {
  const Impl& m = *impl_;
  const Row& r = m.row(id);
  if (r.in_step) throw Error("cannot extract " + row_name(id) + ": it is part of the open step");
  RowCache out;
  out.layers = r.switched ? switched_layers() : m.options.layers;
  out.length = r.length;
  out.minimum_reusable_offset = r.min_reusable;
  out.data.resize(m.pools.size());
  for (std::size_t l = 0; l < m.pools.size(); ++l) {
    const LayerPool& p = m.pool(m.pool_id(r, int(l)));
    int64_t start = r.layers[l].first;
    if (p.spec.window) start = std::max<int64_t>(start, r.length - p.spec.window + 1);
    if (limit >= 0) start = std::max<int64_t>(start, r.length - limit);
    start = std::clamp<int64_t>(start, 0, r.length);
    const std::size_t rec = kv::token_record_bytes(p.spec);
    out.data[l].first = start;
    out.data[l].records.resize(std::size_t(r.length - start) * rec);
    std::vector<int64_t> slots;
    slots.reserve(std::size_t(r.length - start));
    for (int64_t pos = start; pos < r.length; ++pos) slots.push_back(m.slot(r, int(l), pos));
    p.backend->kv_read(*p.arena, slots, out.data[l].records);
  }
  return out;
}

RowId KvCache::restore(const RowCache& saved) {
  Impl& m = *impl_;
  check_row_cache(saved, "KV row to restore");
  if (m.next_row == std::numeric_limits<RowId>::max()) throw Error("KV cache: row ids exhausted");
  const bool switched = m.switch_after >= 0 && saved.layers == switched_layers();
  if (saved.layers != m.options.layers && !switched)
    throw Error("KV row to restore has layout [" + layout_signature(saved.layers) + "] but the cache holds [" +
                layout() + "]" +
                (m.switch_after >= 0 ? " (or [" + layout_signature(switched_layers()) + "] once switched)"
                                     : std::string()));
  const int bs = m.bs();
  Row shape;  // which pools the restored row's layers use
  shape.switched = switched;
  std::vector<int64_t> need(std::size_t(m.num_pools()), 0);
  for (std::size_t l = 0; l < m.pools.size(); ++l) {
    const int64_t first = saved.data[l].first;
    if (first < saved.length) need[std::size_t(m.pool_id(shape, int(l)))] = (saved.length - 1) / bs - first / bs + 1;
  }
  auto fresh = m.allocate_all(need, "restore");
  const RowId id = create_row();
  Row& r = m.rows[id];
  r.length = saved.length;
  r.min_reusable = saved.minimum_reusable_offset;
  r.switched = switched;
  for (std::size_t l = 0; l < m.pools.size(); ++l) {
    LayerRow& lr = r.layers[l];
    const int64_t first = saved.data[l].first;
    lr.first = first;
    lr.start = first;
    const std::size_t pid = std::size_t(m.pool_id(r, int(l)));
    if (need[pid] == 0) continue;
    lr.blocks.assign(std::size_t((saved.length - 1) / bs + 1), kNoBlock);
    for (int64_t i = 0; i < need[pid]; ++i) lr.blocks[std::size_t(first / bs + i)] = fresh[pid][std::size_t(i)];
    std::vector<int64_t> slots;
    slots.reserve(std::size_t(saved.length - first));
    for (int64_t pos = first; pos < saved.length; ++pos) slots.push_back(m.slot(r, int(l), pos));
    m.pool(int(pid)).backend->kv_store(*m.pool(int(pid)).arena, slots, saved.data[l].records);
  }
  m.settle(r);
  m.enforce_prefix_budget();
  return id;
}

int64_t KvCache::min_trim_length(RowId id) const {
  const Impl& m = *impl_;
  const Row& r = m.row(id);
  int64_t lo = r.min_reusable;
  for (std::size_t l = 0; l < m.pools.size(); ++l) {
    const int64_t first = r.layers[l].first;
    const int w = m.pools[l].spec.window;
    if (w == 0 || first == 0) lo = std::max(lo, first);
    else lo = std::max(lo, first + w - 1);
  }
  return std::min(lo, r.length);
}

void KvCache::trim(RowId id, int64_t count) {
  Impl& m = *impl_;
  Row& r = m.row(id);
  if (r.in_step) throw Error("cannot trim " + row_name(id) + ": it is part of the open step");
  if (r.in_round) throw Error("cannot trim " + row_name(id) + " inside a speculative round (use rollback_round)");
  if (count < 0) throw Error("cannot trim " + row_name(id) + " by a negative count");
  const int64_t lo = min_trim_length(id);
  if (r.length - count < lo)
    throw Error("cannot trim " + row_name(id) + " from " + std::to_string(r.length) + " to " +
                std::to_string(r.length - count) + " tokens: it holds nothing usable below " + std::to_string(lo) +
                " (minimum reusable offset, truncated history or a window layer's freed blocks)");
  r.length -= count;
  const int64_t keep = ceil_div(r.length, m.bs());
  for (std::size_t l = 0; l < m.pools.size(); ++l) {
    auto& blocks = r.layers[l].blocks;
    while (int64_t(blocks.size()) > keep) {
      if (blocks.back() != kNoBlock) m.release(m.pool_id(r, int(l)), blocks.back());
      blocks.pop_back();
    }
    r.layers[l].first = std::min(r.layers[l].first, r.length);
  }
  if (r.published * m.bs() > r.length) {
    r.published = 0;
    r.last_entry = -1;
  }
  m.enforce_prefix_budget();
}

bool KvCache::has_row(RowId row) const { return impl_->rows.count(row) != 0; }
int KvCache::num_rows() const { return int(impl_->rows.size()); }

std::vector<RowId> KvCache::row_ids() const {
  std::vector<RowId> ids;
  ids.reserve(impl_->rows.size());
  for (const auto& [id, r] : impl_->rows) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

int64_t KvCache::minimum_reusable_offset(RowId row) const { return impl_->row(row).min_reusable; }

void KvCache::set_minimum_reusable_offset(RowId id, int64_t offset) {
  Row& r = impl_->row(id);
  if (offset < 0 || offset > r.length)
    throw Error("minimum reusable offset " + std::to_string(offset) + " for " + row_name(id) + " outside [0, " +
                std::to_string(r.length) + "]");
  r.min_reusable = offset;
  if (!r.in_round && !r.in_step) impl_->settle(r);
  impl_->enforce_prefix_budget();
}

bool KvCache::switched(RowId row) const { return impl_->row(row).switched; }

bool KvCache::switch_due(RowId row) const {
  const Row& r = impl_->row(row);
  return impl_->switch_after >= 0 && !r.switched && r.length >= impl_->switch_after;
}

const LayerSpec& KvCache::row_layer(RowId row, int layer_index) const {
  (void)layer(layer_index);
  return impl_->pool(impl_->pool_id(impl_->row(row), layer_index)).spec;
}

std::vector<LayerSpec> KvCache::switched_layers() const {
  std::vector<LayerSpec> out = impl_->options.layers;
  for (int l = 0; l < num_layers(); ++l)
    if (impl_->switches(l)) out[std::size_t(l)] = impl_->switch_pools[std::size_t(l)].spec;
  return out;
}

void KvCache::switch_precision(RowId id) {
  Impl& m = *impl_;
  Row& r = m.row(id);
  if (m.switch_after < 0) throw Error("cannot switch " + row_name(id) + "'s precision: the cache has no precision switch");
  if (r.switched) throw Error("cannot switch " + row_name(id) + "'s precision: it has switched already");
  if (r.in_step || r.in_round)
    throw Error("cannot switch " + row_name(id) + "'s precision inside a step or speculative round");
  const int64_t bs = m.bs();
  const int64_t end_block = ceil_div(r.length, bs);  // blocks past the length hold nothing it keeps
  const int L = m.num_layers();
  std::vector<int64_t> need(std::size_t(m.num_pools()), 0);
  for (int l = 0; l < L; ++l) {
    if (!m.switches(l)) continue;
    const auto& blocks = r.layers[std::size_t(l)].blocks;
    for (int64_t b = 0; b < std::min<int64_t>(end_block, int64_t(blocks.size())); ++b)
      if (blocks[std::size_t(b)] != kNoBlock) need[std::size_t(L + l)] += 1;
  }
  auto fresh = m.allocate_all(need, "switch_precision");
  // The new tables, and the positions re-encoded into them; the books
  // change only once every byte has moved.
  auto tables = std::vector<std::vector<int32_t>>(std::size_t(L));
  try {
    std::vector<int64_t> from, to;
    std::vector<std::byte> in, out;
    for (int l = 0; l < L; ++l) {
      if (!m.switches(l)) continue;
      const LayerRow& lr = r.layers[std::size_t(l)];
      auto& table = tables[std::size_t(l)];
      table.assign(std::size_t(std::min<int64_t>(end_block, int64_t(lr.blocks.size()))), kNoBlock);
      std::size_t next = 0;
      for (std::size_t b = 0; b < table.size(); ++b)
        if (lr.blocks[b] != kNoBlock) table[b] = fresh[std::size_t(L + l)][next++];
      from.clear();
      to.clear();
      for (int64_t pos = lr.first; pos < r.length; ++pos) {
        from.push_back(m.slot(r, l, pos));
        to.push_back(int64_t(table[std::size_t(pos / bs)]) * bs + pos % bs);
      }
      const LayerPool& src = m.pools[std::size_t(l)];
      const LayerPool& dst = m.switch_pools[std::size_t(l)];
      in.resize(from.size() * kv::token_record_bytes(src.spec));
      out.resize(from.size() * kv::token_record_bytes(dst.spec));
      src.backend->kv_read(*src.arena, from, in);
      transcode_records(src.spec, dst.spec, in, out);
      dst.backend->kv_store(*dst.arena, to, out);
    }
  } catch (...) {
    for (int p = 0; p < m.num_pools(); ++p)
      for (int32_t b : fresh[std::size_t(p)]) m.release(p, b);
    throw;
  }
  // Old blocks go tail first, every switching layer of a position together
  // (the prefix cache's LRU then meets a published chain from its tail).
  std::size_t n = 0;
  for (int l = 0; l < L; ++l)
    if (m.switches(l)) n = std::max(n, r.layers[std::size_t(l)].blocks.size());
  for (std::size_t b = n; b-- > 0;)
    for (int l = 0; l < L; ++l) {
      const auto& blocks = r.layers[std::size_t(l)].blocks;
      if (m.switches(l) && b < blocks.size() && blocks[b] != kNoBlock) m.release(l, blocks[b]);
    }
  for (int l = 0; l < L; ++l)
    if (m.switches(l)) r.layers[std::size_t(l)].blocks = std::move(tables[std::size_t(l)]);
  r.switched = true;
  r.min_reusable = std::max(r.min_reusable, r.length);
  m.settle(r);
  m.enforce_prefix_budget();
}

void KvCache::retain_for_publish(RowId id, bool on) {
  Impl& m = *impl_;
  Row& r = m.row(id);
  r.retain_for_publish = on;
  if (!on && !r.in_round && !r.in_step) m.settle(r);
  m.enforce_prefix_budget();
}

int64_t KvCache::first_position(RowId row, int layer_index) const {
  (void)layer(layer_index);
  return impl_->row(row).layers[std::size_t(layer_index)].first;
}

// ---------------------------------------------------------------------------
// Speculative rounds

void KvCache::begin_round(std::span<const RowId> rows) {
  Impl& m = *impl_;
  std::unordered_set<RowId> seen;
  for (RowId id : rows) {
    const Row& r = m.row(id);
    if (!seen.insert(id).second) throw Error("begin_round: " + row_name(id) + " listed twice");
    if (r.in_round) throw Error("begin_round: " + row_name(id) + " is already in a speculative round");
    if (r.in_step) throw Error("begin_round: " + row_name(id) + " is part of the open step");
  }
  for (RowId id : rows) {
    Row& r = m.row(id);
    r.in_round = true;
    r.round_start = r.length;
  }
}

void KvCache::commit_round(std::span<const RowId> rows) {
  Impl& m = *impl_;
  std::unordered_set<RowId> seen;
  for (RowId id : rows) {
    const Row& r = m.row(id);
    if (!seen.insert(id).second) throw Error("commit_round: " + row_name(id) + " listed twice");
    if (!r.in_round) throw Error("commit_round: " + row_name(id) + " is not in a speculative round");
    if (r.in_step) throw Error("commit_round: " + row_name(id) + " is part of the open step");
  }
  for (RowId id : rows) {
    Row& r = m.row(id);
    r.in_round = false;
    m.settle(r);
  }
  m.enforce_prefix_budget();
}

void KvCache::rollback_round(std::span<const RowId> rows, std::span<const int64_t> keep) {
  Impl& m = *impl_;
  if (rows.size() != keep.size())
    throw Error("rollback_round got " + std::to_string(rows.size()) + " rows but " + std::to_string(keep.size()) +
                " keep counts");
  std::unordered_set<RowId> seen;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = m.row(rows[i]);
    if (!seen.insert(rows[i]).second) throw Error("rollback_round: " + row_name(rows[i]) + " listed twice");
    if (!r.in_round) throw Error("rollback_round: " + row_name(rows[i]) + " is not in a speculative round");
    if (r.in_step) throw Error("rollback_round: " + row_name(rows[i]) + " is part of the open step");
    if (keep[i] < 0 || keep[i] > r.length - r.round_start)
      throw Error("rollback_round: keep " + std::to_string(keep[i]) + " for " + row_name(rows[i]) + " outside [0, " +
                  std::to_string(r.length - r.round_start) + "] (tokens appended in the round)");
  }
  for (std::size_t i = 0; i < rows.size(); ++i) {
    Row& r = m.row(rows[i]);
    r.length = r.round_start + keep[i];
    r.in_round = false;
    m.settle(r);
  }
  m.enforce_prefix_budget();
}

bool KvCache::in_round(RowId row) const { return impl_->row(row).in_round; }

// ---------------------------------------------------------------------------
// Accounting and inspection

std::size_t KvCache::block_bytes(int layer_index) const {
  (void)layer(layer_index);
  return impl_->pools[std::size_t(layer_index)].block_bytes;
}

std::size_t KvCache::bytes_per_token() const {
  std::size_t n = 0;
  for (int l = 0; l < num_layers(); ++l) n += bytes_per_token(l);
  return n;
}

std::size_t KvCache::projected_bytes(int64_t tokens, int64_t step_tokens) const {
  if (tokens < 0) throw Error("projected_bytes: negative token count " + std::to_string(tokens));
  if (step_tokens < 1) throw Error("projected_bytes: step_tokens must be at least 1");
  std::size_t total = 0;
  for (int l = 0; l < num_layers(); ++l) total += impl_->projected_layer_bytes(l, tokens, step_tokens, false, 0);
  return total;
}

std::size_t KvCache::Impl::projected_layer_bytes(int layer, int64_t tokens, int64_t step_tokens, bool switched,
                                                 int64_t kept) const {
  const auto blocks = [&](int64_t n) { return projected_blocks(layer, n, step_tokens); };
  const auto less_kept = [&](int64_t n) { return std::size_t(std::max<int64_t>(0, n - kept)); };
  const LayerPool& own = pools[std::size_t(layer)];
  if (!switches(layer) || (!switched && tokens <= switch_after)) return less_kept(blocks(tokens)) * own.block_bytes;
  const LayerPool& to = switch_pools[std::size_t(layer)];
  if (switched) return less_kept(blocks(tokens)) * to.block_bytes;
  // It will switch on the way: while re-encoding it holds its blocks of
  // switch_after positions in both codecs, afterwards only the new ones.
  const std::size_t at_switch =
      less_kept(blocks(switch_after)) * own.block_bytes + std::size_t(blocks(switch_after)) * to.block_bytes;
  return std::max(at_switch, std::size_t(blocks(tokens)) * to.block_bytes);
}

std::size_t KvCache::row_bytes(RowId id) const {
  const Row& r = impl_->row(id);
  std::size_t n = 0;
  for (std::size_t l = 0; l < impl_->pools.size(); ++l)
    for (int32_t b : r.layers[l].blocks)
      if (b != kNoBlock) n += impl_->pool(impl_->pool_id(r, int(l))).block_bytes;
  return n;
}

int64_t KvCache::blocks_in_use(int layer_index) const {
  (void)layer(layer_index);
  return impl_->pools[std::size_t(layer_index)].in_use + impl_->switch_pools[std::size_t(layer_index)].in_use;
}

std::size_t KvCache::token_record_bytes(int layer_index) const {
  return kv::token_record_bytes(layer(layer_index));
}

void KvCache::read_token(int layer_index, RowId id, int64_t position, std::span<std::byte> out) const {
  const Impl& m = *impl_;
  (void)layer(layer_index);
  const Row& r = m.row(id);
  const LayerRow& lr = r.layers[std::size_t(layer_index)];
  if (position < lr.first || position >= r.length + r.pending)
    throw Error("read_token: " + row_name(id) + " does not hold position " + std::to_string(position) +
                " in KV layer " + std::to_string(layer_index) + " (holds [" + std::to_string(lr.first) + ", " +
                std::to_string(r.length + r.pending) + "))");
  const LayerPool& p = m.pool(m.pool_id(r, layer_index));
  if (out.size() != kv::token_record_bytes(p.spec))
    throw Error("read_token: output has " + std::to_string(out.size()) + " bytes, a record of " + row_name(id) +
                " has " + std::to_string(kv::token_record_bytes(p.spec)));
  const int64_t slot = m.slot(r, layer_index, position);
  p.backend->kv_read(*p.arena, {&slot, 1}, out);
}

int32_t KvCache::physical_block(int layer_index, RowId id, int64_t index) const {
  (void)layer(layer_index);
  const auto& blocks = impl_->row(id).layers[std::size_t(layer_index)].blocks;
  return index >= 0 && index < int64_t(blocks.size()) ? blocks[std::size_t(index)] : kNoBlock;
}

void KvCache::check_consistency() const {
  const Impl& m = *impl_;
  const int64_t bs = m.bs();
  std::vector<std::vector<int32_t>> refs(std::size_t(m.num_pools()));  // by pool id
  for (int p = 0; p < m.num_pools(); ++p) refs[std::size_t(p)].assign(m.pool(p).refs.size(), 0);
  auto fail = [](const std::string& what) { throw Error("KV cache inconsistent: " + what); };
  for (const auto& [id, r] : m.rows) {
    for (std::size_t l = 0; l < m.pools.size(); ++l) {
      const LayerRow& lr = r.layers[l];
      for (int32_t b : lr.blocks)
        if (b != kNoBlock) refs[std::size_t(m.pool_id(r, int(l)))][std::size_t(b)] += 1;
      const int64_t end = r.length + r.pending;
      if (lr.first > r.length || lr.start > lr.first)
        fail(row_name(id) + " layer " + std::to_string(l) + " first position outside [start, length]");
      for (int64_t b = 0; b < lr.first / bs && b < int64_t(lr.blocks.size()); ++b)
        if (lr.blocks[std::size_t(b)] != kNoBlock)
          fail(row_name(id) + " layer " + std::to_string(l) + " holds block " + std::to_string(b) +
               " below its first position");
      for (int64_t b = lr.first / bs; lr.first < end && b <= (end - 1) / bs; ++b)
        if (b >= int64_t(lr.blocks.size()) || lr.blocks[std::size_t(b)] == kNoBlock)
          fail(row_name(id) + " layer " + std::to_string(l) + " lacks block " + std::to_string(b));
      const int w = m.pools[l].spec.window;
      if (w && !r.in_round && !r.in_step && lr.first / bs < (r.length - w + 1) / bs &&
          !(r.retain_for_publish && m.publishable(r) && lr.first / bs >= r.published))
        fail(row_name(id) + " window layer " + std::to_string(l) + " holds blocks it should have freed");
    }
  }
  std::size_t lru_size = 0;
  for (std::size_t e = 0; e < m.entries.size(); ++e) {
    const PrefixEntry& pe = m.entries[e];
    if (!pe.live) continue;
    int held = 0, cache_only = 0;
    for (std::size_t l = 0; l < m.pools.size(); ++l) {
      const int32_t b = pe.blocks[l];
      if (b == kNoBlock) {
        // Without this layer's block no prefix reaching the entry can be
        // attached: its other blocks would be dead weight.
        if (m.pools[l].spec.window == 0) fail("prefix entry " + std::to_string(e) + " lacks full layer " +
                                              std::to_string(l) + "'s block but stays cached");
        continue;
      }
      ++held;
      if (m.pools[l].refs[std::size_t(b)] == 1) ++cache_only;
      refs[l][std::size_t(b)] += 1;
      if (m.pools[l].cache_entry[std::size_t(b)] != int32_t(e)) fail("cached block's owner entry mismatch");
    }
    if (held != pe.held) fail("prefix entry held count");
    if (cache_only != pe.cache_only) fail("prefix entry cache-only count");
    if (cache_only > 0) {
      ++lru_size;
      if (!m.lru.count({pe.released_at, int32_t(e)})) fail("entry with cache-only blocks missing from the LRU");
    }
    if (pe.parent >= 0 && !m.entries[std::size_t(pe.parent)].live) fail("live prefix entry under a dropped parent");
    if (held == 0 && pe.children.empty()) fail("empty prefix entry stays live");
  }
  std::size_t used = 0, evictable = 0;
  for (int pid = 0; pid < m.num_pools(); ++pid) {
    const LayerPool& p = m.pool(pid);
    const std::size_t l = std::size_t(pid);
    const std::string name = (pid < m.num_layers() ? "layer " : "switch pool of layer ") +
                             std::to_string(pid % m.num_layers());
    int64_t in_use = 0;
    for (std::size_t b = 0; b < p.refs.size(); ++b) {
      if (refs[l][b] != p.refs[b])
        fail(name + " block " + std::to_string(b) + " has " + std::to_string(p.refs[b]) +
             " references, tables and cache hold " + std::to_string(refs[l][b]));
      if (p.refs[b] > 0) ++in_use;
      if (p.refs[b] == 0 && p.cache_entry[b] >= 0) fail("free block still marked cached");
      if (p.refs[b] == 1 && p.cache_entry[b] >= 0) evictable += p.block_bytes;
      if (pid >= m.num_layers() && p.cache_entry[b] >= 0) fail("the prefix cache holds a switch pool's block");
    }
    if (in_use != p.in_use) fail(name + " in-use count");
    if (std::size_t(in_use) + p.free_ids.size() != p.refs.size()) fail("free list size");
    used += std::size_t(in_use) * p.block_bytes;
  }
  if (used != m.used) fail("used bytes " + std::to_string(m.used) + " vs recomputed " + std::to_string(used));
  if (evictable != m.evictable) fail("evictable bytes");
  if (lru_size != m.lru.size()) fail("LRU size");
}

}  // namespace rowlm::kv
