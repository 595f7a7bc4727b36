// Paged attention with the keys cut in fixed splits (flash-decoding), for the
// tensor-core precision: see attention_split in kv_kernels.h for the order.
//
// One thread block takes one (query token, KV head, group of up to
// kSplitHeads query heads of that KV head) and one split of
// kSplitPositions positions (split mode), or every split of the query in
// turn (inline mode). Split mode takes smaller groups (down to one head)
// while the blocks would not fill the GPU twice over: a decode step of one
// row then runs on heads × splits blocks instead of splits. Each head's
// arithmetic is its own, whichever group it is in. A split's K and V head sections are staged in shared
// memory by cp.async (all loads in flight at once; in chunks of whole KV
// blocks when they exceed kStageBytes). Within a split:
//   scores   thread (slot i, part j) sums q[d]·k[d] over d ≡ j (mod 4) in
//            increasing d with fmaf; score = ((p0 + p1) + (p2 + p3)) · scale;
//   softmax  one warp per head: the split's max, e = exp(score − max), and
//            l = Σ e, lane j summing slots j, j + 32 in order, then the
//            butterfly over lanes (xor 16, 8, 4, 2, 1);
//   values   thread d sums e_i · v_i[d] over the split's slots in order (fmaf).
// Then the split's (m, l, o) is merged into the query's running state in
// split order (merge_split): in registers (inline mode), or, in split mode,
// by the last of a query's split blocks to finish, reading the splits'
// partials. Both modes perform the same operations on the same values, so
// the launcher may pick either from the batch's size without changing a bit.

#include <cstdint>

#include "backend/cuda/attention_merge.cuh"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kv_device.cuh"
#include "backend/cuda/kv_kernels.h"

