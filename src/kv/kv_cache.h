#pragma once
// Row-structured paged KV storage (docs/design/kv-rows.md).
//
// A KvCache keeps the books of every storage layer of a model for many rows:
// rows, block tables, reference counts, speculative rounds, the prefix cache
// and the byte accounting. The bytes themselves live in one arena per layer
// that the backend allocated (backend/kv_storage.h), on the backend's device;
// every operation that touches them (writing K/V with the codec's encoding,
// copy-on-write, attention, extract/restore) hands the backend a plain
// description of the blocks and slots it means.
//
// Each row has its own length and, per layer, a block table; rows advance,
// roll back, join and leave independently. The first part of the class is
// what the forward pass uses; the row operations for the engine follow.
//
// Storage. Every layer has its own pool of blocks; a block holds
// `block_size` consecutive positions of one row (or of several rows that
// share it by reference count). Blocks sit at absolute positions: position p
// of a row is slot p % block_size of its block p / block_size, so attention
// splits at multiples of the block size depend only on the row's positions.
// Tokens are encoded once, when written (quantized codecs quantize then);
// every later operation moves bytes unchanged.
//
// Window layers (window W > 0). A query at position p sees keys
// p - W < j <= p. A row keeps the blocks holding positions >= length - W + 1
// (what its next query needs) and frees blocks wholly older than that when
// its length settles: at end_step outside a speculative round, at
// commit_round / rollback_round inside one (a rollback may need them again).
//
// Failure atomicity. Every operation either succeeds or throws rowlm::Error
// (OutOfBlocks for capacity) and leaves every row exactly as it was. The
// prefix cache may have evicted unused blocks before a capacity failure is
// known; that changes no row.
//
// Threads. One caller at a time (the backend runs one operation at a time).
// One exception, for a model whose shards run on threads of their own:
// while a step is open and no other call is in flight, write and attend of
// different storage layers may run at once on different threads, each
// layer's calls on one thread and its backend (layer_backend) called by no
// one else meanwhile. They only read the books begin_step settled (rows,
// block tables, reference counts) and write through their layer's arena.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "core/tensor.h"
#include "kvcodec/codec.h"

namespace rowlm::kv {

// Switching a row's KV precision after N positions (mlx-lm's
// quantized_kv_start, mlx-bun's maybeQuantizeKv; docs/kv.md). A row that
// holds `after` positions moves to `codecs` before it appends more: its
// stored positions are re-encoded (kv::transcode_records) into blocks of the
// layer's switch pool, its later tokens are written in the new codec, and
// its minimum reusable offset becomes `after`. So a query at a position
// below `after` reads the layer's codec and one at or past it reads the new
// one, whatever the schedule: begin_step refuses a step that would carry an
// unswitched row across `after`, and the caller switches a row when
// switch_due() says so (the engine does before each forward).
struct PrecisionSwitch {
  int64_t after = 0;
  // Per storage layer: the codec its rows move to; the layer's own codec
  // means the layer does not switch. At least one layer must switch.
  std::vector<CodecSpec> codecs;
};

struct CacheOptions {
  std::vector<LayerSpec> layers;
  int block_size = 16;             // token positions per block
  std::size_t capacity_bytes = 0;  // pool budget for all layers' blocks; 0 = no limit
  // Bytes the prefix cache may keep in blocks that no row references (least
  // recently used go first). 0 = keep a published block only while a row uses it.
  std::size_t prefix_cache_bytes = 0;
  std::optional<PrecisionSwitch> precision_switch;  // none: rows keep their codecs
  // Where each storage layer's arenas live (tensor parallelism: a split
  // model's shard s's layers on shard s's device, Model::kv_backends()).
  // Empty, or one entry per layer (null: the cache's backend); every call
  // that touches a layer's bytes (write, attend, block copies, extract,
  // restore, the precision switch) runs on that layer's backend, and its
  // K/V/q/out tensors must be that backend's. The backends must outlive
  // the cache. An Error when the count does not match the layers.
  std::vector<Backend*> layer_backends;
};

using RowId = int32_t;

// Thrown when the pool cannot hold what an operation needs. The operation
// has changed nothing.
class OutOfBlocks : public Error {
 public:
  using Error::Error;
};

struct RowCache;  // row_cache.h: one row, standalone, savable

// `count` consecutive tokens of one row starting at `position`: how a step's
// tokens are grouped. In a step's K/V (and q) tensors the runs' tokens are
// consecutive rows, in the order of the runs.
struct TokenRun {
  RowId row = 0;
  int64_t position = 0;
  int32_t count = 0;
};

// Which keys a query token sees: its row's positions j with
// max(0, position - window + 1) <= j <= position (window 0 = unbounded),
// and j < key_limit when key_limit >= 0 (a donor view: a drafter reading
// the target's rows up to their verified length, as the Gemma 4 assistant
// drafter does). The keys must be stored
// (written in this or an earlier step); a query that sees no key at all
// gets a zero output.
struct AttentionQuery {
  RowId row = 0;
  int64_t position = 0;
  int64_t key_limit = -1;
};

class KvCache {
 public:
  // `backend` allocates the layers' arenas and moves their bytes; it must
  // outlive the cache.
  KvCache(CacheOptions options, Backend& backend);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;
  KvCache(KvCache&&) noexcept;
  KvCache& operator=(KvCache&&) noexcept;

