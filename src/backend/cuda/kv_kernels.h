#pragma once
// Launchers of the CUDA backend's KV kernels (kv_kernels.cu): writing K/V with
// the codec's encoding, copying blocks, reading and storing canonical token
// records, and paged attention. The blocks have the CPU backend's layout
// (backend/kv_block_layout.h) and the arithmetic is the CPU kernels', so both
// backends hold and compute the same bits.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace rowlm::cuda {

// The block layout as plain numbers, for the kernels.
struct KvLayout {
  int codec = 0;  // kv::Codec
  int head_dim = 0, bits = 0, group_size = 0, groups = 0, elem_bytes = 0;
  int kv_heads = 0, block_size = 0;
  int64_t value_bytes = 0, head_bytes = 0;
  int64_t k_head_bytes = 0, k_bytes = 0, v_head_bytes = 0, block_bytes = 0;
  int64_t k_scales_offset = 0, k_biases_offset = 0;
#ifdef __CUDACC__
  __host__ __device__
#endif
  int64_t record_bytes() const { return 2 * int64_t(kv_heads) * head_bytes; }
};

// Where the arena's blocks are: block id b is at chunks[b / chunk_blocks] +
// (b % chunk_blocks) · block_bytes.
struct KvBlocks {
  uint8_t* const* chunks = nullptr;  // device array of chunk addresses
  int64_t chunk_blocks = 0;
  int64_t block_bytes = 0;
};

// Encodes token t's K and V ([T, kv_heads·head_dim] f32) into slots[t].
void kv_write(const KvLayout& layout, KvBlocks blocks, const int64_t* slots, int64_t T, const float* k,
              const float* v, cudaStream_t stream);
// Copies block src[i] to dst[i].
void kv_copy_blocks(const KvLayout& layout, KvBlocks blocks, const int32_t* src, const int32_t* dst, int64_t n,
                    cudaStream_t stream);
// Canonical records of slots[i] into records (n · record_bytes), and back.
void kv_read(const KvLayout& layout, KvBlocks blocks, const int64_t* slots, int64_t n, uint8_t* records,
             cudaStream_t stream);
void kv_store(const KvLayout& layout, KvBlocks blocks, const int64_t* slots, int64_t n, const uint8_t* records,
              cudaStream_t stream);

// Attention of T query tokens: query t reads keys [lo[t], hi[t]] (none when
// hi < lo) of the row whose block table starts at tables[table_offset[t]].
struct AttentionArgs {
  const float* q = nullptr;  // [T, heads, head_dim]
  float* out = nullptr;
  const int32_t* tables = nullptr;
  const int64_t* table_offset = nullptr;
  const int64_t* lo = nullptr;
  const int64_t* hi = nullptr;
  int64_t T = 0;
  int heads = 0;
  float scale = 1.0f;
};
void attention(const KvLayout& layout, KvBlocks blocks, const AttentionArgs& args, cudaStream_t stream);
// Shared memory a block of attention() needs for this layout (a KV block's
// head sections are staged whole).
std::size_t attention_smem_bytes(const KvLayout& layout);

// The same attention with the keys cut in splits of kSplitPositions
// positions at fixed multiples (attention_split.cu): each split is scored and
// softmaxed on its own, and the splits' (max, sum, output) are merged in
// increasing order. Every query's bits depend only on its own q, keys and
// range, whatever the batch and whichever mode runs: with `scratch` (at least
// attention_split_scratch_floats(T, heads, head_dim, splits) floats; `splits`
// at least every query's number of splits) one block per split, the last of
// a query's to finish merging them (or, past kMergeApartSplits splits, a
// second launch merging every query's partials in parallel, same bits:
// attention_merge.cuh), which fills the GPU when few queries run (decode;
// `arrivals`: kAttentionArrivals ints, zero before, left zero; at most
// T · kv_heads · ceil(heads / kv_heads) blocks per split count there);
// with scratch == nullptr one block per query walking its splits in turn
// (prefill). A different order from attention() above (the CPU's), for the
// tensor-core precision, where no CPU equality is promised; q, out, the
// tables and the ranges as there.
inline constexpr int kSplitPositions = 64;
inline constexpr int kSplitHeads = 8;  // query heads of one KV head per thread block
// Thread blocks per (query, KV head) with groups of `heads_per_block` query heads.
int attention_split_head_groups(int heads, int kv_heads, int heads_per_block = kSplitHeads);
// Shared memory a block of attention_split needs for this layout.
std::size_t attention_split_smem_bytes(const KvLayout& layout);
std::size_t attention_split_scratch_floats(int64_t T, int heads, int head_dim, int splits);
inline constexpr int64_t kAttentionArrivals = 1 << 16;
void attention_split(const KvLayout& layout, KvBlocks blocks, const AttentionArgs& args, int splits, float* scratch,
                     int* arrivals, cudaStream_t stream);

// The same contract on tensor cores (attention_mma.cu), for the layouts
// attention_mma_supports (bf16 KV, head_dim a multiple of 16 up to 512, KV
// blocks of a multiple of 8 positions): scores and values by mma.sync with
// the f32 operands (q, the softmax weights) split into three bf16 terms, so
// no bit of them is lost. Its own order, not attention_split's: the layout
// picks one kernel for every call, so a query's bits still never depend on
// the batch. Split mode (`scratch` of attention_mma_scratch_floats, as
// above) cuts each head's value columns into `groups` groups (any power of
// two attention_mma_column_groups may pick: the grouping never changes a bit)
// and runs attention_mma_split_columns(T, groups) block columns (at most
// kAttentionArrivals); inline mode (scratch == nullptr, groups ignored) runs
// attention_mma_inline_blocks(T) blocks; the arguments otherwise as
// attention_split's.
bool attention_mma_supports(const KvLayout& layout);
std::size_t attention_mma_smem_bytes(const KvLayout& layout);  // the most either mode needs
int64_t attention_mma_inline_blocks(const KvLayout& layout, int64_t T, int heads);
int64_t attention_mma_split_columns(const KvLayout& layout, int64_t T, int heads, int groups);
// Column groups for split mode: the most whose blocks still fit one wave.
int attention_mma_column_groups(const KvLayout& layout, int64_t T, int heads, int64_t most_splits, int64_t sms);
std::size_t attention_mma_scratch_floats(int64_t T, int heads, int head_dim, int splits, int groups);
void attention_mma(const KvLayout& layout, KvBlocks blocks, const AttentionArgs& args, int splits, int groups,
                   float* scratch, int* arrivals, cudaStream_t stream);

}  // namespace rowlm::cuda