namespace rowlm::cuda {
namespace {

constexpr int kSplitThreads = 256;
constexpr int kSplitParts = kSplitThreads / kSplitPositions;  // threads scoring one slot
constexpr int kSplitFeatures = 512 / kSplitThreads;           // value features per thread (head_dim ≤ 512)
static_assert(kSplitParts == 4, "the score's sum is written for four parts");
static_assert(kSplitPositions % 32 == 0 && kSplitHeads <= kSplitThreads / 32, "one warp per head, whole warps of slots");

// Feature d of the key in slot i of a K head section (feature-major), for a
// codec known at compile time (the dense codecs by one aligned load).
template <int kCodec>
__device__ __forceinline__ float key_of(const KvLayout& L, const uint8_t* kh, int i, int d) {
  const int64_t at = int64_t(d) * L.block_size + i;
  if constexpr (kCodec == kF32) return reinterpret_cast<const float*>(kh)[at];
  if constexpr (kCodec == kBF16) return bf16_to_f32(reinterpret_cast<const uint16_t*>(kh)[at]);
  if constexpr (kCodec == kF16) return f16_to_f32(reinterpret_cast<const uint16_t*>(kh)[at]);
  return key_at(L, kh, i, d);
}

template <int kCodec>
__device__ __forceinline__ float value_of(const KvLayout& L, const uint8_t* rec, int d) {
  if constexpr (kCodec == kF32) return reinterpret_cast<const float*>(rec)[d];
  if constexpr (kCodec == kBF16) return bf16_to_f32(reinterpret_cast<const uint16_t*>(rec)[d]);
  if constexpr (kCodec == kF16) return f16_to_f32(reinterpret_cast<const uint16_t*>(rec)[d]);
  return value_at(L, rec, d);
}

// The first kHeads of kSplitHeads per-head values stored together (q of
// one feature, e of one slot), in as few shared-memory loads as they take.
template <int kHeads>
__device__ __forceinline__ void heads_at(const float* p, float (&v)[kHeads]) {
  if constexpr (kHeads % 4 == 0) {
#pragma unroll
    for (int h = 0; h < kHeads; h += 4) {
      const float4 x = *reinterpret_cast<const float4*>(p + h);
      v[h] = x.x;
      v[h + 1] = x.y;
      v[h + 2] = x.z;
      v[h + 3] = x.w;
    }
  } else {
#pragma unroll
    for (int h = 0; h < kHeads; ++h) v[h] = p[h];
  }
}

struct SplitArgs {
  SplitPartials part;        // split mode; part.splits: grid.y, at least every query's split count
  int* arrivals = nullptr;   // split mode: a count per block column (grid.x), zero before and after
  int heads_per_block = kSplitHeads;  // query heads of a group (at most kSplitHeads)
  int head_groups = 1;       // blocks per (token, KV head)
};

// Shared memory: q [head_dim][kSplitHeads], the score parts
// [kSplitParts][kSplitHeads][P], e [P][kSplitHeads], m and l [kSplitHeads],
// whether this block is its query's last (split mode), then the staged K/V
// sections (stage_bytes: kStageBytes, or one section
// where a KV block's head section is larger).
constexpr int kStageBytes = 64 * 1024;
struct SplitSmem {
  float* q;
  float* parts;
  float* e;
  float* m;
  float* l;
  int* last;
  uint8_t* stage;
};
__host__ __device__ __forceinline__ int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }
__host__ __device__ __forceinline__ int64_t split_floats(int hd) {
  return int64_t(kSplitHeads) * hd + kSplitParts * kSplitHeads * kSplitPositions + kSplitHeads * kSplitPositions +
         2 * kSplitHeads + 1;
}
__device__ __forceinline__ SplitSmem carve(float* base, int hd) {
  SplitSmem s;
  s.q = base;
  s.parts = s.q + kSplitHeads * hd;
  s.e = s.parts + kSplitParts * kSplitHeads * kSplitPositions;
  s.m = s.e + kSplitHeads * kSplitPositions;
  s.l = s.m + kSplitHeads;
  s.last = reinterpret_cast<int*>(s.l + kSplitHeads);
  s.stage = reinterpret_cast<uint8_t*>(base) + round16(split_floats(hd) * int64_t(sizeof(float)));
  return s;
}
__host__ __device__ __forceinline__ int64_t stage_bytes(const KvLayout& L) {
  const int64_t section = round16(L.k_head_bytes);
  return section > kStageBytes ? section : kStageBytes;
}
std::size_t split_smem_bytes(const KvLayout& L) {
  return std::size_t(round16(split_floats(L.head_dim) * int64_t(sizeof(float))) + stage_bytes(L));
}

// kHeads: the most query heads a block takes (sa.heads_per_block), the size
// of the per-head register arrays.
template <int kCodec, bool kInline, int kHeads>
__global__ void __launch_bounds__(kSplitThreads) attention_split_kernel(KvLayout L, KvBlocks blocks, AttentionArgs a,
                                                                   SplitArgs sa) {
  allow_dependents();
  extern __shared__ __align__(16) float split_smem[];
  const int hd = L.head_dim, bs = L.block_size, tid = int(threadIdx.x);
  const SplitSmem sm = carve(split_smem, hd);
  const int G = a.heads / L.kv_heads;
  int64_t x = blockIdx.x;
  const int group = int(x % sa.head_groups);
  x /= sa.head_groups;
  const int kvh = int(x % L.kv_heads);
  // Inline mode walks a query's splits in one block: the last queries of a
  // prompt have the most, so they go first (the short ones fill the tail).
  const int64_t t = kInline ? a.T - 1 - int64_t(x / L.kv_heads) : int64_t(x / L.kv_heads);
  const int h0 = kvh * G + group * sa.heads_per_block;
  const int nh = min(sa.heads_per_block, G - group * sa.heads_per_block);
  const int64_t lo = a.lo[t], hi = a.hi[t];
  const int64_t n_splits = split_count(lo, hi);
  float* out = a.out + (t * a.heads + h0) * hd;
  if (n_splits == 0) {
    if (kInline || blockIdx.y == 0)
      for (int i = tid; i < nh * hd; i += kSplitThreads) out[i] = 0.0f;
    return;
  }
  const int64_t s_begin = kInline ? 0 : blockIdx.y;
  const int64_t s_end = kInline ? n_splits : s_begin + 1;
  if (s_begin >= n_splits) return;
  const int32_t* table = a.tables + a.table_offset[t];
  const float* q = a.q + (t * a.heads + h0) * hd;
  // q feature-major, heads innermost ([d][kSplitHeads], zeros past nh): a
  // thread scoring feature d reads its heads' q in vector loads.
  for (int i = tid; i < kSplitHeads * hd; i += kSplitThreads) {
    const int d = i / kSplitHeads, h = i % kSplitHeads;
    sm.q[i] = h < nh ? q[h * hd + d] : 0.0f;
  }

  // The running state (inline mode) of this thread's features, per head.
  float run_o[kHeads][kSplitFeatures], run_m[kHeads], run_l[kHeads];
#pragma unroll
  for (int h = 0; h < kHeads; ++h) {
    run_m[h] = neg_inf();
    run_l[h] = 0.0f;
#pragma unroll
    for (int f = 0; f < kSplitFeatures; ++f) run_o[h][f] = 0.0f;
  }
  const int slot = tid % kSplitPositions, part = tid / kSplitPositions;
  const int warp = tid / 32, lane = tid % 32;

  for (int64_t s = s_begin; s < s_end; ++s) {
    const int64_t base = (lo / kSplitPositions + s) * kSplitPositions;
    const int64_t first = lo > base ? lo : base;
    const int64_t last = hi < base + kSplitPositions - 1 ? hi : base + kSplitPositions - 1;
    const int count = int(last - first + 1);
    // The split's KV blocks, staged a chunk of whole blocks at a time: K
    // and V together when both fit, else K chunks for the scores, then V
    // chunks for the values.
    const int64_t b_first = first / bs, b_last = last / bs;
    const int n_blocks = int(b_last - b_first + 1);
    const int64_t section = round16(L.k_head_bytes);  // a K or a V head section (the same size)
    const int per_chunk = int(stage_bytes(L) / section);  // at least one section (stage_bytes)
    const bool together = 2 * n_blocks <= per_chunk;
    auto stage = [&](int64_t b0, int64_t b1, bool keys, uint8_t* dst) {
      for (int64_t b = b0; b < b1; ++b) {
        const uint8_t* blk = block_at(blocks, table[b]);
        const uint8_t* src = keys ? blk + int64_t(kvh) * L.k_head_bytes : blk + L.k_bytes + int64_t(kvh) * L.v_head_bytes;
        issue_bytes(dst + (b - b0) * section, src, L.k_head_bytes);
      }
    };
    // Scores, in parts.
    float dot[kHeads];
#pragma unroll
    for (int h = 0; h < kHeads; ++h) dot[h] = 0.0f;
    const int64_t p = first + slot;
    const int64_t b_slot = p / bs;
    const int i_slot = int(p % bs);
    const int chunk_blocks = together ? n_blocks : per_chunk;
    for (int64_t c0 = b_first; c0 <= b_last; c0 += chunk_blocks) {
      const int64_t c1 = c0 + chunk_blocks <= b_last + 1 ? c0 + chunk_blocks : b_last + 1;
      __syncthreads();  // q is written; the stage's last readers are done
      stage(c0, c1, true, sm.stage);
      if (together) stage(c0, c1, false, sm.stage + n_blocks * section);
      cp_async_wait_all();
      __syncthreads();
      if (slot < count && b_slot >= c0 && b_slot < c1) {
        const uint8_t* kh = sm.stage + (b_slot - c0) * section;
        for (int d = part; d < hd; d += kSplitParts) {
          const float k = key_of<kCodec>(L, kh, i_slot, d);
          float qd[kHeads];
          heads_at<kHeads>(sm.q + d * kSplitHeads, qd);
#pragma unroll
          for (int h = 0; h < kHeads; ++h)
            if (h < nh) dot[h] = fmaf(qd[h], k, dot[h]);
        }
      }
    }
#pragma unroll
    for (int h = 0; h < kHeads; ++h)
      if (h < nh) sm.parts[(part * kSplitHeads + h) * kSplitPositions + slot] = dot[h];
    __syncthreads();
    // Softmax over the split, one warp per head.
    if (warp < nh) {
      const int h = warp;
      constexpr int kPerLane = kSplitPositions / 32;
      float sc[kPerLane];
      float mx = neg_inf();
#pragma unroll
      for (int r = 0; r < kPerLane; ++r) {
        const int i = lane + 32 * r;
        const float* pp = sm.parts + h * kSplitPositions + i;
        constexpr int kStride = kSplitHeads * kSplitPositions;
        const float sum = __fadd_rn(__fadd_rn(pp[0], pp[kStride]), __fadd_rn(pp[2 * kStride], pp[3 * kStride]));
        sc[r] = i < count ? __fmul_rn(sum, a.scale) : neg_inf();
        mx = fmaxf(mx, sc[r]);
      }
#pragma unroll
      for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      float l = 0.0f;
#pragma unroll
      for (int r = 0; r < kPerLane; ++r) {
        const int i = lane + 32 * r;
        const float e = i < count ? attention_exp(__fsub_rn(sc[r], mx)) : 0.0f;
        sm.e[i * kSplitHeads + h] = e;
        l = __fadd_rn(l, e);
      }
#pragma unroll
      for (int o = 16; o > 0; o /= 2) l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, o));
      if (lane == 0) {
        sm.m[h] = mx;
        sm.l[h] = l;
      }
    }
    // Values, over the split's positions in order.
    float o[kHeads][kSplitFeatures];
#pragma unroll
    for (int h = 0; h < kHeads; ++h)
#pragma unroll
      for (int f = 0; f < kSplitFeatures; ++f) o[h][f] = 0.0f;
    for (int64_t c0 = b_first; c0 <= b_last; c0 += chunk_blocks) {
      const int64_t c1 = c0 + chunk_blocks <= b_last + 1 ? c0 + chunk_blocks : b_last + 1;
      const uint8_t* vs = sm.stage + (together ? n_blocks * section : 0);
      __syncthreads();  // e, m and l are written; (staging V) the keys' readers are done
      if (!together) {
        stage(c0, c1, false, sm.stage);
        cp_async_wait_all();
        __syncthreads();
      }
      const int64_t p0 = c0 * bs > first ? c0 * bs : first;
      const int64_t p1 = c1 * bs - 1 < last ? c1 * bs - 1 : last;
      for (int64_t pos = p0; pos <= p1; ++pos) {
        const int i = int(pos - first);
        const uint8_t* rec = vs + (pos / bs - c0) * section + (pos % bs) * L.head_bytes;
        float ei[kHeads];
        heads_at<kHeads>(sm.e + i * kSplitHeads, ei);
#pragma unroll
        for (int f = 0; f < kSplitFeatures; ++f) {
          const int d = tid + f * kSplitThreads;
          if (d >= hd) break;
          const float v = value_of<kCodec>(L, rec, d);
#pragma unroll
          for (int h = 0; h < kHeads; ++h)
            if (h < nh) o[h][f] = fmaf(ei[h], v, o[h][f]);
        }
      }
    }
    if (kInline) {
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        if (h >= nh) break;
        const MergeStep step = merge_split(run_m[h], run_l[h], sm.m[h], sm.l[h]);
#pragma unroll
        for (int f = 0; f < kSplitFeatures; ++f) run_o[h][f] = merge_output(run_o[h][f], o[h][f], step);
      }
    } else {
      for (int h = 0; h < nh; ++h) {
        const int64_t at = (t * a.heads + h0 + h) * sa.part.splits + s;
#pragma unroll
        for (int f = 0; f < kSplitFeatures; ++f) {
          const int d = tid + f * kSplitThreads;
          if (d < hd) sa.part.o[at * hd + d] = o[h][f];
        }
        if (tid == 0) {
          float* ml = sa.part.ml + sa.part.ml_at(t * a.heads + h0 + h, s, 0);
          ml[0] = sm.m[h];
          ml[1] = sm.l[h];
        }
      }
    }
  }
  if (kInline) {
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
      if (h >= nh) break;
#pragma unroll
      for (int f = 0; f < kSplitFeatures; ++f) {
        const int d = tid + f * kSplitThreads;
        if (d < hd) out[h * hd + d] = __fdiv_rn(run_o[h][f], run_l[h]);
      }
    }
    return;
  }
  // Split mode: the last of the query's split blocks to finish merges the
  // splits' partials in split order, exactly as inline mode merges them, and
  // leaves its arrival count at zero for the next launch; or the merge
  // runs apart (attention_merge_partials).
  if (sa.arrivals == nullptr) return;
  if (!last_split_block(sa.arrivals, blockIdx.x, n_splits, sm.last)) return;
  static_assert(kSplitThreads >= kSplitHeads);
  if (tid < nh) sm.l[tid] = merge_steps_in_place(sa.part, t * a.heads + h0 + tid, n_splits, 0);
  __syncthreads();
  for (int h = 0; h < nh; ++h) {
#pragma unroll
    for (int f = 0; f < kSplitFeatures; ++f) {
      const int d = tid + f * kSplitThreads;
      if (d >= hd) break;
      out[h * hd + d] = merged_output_by_steps(sa.part, t * a.heads + h0 + h, n_splits, hd, d, 0, sm.l[h]);
    }
  }
}

