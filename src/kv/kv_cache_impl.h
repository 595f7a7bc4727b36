#pragma once
// KvCache's private state, shared by its implementation files. It holds
// the books only: the bytes are in the backend's arenas.

#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <set>
#include <utility>
#include <unordered_map>
#include <vector>

#include "core/buffer.h"
#include "kvcodec/codec.h"
#include "kv/kv_cache.h"

namespace rowlm::kv {

inline constexpr int32_t kNoBlock = -1;

// One layer's blocks. A block is free (refs 0), held by rows and/or the
// prefix cache (refs = holders). The arena never shrinks (release_free_memory
// hands free blocks' pages back but keeps their ids): a freed block's
// bytes are reused by the next allocation, the lowest free id first, so
// blocks in use gather at low ids and the free ones form long runs whose
// memory release_free_memory can hand back to the system.
struct LayerPool {
  LayerSpec spec;
  Backend* backend = nullptr;      // the one that allocated the arena and moves its bytes
  std::unique_ptr<KvArena> arena;  // the bytes, on that backend's device
  std::size_t block_bytes = 0;     // arena->block_bytes()
  std::vector<int32_t> refs;       // by block id
  std::vector<int32_t> cache_entry;    // prefix entry holding the block, or -1
  std::vector<int32_t> free_ids;  // a min-heap (std::greater)
  int64_t in_use = 0;
};

struct LayerRow {
  std::vector<int32_t> blocks;  // by absolute block index; kNoBlock where not held
  int64_t first = 0;            // first held position
  int64_t start = 0;            // first position of the row's history (> 0 after a limited restore)
};

struct Row {
  int64_t length = 0;
  int64_t pending = 0;   // tokens reserved by the open step
  bool in_step = false;
  bool in_round = false;
  int64_t round_start = 0;
  int64_t min_reusable = 0;
  bool switched = false;  // its switching layers' blocks are in the switch pools
  bool retain_for_publish = false;  // window layers keep blocks until published
  std::vector<LayerRow> layers;
  // Prefix publishing resumes here: blocks [0, published) are registered,
  // the last one as entry `last_entry` (valid while its generation matches).
  int64_t published = 0;
  int32_t last_entry = -1;
  uint64_t last_entry_generation = 0;
};

// A cached full block: its key, its chain position, and per layer the pool
// block holding it (kNoBlock where that layer's copy was evicted or never
// held, e.g. a window layer's block freed before it was published).
//
// Eviction works on entries, not on single blocks: an entry is one position
// of a chain, and losing one layer's block of it makes the others useless
// for every prefix that reaches it. An entry with at least one cache-only
// block (no row holds it) is in the LRU under the time its latest block
// became cache-only.
struct PrefixEntry {
  bool live = false;
  uint64_t key = 0;
  int32_t parent = -1;
  uint64_t generation = 0;
  std::vector<int32_t> children;  // live entries whose parent this is
  int32_t held = 0;        // layers with a block
  int32_t cache_only = 0;  // of those, blocks no row holds
  uint64_t released_at = 0;  // LRU clock when a block last became cache-only
  std::vector<int32_t> tokens;
  std::vector<int32_t> blocks;
};

struct KvCache::Impl {
  Impl(CacheOptions opts, Backend& be);

  CacheOptions options;
  Backend& backend;
  // Pool ids: l is layer l's pool (the layer's codec, the only one the
  // prefix cache holds blocks of); num_layers() + l its switch pool (the
  // switch codec; no arena where the layer does not switch).
  std::vector<LayerPool> pools;
  std::vector<LayerPool> switch_pools;  // one per layer
  int64_t switch_after = -1;            // -1: no precision switch
  std::size_t used = 0;
  int64_t freed_since_release = 0;  // blocks freed since release_free_memory last ran
  std::unordered_map<RowId, Row> rows;
  RowId next_row = 0;

  bool step_open = false;
  std::vector<RowId> step_rows;
  struct StepAlloc {
    int pool;
    RowId row;
    int64_t index;
  };
  std::vector<StepAlloc> step_allocs;  // fresh blocks of the open step

  // Prefix cache.
  uint64_t root_key = 0;
  std::vector<PrefixEntry> entries;
  std::vector<int32_t> free_entries;
  std::unordered_multimap<uint64_t, int32_t> by_key;
  std::set<std::pair<uint64_t, int32_t>> lru;  // (released_at, entry): entries with cache-only blocks
  std::size_t evictable = 0;  // bytes of cache-only blocks
  bool has_full_layer = false;  // a full layer needs every block of a prefix
  uint64_t clock = 0;
  uint64_t generations = 0;