  const CacheOptions& options() const;
  Backend& backend() const;
  // The backend storage layer `layer`'s arenas live on (CacheOptions::layer_backends).
  Backend& layer_backend(int layer) const;
  int num_layers() const;
  const LayerSpec& layer(int index) const;
  std::string layout() const;  // layout_signature(options().layers)

  RowId create_row();
  // Releases the row's blocks (blocks it published stay in the prefix cache);
  // the id is not reused by later rows.
  void retire(RowId row);
  // Tokens stored for the row; also the position of its next token.
  int64_t length(RowId row) const;

  // --- One forward step -------------------------------------------------
  // Reserves room for counts[i] tokens after the current length of rows[i]
  // in every layer. Throws OutOfBlocks and changes nothing if they don't fit.
  void begin_step(std::span<const RowId> rows, std::span<const int32_t> counts);
  // Stores the K/V of `runs` in `layer`: run i's tokens go to positions
  // [position, position + count) of its row (within what begin_step
  // reserved). k and v are backend tensors [T, kv_heads · head_dim] f32, T
  // the runs' total count, tokens in run order; quantized codecs quantize
  // here, once.
  void write(int layer, std::span<const TokenRun> runs, const Tensor& k, const Tensor& v);
  // out[t] = attention of q[t] ([T, heads, head_dim] f32, rotated) over the
  // keys queries[t] sees in `layer` (AttentionQuery), on the backend. Keys
  // are reduced in fixed-size splits along each row's own positions, so a
  // token's output does not depend on the other queries or rows. Throws
  // rowlm::Error (before computing anything) for an unknown row, mismatched
  // geometry, a window wider than the layer keeps, or keys not stored.
  void attend(int layer, std::span<const AttentionQuery> queries, const Tensor& q, const AttentionParams& params,
              Tensor& out) const;
  // Makes the pending tokens part of each row (length += count).
  void end_step();
  // Drops the pending step (after a failed forward): rows are as before begin_step.
  // (A shared block that begin_step copied for writing stays copied: same bytes.)
  void abort_step();
  bool step_open() const;
  // Tokens reserved for the row in the open step (0 if none).
  int64_t pending(RowId row) const;

  // Memory accounting.
  std::size_t bytes_per_token(int layer) const;
  std::size_t used_bytes() const;
  std::size_t free_bytes() const;  // capacity - used (SIZE_MAX when unlimited)
  // Hands the memory of free blocks (held by no row and not by the prefix
  // cache) back to the system, as far as the backend can (KvArena::
  // release_free_blocks); the books do not change and later allocations
  // take the memory back. For an idle engine, not between steps: it costs
  // a system call per run of free blocks and a pass over the pool, and
  // nothing when no block was freed since the last call. Not while a step
  // is open. Returns the bytes handed back.
  std::size_t release_free_memory();
  // Bytes of the arenas resident in memory now (KvArena::resident_bytes).
  std::size_t resident_bytes() const;

  // --- Row lifecycle (the engine) ----------------------------------------
  // The seed's mergeRows has four doors: create_row (empty), fork, restore
  // and attach_prefix. None of them moves another row's K/V.