template <int kCodec>
void launch_split(const KvLayout& L, KvBlocks blocks, const AttentionArgs& args, const SplitArgs& sa, bool inline_mode,
                  cudaStream_t stream) {
  const std::size_t smem = split_smem_bytes(L);
  const dim3 grid(unsigned(args.T * L.kv_heads * sa.head_groups), inline_mode ? 1u : unsigned(sa.part.splits));
  if (inline_mode) {
    auto kernel = attention_split_kernel<kCodec, true, kSplitHeads>;
    if (smem > 48 * 1024) cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    kernel<<<grid, kSplitThreads, smem, stream>>>(L, blocks, args, sa);
  } else {
    auto kernel = sa.heads_per_block == 1   ? attention_split_kernel<kCodec, false, 1>
                  : sa.heads_per_block == 2 ? attention_split_kernel<kCodec, false, 2>
                  : sa.heads_per_block == 4 ? attention_split_kernel<kCodec, false, 4>
                                            : attention_split_kernel<kCodec, false, kSplitHeads>;
    if (smem > 48 * 1024) cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    kernel<<<grid, kSplitThreads, smem, stream>>>(L, blocks, args, sa);
  }
}

}  // namespace

std::size_t attention_split_smem_bytes(const KvLayout& layout) { return split_smem_bytes(layout); }

