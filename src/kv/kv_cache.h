#pragma once
// Row-structured paged KV storage (../shared/docs/kv-rows.md).
//
// A KvCache holds the K/V of every storage layer of a model for many rows.
// Each row has its own length and, per layer, a block table; rows advance,
// roll back, join and leave independently. This header is the part the
// forward pass uses; row operations for the engine live beside it.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace rowlm::kv {

enum class Codec : uint8_t { F32, BF16, F16, Q8, Q4 };

struct CodecSpec {
  Codec codec = Codec::BF16;
  int group_size = 64;  // quantized codecs only: 32, 64 or 128
  bool operator==(const CodecSpec&) const = default;
};

// "f32", "bf16", "f16", "q8", "q4", optionally with a group: "q4:32".
CodecSpec parse_codec(std::string_view text);
std::string codec_name(const CodecSpec& c);

// One storage layer: the K/V geometry of an attention layer that owns its
// cache (KV-shared layers read their donor's storage layer).
struct LayerSpec {
  int kv_heads = 0;
  int head_dim = 0;
  int window = 0;  // 0 = full attention; else keys p-window < j <= p are visible
  CodecSpec codec;
  bool operator==(const LayerSpec&) const = default;
};

struct CacheOptions {
  std::vector<LayerSpec> layers;
  int block_size = 16;             // token positions per block
  std::size_t capacity_bytes = 0;  // pool budget for all layers' blocks
};

using RowId = int32_t;

// Thrown when the pool cannot hold what an operation needs. The operation
// has changed nothing.
class OutOfBlocks : public Error {
 public:
  using Error::Error;
};

class KvCache {
 public:
  explicit KvCache(CacheOptions options);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  const CacheOptions& options() const;
  int num_layers() const;
  const LayerSpec& layer(int index) const;

  RowId create_row();
  // Releases the row's blocks; the id is not reused by later rows.
  void retire(RowId row);
  // Tokens stored for the row; also the position of its next token.
  int64_t length(RowId row) const;

  // --- One forward step -------------------------------------------------
  // Reserves room for counts[i] tokens after the current length of rows[i]
  // in every layer. Throws OutOfBlocks and changes nothing if they don't fit.
  void begin_step(std::span<const RowId> rows, std::span<const int32_t> counts);
  // Stores `count` tokens of the row's pending step in `layer`, starting at
  // absolute position `first` (length(row) <= first, first + count <= the
  // reserved end). k and v are [count, kv_heads, head_dim] f32; quantized
  // codecs quantize here, once.
  void write(int layer, RowId row, int64_t first, int count, const float* k, const float* v);
  // Makes the pending tokens part of each row (length += count).
  void end_step();
  // Drops the pending step (after a failed forward): rows are as before begin_step.
  void abort_step();

  // Memory accounting.
  std::size_t bytes_per_token(int layer) const;
  std::size_t used_bytes() const;
  std::size_t free_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rowlm::kv