  // A new row holding the same tokens as `parent` by sharing its blocks;
  // the first write into a shared block copies it (copy-on-write).
  RowId fork(RowId parent);
  // A standalone copy of the row (every layer, codec kept, length, minimum
  // reusable offset). With limit >= 0 only the last `limit` positions are
  // kept (a row restored from it attends only over those, like a truncated
  // context); window layers never keep more than the W - 1 positions their
  // next query sees. Not while the row has a pending step.
  RowCache extract(RowId row, int64_t limit = -1) const;
  // A new row from a saved one. Throws (changing nothing) when the layout
  // differs or the blocks do not fit. A row in switched_layers() is
  // restored switched.
  RowId restore(const RowCache& saved);
  // Drops the last `count` tokens (not inside a speculative round, not below
  // the minimum reusable offset, not below what a window layer still holds).
  // Blocks wholly past the new length are released.
  void trim(RowId row, int64_t count);
  // The smallest length trim() can reach (limited by the minimum reusable
  // offset, the first stored position and window layers' freed blocks).
  int64_t min_trim_length(RowId row) const;

  bool has_row(RowId row) const;
  int num_rows() const;
  std::vector<RowId> row_ids() const;  // ascending

  // Positions below this were stored at another precision (a precision
  // switch, or imported); prefix reuse and trims never cut below it, and
  // such a row publishes nothing. Carried by extract/restore.
  int64_t minimum_reusable_offset(RowId row) const;
  void set_minimum_reusable_offset(RowId row, int64_t offset);

  // --- Precision switch (CacheOptions::precision_switch) -----------------
  // Whether the row stores its switching layers in the switch codecs.
  bool switched(RowId row) const;
  // Whether the row must switch before it appends again: a switch is
  // configured and the unswitched row holds at least `after` positions.
  bool switch_due(RowId row) const;
  // Moves the row to the switch codecs: new blocks for every block it holds
  // in a switching layer, its positions re-encoded into them, the old
  // blocks released (to the prefix cache if it holds them; other rows
  // sharing them keep theirs), minimum reusable offset = max(itself,
  // length). Not inside a step or round; throws OutOfBlocks having changed
  // nothing when the new blocks do not fit beside the old ones.
  void switch_precision(RowId row);
  // The spec the row's K/V of `layer` is stored in (the switch codec once
  // the row switched): its token records are token_record_bytes() of it.
  const LayerSpec& row_layer(RowId row, int layer) const;
  // The layout of a switched row (what extract() gives for one, and what
  // restore() also takes); the cache's own layout when no switch is configured.
  std::vector<LayerSpec> switched_layers() const;

  // The first position whose K/V the row still holds in `layer` (0 unless
  // restored with a limit or a window layer freed older blocks).
  int64_t first_position(RowId row, int layer) const;

  // --- Speculative rounds ------------------------------------------------
  // begin_round records each row's length; steps may then append draft or
  // verification tokens. commit_round keeps everything appended;
  // rollback_round sets length = length at begin + keep[i] (0 <= keep[i] <=
  // tokens appended in the round). Blocks past the new length stay with the
  // row and are overwritten by its next step. Rows round independently.
  void begin_round(std::span<const RowId> rows);
  void commit_round(std::span<const RowId> rows);
  void rollback_round(std::span<const RowId> rows, std::span<const int64_t> keep);
  bool in_round(RowId row) const;

  // --- Prefix cache ------------------------------------------------------
  // Content-addressed full blocks: a block's key is its parent block's key,
  // its tokens and the layout. Published blocks are shared by reference
  // count; blocks no row uses stay cached within prefix_cache_bytes and are
  // evicted on demand before a capacity failure. Eviction takes whole chain
  // positions (every layer's block of one cached block position), least
  // recently released first; retire() releases a row tail first, so chains
  // shrink from their tails, and a position that lost a full layer's block
  // is dropped with its descendants (no prefix could use them).
  //
  // publish: registers the row's committed full blocks (positions below its
  // length, or below its round start inside a round). `tokens` are the
  // row's tokens from position 0 (at least that many). Cheap to call after
  // every step: it resumes where the last call stopped. Calling it while a
  // window layer still holds blocks is what lets later requests reuse a
  // prefix after the window has moved on. Rows with a minimum reusable
  // offset or a truncated history publish nothing. Returns the number of
  // positions now published.
  int64_t publish(RowId row, std::span<const int32_t> tokens);
  // While on, the row's window layers keep every block until publish() has
  // registered it (a prefill chunk longer than the window would otherwise
  // free blocks before the engine could publish them). The engine turns it
  // on for rows it will publish and calls publish() after each step.
  void retain_for_publish(RowId row, bool on = true);
  // Makes an empty row hold the longest cached prefix of `tokens` it can use,
  // at most `max_tokens` long (pass tokens.size() - 1 to leave one token to
  // compute). A full layer needs every block of the prefix, a window layer
  // only those covering its last W - 1 positions. With a precision switch
  // the prefix is at most `after` long: the cache holds blocks in the
  // layers' own codecs only, and positions past `after` are stored in the
  // switch codecs. The prefix may end inside a
  // block; the row's next write there copies it. Returns the reused length.
  int64_t attach_prefix(RowId row, std::span<const int32_t> tokens, int64_t max_tokens);
  // The length attach_prefix would reuse, without changing anything.
  int64_t match_prefix(std::span<const int32_t> tokens, int64_t max_tokens) const;
  // Drops every cached block no row uses, and forgets all keys.
  void clear_prefix_cache();
  // Bytes of blocks held only by the prefix cache (evictable on demand).
  std::size_t prefix_cache_bytes() const;
  // Number of cached blocks (all layers), in use by rows or not.
  int64_t prefix_cache_blocks() const;

