#pragma once
// The CPU attention driver: splits a batch of queries into work items
// (query token × group of query heads of one kv head) over the thread pool
// and runs the ISA's kernel (attention_kernel.inl) on each.
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
#include "backend/cpu/kernels.h"
#include "backend/kv_block_layout.h"
#include "backend/kv_storage.h"
#include "core/thread_pool.h"

namespace rowlm::cpu {

// The kernel's view of a block layout.
AttentionLayer attention_layer(const KvBlockLayout& layout);
std::size_t attention_scratch_floats(const AttentionLayer& layer, int heads);

// q and out: [batch.queries.size(), params.num_heads, head_dim] f32, host.
// `blocks[id]` is the address of block id. Arguments were validated by the
// caller (the backend and the KV module).
void attend(const Kernels& kernels, ThreadPool& pool, const KvBlockLayout& layout, std::byte* const* blocks,
            const AttentionBatch& batch, const float* q, const AttentionParams& params, float* out);

}  // namespace rowlm::cpu