int attention_split_head_groups(int heads, int kv_heads, int heads_per_block) {
  const int G = heads / kv_heads;
  return (G + heads_per_block - 1) / heads_per_block;
}

std::size_t attention_split_scratch_floats(int64_t T, int heads, int head_dim, int splits) {
  return std::size_t(T) * std::size_t(heads) * std::size_t(splits) * std::size_t(head_dim + 2);
}

void attention_split(const KvLayout& layout, KvBlocks blocks, const AttentionArgs& args, int splits, float* scratch,
                     int* arrivals, cudaStream_t stream) {
  if (args.T == 0) return;
  SplitArgs sa;
  sa.part.splits = splits;
  const bool inline_mode = scratch == nullptr;
  // Split mode: halve the groups while the grid is under kFillBlocks.
  constexpr int64_t kFillBlocks = 256;
  while (!inline_mode && sa.heads_per_block > 1 &&
         args.T * layout.kv_heads * attention_split_head_groups(args.heads, layout.kv_heads, sa.heads_per_block) *
                 splits < kFillBlocks)
    sa.heads_per_block /= 2;
  sa.head_groups = attention_split_head_groups(args.heads, layout.kv_heads, sa.heads_per_block);
  const bool apart = !inline_mode && merge_apart(splits);
  if (!inline_mode) {
    sa.arrivals = apart ? nullptr : arrivals;
    sa.part.o = scratch;
    sa.part.ml = scratch + std::size_t(args.T) * args.heads * splits * layout.head_dim;
  }
  switch (layout.codec) {
    case kF32: launch_split<kF32>(layout, blocks, args, sa, inline_mode, stream); break;
    case kBF16: launch_split<kBF16>(layout, blocks, args, sa, inline_mode, stream); break;
    case kF16: launch_split<kF16>(layout, blocks, args, sa, inline_mode, stream); break;
    case kQ8: launch_split<kQ8>(layout, blocks, args, sa, inline_mode, stream); break;
    default: launch_split<kQ4>(layout, blocks, args, sa, inline_mode, stream); break;
  }
  if (apart) attention_merge_partials(sa.part, args.lo, args.hi, args.T, args.heads, layout.head_dim, args.out, stream);
}

}  // namespace rowlm::cuda
