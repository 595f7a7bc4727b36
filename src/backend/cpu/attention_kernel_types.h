#pragma once
// Plain data shared by the attention driver and the per-ISA kernel files.
// Deliberately free of standard-library types: see attention_kernel.inl.

#include <cstddef>
#include <cstdint>

#include "kvcodec/codec_id.h"

namespace rowlm::cpu {

using kv::Codec;

// Geometry of the storage layer, in the CPU block layout (kv_block_layout.h).
struct AttentionLayer {
  Codec codec = Codec::BF16;
  int head_dim = 0;
  int hd4 = 0;             // head_dim rounded up to 4 (score lanes)
  int hd16 = 0;            // head_dim rounded up to 16 (value lanes)
  int bits = 0;
  int group_size = 0;
  int groups = 0;
  int block_size = 0;
  int chunks = 0;          // ceil(block_size / 16)
  std::size_t head_bytes = 0;
  std::size_t value_bytes = 0;
  std::size_t k_head_bytes = 0;
  std::size_t k_scales_offset = 0;
  std::size_t k_biases_offset = 0;
  std::size_t k_bytes = 0;
  std::size_t v_head_bytes = 0;
};

// One unit of work: `heads` consecutive query heads of one query token, all
// reading kv head `kv_head`, over key positions [lo, hi] (lo <= hi).
struct AttentionWork {
  const int32_t* table = nullptr;      // the row's block table
  std::byte* const* blocks = nullptr;  // pool block id -> bytes
  int64_t lo = 0, hi = 0;
  int kv_head = 0;
  int heads = 0;
  const float* q = nullptr;            // [heads][head_dim]
  float* out = nullptr;                // [heads][head_dim]
  float scale = 1.0f;
  float softcap = 0.0f;
};

// Two-phase work (attention.h): step 1 of one block of one query's range
// [lo, hi], into `tile` (attention_tile_floats, 64-byte aligned).
struct AttentionTileWork {
  const std::byte* bytes = nullptr;  // the block
  int64_t block = 0;                 // its index in the row
  int64_t lo = 0, hi = 0;
  int kv_head = 0;
  float* tile = nullptr;
};

// Steps 2-3 of `heads` query heads over blocks first_block..last_block of
// [lo, hi], whose tiles sit `tile_stride` floats apart from `tiles`. `state`
// (attention_fold_state_floats) carries the online softmax from one call to
// the next: the call whose first block is lo's starts it, the one whose last
// block is hi's writes `out`.
struct AttentionFoldWork {
  const float* tiles = nullptr;
  std::size_t tile_stride = 0;
  int64_t first_block = 0, last_block = 0;
  int64_t lo = 0, hi = 0;
  int heads = 0;
  const float* q = nullptr;  // [heads][head_dim]
  float* out = nullptr;      // [heads][head_dim]
  float* state = nullptr;
  float scale = 1.0f;
  float softcap = 0.0f;
};

using AttentionKernelFn = void (*)(const AttentionLayer&, const AttentionWork&, float* scratch);
using AttentionTileFn = void (*)(const AttentionLayer&, const AttentionTileWork&);
using AttentionFoldFn = void (*)(const AttentionLayer&, const AttentionFoldWork&);

// One instruction set's compilation of attention_kernel.inl.
struct AttentionKernels {
  AttentionKernelFn attend = nullptr;  // one phase: a work item converts and folds its blocks
  AttentionTileFn tile = nullptr;
  AttentionFoldFn fold = nullptr;
};

extern const AttentionKernels attention_portable;
extern const AttentionKernels attention_avx2;
extern const AttentionKernels attention_avx512;

}  // namespace rowlm::cpu
