#pragma once
// What a backend keeps of the KV cache: the bytes. The KV module (src/kv)
// keeps the books (rows, block tables, reference counts, rounds, the prefix
// cache) and, for every operation that touches bytes, hands the backend a
// plain description of which blocks and slots it means.
//
// A KvArena holds the blocks of one storage layer on the backend's device,
// addressed by block id 0..blocks()-1. A *slot* is one token position of
// one block: slot = block_id · block_size + offset. How a block arranges its
// tokens is the backend's choice (the CPU backend lays keys feature-major
// for its kernel); what goes in and out of kv_store / kv_read is always the
// canonical token record of kvcodec/codec.h, so rows move byte-exact between
// backends and files.

#include <cstddef>
#include <cstdint>
#include <span>

#include "kvcodec/codec.h"

namespace rowlm {

class KvArena {
 public:
  virtual ~KvArena() = default;
  virtual const kv::LayerSpec& spec() const = 0;
  virtual int block_size() const = 0;
  // Device bytes of one block (what the KV budget accounts).
  virtual std::size_t block_bytes() const = 0;
  virtual int64_t blocks() const = 0;
  // Makes blocks [0, count) exist; blocks that exist keep their bytes and
  // addresses. Throws OutOfMemory (having added nothing) when the device
  // cannot hold them.
  virtual void grow(int64_t count) = 0;
  // Idle memory back to the system. `free_blocks` lists blocks (distinct,
  // each < blocks()) that no row or cache holds: their bytes will be written
  // before anything reads them again. The arena may return the memory of
  // whole pages (the CPU) or whole chunks (the GPU) of them; a block given
  // back is handed out again only after reclaim(). Returns the bytes handed
  // back. Not for the decode path (a system call per run of free blocks);
  // called when the engine goes idle. Threads: like grow(), with no kernel
  // touching the arena. Default: keeps everything.
  virtual std::size_t release_free_blocks(std::span<const int32_t> free_blocks) {
    (void)free_blocks;
    return 0;
  }
  // `block`, free until now, is about to be handed out and written: its
  // memory is made present again if release_free_blocks gave it back (its
  // bytes are then unspecified until written). Throws OutOfMemory, having
  // changed nothing, when the device cannot hold it. Cheap when nothing was
  // given back. Default: nothing (host pages come back on their first
  // write).
  virtual void reclaim(int32_t block) { (void)block; }
  // Bytes of this arena resident in memory now, as the system reports it
  // (what release_free_blocks lowers). Default: every block's.
  virtual std::size_t resident_bytes() const { return std::size_t(blocks()) * block_bytes(); }
};

// Copy-on-write: block `dst` becomes a copy of block `src`.
struct KvBlockCopy {
  int32_t src = 0;
  int32_t dst = 0;
};

// The keys one query token reads: positions [lo, hi] of one row, through
// that row's block table (table index → block id; position p lives in slot
// p % block_size of block table[p / block_size]). hi < lo: the query sees
// no key and its output is zero.
struct KvKeyRange {
  int32_t table = 0;  // index into AttentionBatch::tables
  int64_t lo = 0;
  int64_t hi = -1;
};

struct AttentionBatch {
  std::span<const std::span<const int32_t>> tables;  // block tables of the rows read
  std::span<const KvKeyRange> queries;               // one per query token, in q's order
};

struct AttentionParams {
  int num_heads = 0;      // query head h reads KV head h / (num_heads / kv_heads)
  int head_dim = 0;
  int window = 0;         // 0 = full causal; the KV module folds it into each range
  float scale = 1.0f;     // multiplies q·k
  float softcap = 0.0f;   // 0 = off; else scores = softcap · tanh(scores / softcap)
};

}  // namespace rowlm