  // --- Memory accounting for admission ------------------------------------
  // Bytes of one block of `layer` (K and V of block_size positions).
  std::size_t block_bytes(int layer) const;
  // Sum over layers of bytes_per_token(layer).
  std::size_t bytes_per_token() const;
  // An upper bound on the bytes a row reaching `tokens` positions will hold
  // if it appends at most `step_tokens` between settle points (the largest
  // prefill chunk, or the tokens of one speculative round):
  // Σ_layers blocks · block_bytes with blocks = ⌈tokens / B⌉ for full layers
  // and min(⌈tokens / B⌉, ⌈(W - 1 + step_tokens) / B⌉ + 1) for window layers.
  // A row that will pass a precision switch's `after` holds, per switching
  // layer, the larger of blocks(after) in both codecs at once (while it
  // re-encodes) and blocks(tokens) in the switch codec.
  std::size_t projected_bytes(int64_t tokens, int64_t step_tokens = 1) const;
  // Bytes of the blocks the row references (shared blocks counted in full).
  std::size_t row_bytes(RowId row) const;

  // Admission counts each byte once (kv_admission.cc). The room for rows
  // to grow into is free_bytes() + prefix_cache_bytes(): free blocks, and
  // blocks only the prefix cache holds (evicted on demand). What a row takes
  // of that room is the most blocks it will hold at once
  // (projected_bytes(target, step_tokens)) minus the blocks it already
  // holds, or would attach, that are not in the room and that it keeps.
  //
  // admission_bytes: a new row for `tokens` that attaches the prefix
  // attach_prefix(row, tokens, max_reuse) would give it and grows to
  // `target` positions. Attached blocks another row holds take no room;
  // blocks only the cache holds do (attaching pins them); a partially
  // reused block is copied on the first write, so it counts as a new one;
  // in window layers attached blocks count as new (the row lets them go as
  // its window moves).
  std::size_t admission_bytes(std::span<const int32_t> tokens, int64_t max_reuse, int64_t target,
                              int64_t step_tokens) const;
  // growth_bytes: what the row may still take to reach `target` positions:
  // projected_bytes(target, step_tokens) minus the blocks it holds and will
  // not copy (a shared block at or past its length will be copied; in window
  // layers a block another row also holds does not come back to the room
  // when the row lets it go, so it does not count as held). 0 for a row
  // already at or past target.
  std::size_t growth_bytes(RowId row, int64_t target, int64_t step_tokens) const;
  // Blocks currently allocated in `layer`'s pools (its codec's and, with a
  // precision switch, the switch codec's).
  int64_t blocks_in_use(int layer) const;

  // --- Inspection (tests and tools) ----------------------------------------
  // The canonical token record (codec.h) of `position` in `layer`; the
  // position must be held by the row. out.size() == token_record_bytes(layer).
  void read_token(int layer, RowId row, int64_t position, std::span<std::byte> out) const;
  std::size_t token_record_bytes(int layer) const;
  // The pool block holding block `index` of the row in `layer`, or -1.
  int32_t physical_block(int layer, RowId row, int64_t index) const;
  // Recomputes every reference count and byte total from the row tables and
  // the prefix cache; throws rowlm::Error describing the first mismatch.
  void check_consistency() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rowlm::kv