  int bs() const { return options.block_size; }
  int num_layers() const { return int(pools.size()); }
  int num_pools() const { return 2 * num_layers(); }
  bool switches(int layer) const { return switch_pools[std::size_t(layer)].arena != nullptr; }
  // The pool holding the row's blocks of `layer`.
  int pool_id(const Row& r, int layer) const { return r.switched && switches(layer) ? num_layers() + layer : layer; }
  LayerPool& pool(int id) {
    return id < num_layers() ? pools[std::size_t(id)] : switch_pools[std::size_t(id - num_layers())];
  }
  const LayerPool& pool(int id) const {
    return id < num_layers() ? pools[std::size_t(id)] : switch_pools[std::size_t(id - num_layers())];
  }
  // The bytes of `layer` a row reaching `tokens` holds at most (projected_bytes,
  // per layer), less `kept` blocks of the pool it is in now.
  std::size_t projected_layer_bytes(int layer, int64_t tokens, int64_t step_tokens, bool switched,
                                    int64_t kept) const;
  // attach_prefix's limit: nothing past a precision switch.
  int64_t reuse_limit(int64_t max_tokens) const {
    return switch_after >= 0 ? std::min(max_tokens, switch_after) : max_tokens;
  }
  // The slot (kv_storage.h) of a row's position in `layer`; the block must be held.
  int64_t slot(const Row& r, int layer, int64_t position) const;
  // The most blocks of `layer` a row reaching `tokens` positions holds at
  // once (KvCache::projected_bytes, per layer).
  int64_t projected_blocks(int layer, int64_t tokens, int64_t step_tokens) const;
  Row& row(RowId id);
  const Row& row(RowId id) const;

  // Blocks and references, by pool id (for the prefix cache's blocks the
  // pool id is the layer).
  int32_t allocate(int pool_id);  // budget already reserved
  void acquire(int pool_id, int32_t id);
  void release(int pool_id, int32_t id);
  // Makes `bytes` available, evicting cache-only blocks if needed; throws
  // OutOfBlocks (having evicted nothing) if even eviction would not do.
  void reserve(std::size_t bytes, const char* what);
  std::size_t available() const;
  // Allocates `count` blocks per pool id (num_pools() counts) all-or-nothing.
  std::vector<std::vector<int32_t>> allocate_all(const std::vector<int64_t>& count, const char* what);

  // Window layers: frees blocks wholly below length - W + 1.
  void settle(Row& r);
  // Whether publish() can register the row's blocks (its history starts at
  // 0 in full layers and nothing was stored at another precision).
  bool publishable(const Row& r) const;
  void release_row(Row& r);

  // Prefix cache.
  uint64_t child_key(int32_t parent, std::span<const int32_t> tokens) const;
  int32_t find_child(int32_t parent, std::span<const int32_t> tokens) const;
  int32_t add_entry(int32_t parent, std::span<const int32_t> tokens);
  // Drops the entry if it holds no block and has no children, then its
  // ancestors that this leaves empty.
  void drop_if_empty(int32_t entry);
  void drop_entry(int32_t entry);  // an empty leaf
  // A block of `entry` became cache-only / is held by a row again.
  void became_cache_only(int32_t entry, std::size_t bytes);
  void left_cache_only(int32_t entry, std::size_t bytes);
  // The cache lets go of entry's block in `layer` (freed if no row holds it).
  void unregister(int32_t entry, int layer);
  // Evicts the least recently used entry's cache-only blocks. When that
  // takes a full layer's block, no prefix through the entry can be attached
  // any more, so the entry and its descendants are dropped whole (no row
  // holds their blocks then: a row holding a descendant holds the entry's
  // full-layer blocks).
  void evict_one();
  // Unregisters every block of `entry` and its descendants, and drops them.
  void drop_subtree(int32_t entry);
  void enforce_prefix_budget();
  // The chain of entries matching tokens' full blocks from the root.
  std::vector<int32_t> walk(std::span<const int32_t> tokens) const;
  int64_t usable_prefix(const std::vector<int32_t>& chain, int64_t max_tokens) const;
};

}  // namespace rowlm::kv
