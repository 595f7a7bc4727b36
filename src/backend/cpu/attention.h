#pragma once
// The CPU attention driver: splits a batch of queries into work items
// (query token × group of query heads of one kv head) over the thread pool
// and runs the ISA's kernel (attention_kernel.inl) on each. When there are
// too few (query token, kv head) pairs to give every thread a whole one, the
// heads of a pair are split over items and each block is converted to f32
// once, by one item, into a tile that the fold items then read: windows of
// blocks (bounded scratch, never a whole long row) go through two phases,
// conversion spread over blocks and folding over groups of heads.
//
// Keys are reduced in a fixed order of fixed-size splits that depend only
// on the row's own positions (one split per block, blocks at multiples of
// the block size), so a token's output is bitwise the same whatever other
// rows exist, where its blocks sit in the arena, or in what order rows
// joined. Within a split the block's keys are dequantized into a small f32
// tile (never a whole row), scored in a fixed lane order, and folded into an
// online softmax in increasing position order. The result is also bitwise
// the same for any thread count and on every instruction-set path: one
// kernel source is compiled for each, with every rounding written out.

#include <cstddef>
#include <cstdint>

#include "backend/cpu/attention_kernel_types.h"
#include "backend/cpu/attention_scratch.h"
#include "backend/cpu/kernels.h"
#include "backend/kv_block_layout.h"
#include "backend/kv_storage.h"
#include "core/thread_pool.h"

namespace rowlm::cpu {

// The kernel's view of a block layout.
AttentionLayer attention_layer(const KvBlockLayout& layout);
// Floats of one-phase scratch (one work item of `heads` heads), of one
// block's tile, and of the fold state of `heads` heads (a multiple of 16).
std::size_t attention_scratch_floats(const AttentionLayer& layer, int heads);
std::size_t attention_tile_floats(const AttentionLayer& layer);
std::size_t attention_fold_state_floats(const AttentionLayer& layer, int heads);

// q and out: [batch.queries.size(), params.num_heads, head_dim] f32, host.
// `blocks[id]` is the address of block id. Arguments were validated by the
// caller (the backend and the KV module). `scratch` is reused between calls.
void attend(const Kernels& kernels, ThreadPool& pool, AttentionScratch& scratch, const KvBlockLayout& layout,
            std::byte* const* blocks, const AttentionBatch& batch, const float* q, const AttentionParams& params,
            float* out);

}  // namespace rowlm::cpu
