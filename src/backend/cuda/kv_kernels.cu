#include "backend/cuda/kv_kernels.h"

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kv_device.cuh"

namespace rowlm::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxHeadDim = 512;

int64_t blocks_for(int64_t threads) { return (threads + kThreads - 1) / kThreads; }

// Where byte r of a slot's canonical record (kvcodec/codec.h) lives in its
// block (backend/kv_block_layout.h: K feature-major per head, then scales
// and biases slot-minor; V token-major).
__device__ __forceinline__ int64_t record_byte_offset(const KvLayout& L, int64_t slot, int64_t r) {
  const int64_t hb = L.head_bytes, bs = L.block_size;
  const int64_t k_record = int64_t(L.kv_heads) * hb;
  if (r >= k_record) {
    r -= k_record;
    return L.k_bytes + (r / hb) * L.v_head_bytes + slot * hb + r % hb;
  }
  const int64_t base = (r / hb) * L.k_head_bytes, rr = r % hb;
  if (rr < L.value_bytes) {
    if (L.elem_bytes > 0) return base + ((rr / L.elem_bytes) * bs + slot) * L.elem_bytes + rr % L.elem_bytes;
    return base + rr * bs + slot;  // a q8 code, or a byte of two q4 codes
  }
  const int64_t p = rr - L.value_bytes, g = p / 2, b = p % 2;
  if (g < L.groups) return base + L.k_scales_offset + (g * bs + slot) * 2 + b;
  return base + L.k_biases_offset + ((g - L.groups) * bs + slot) * 2 + b;
}

__device__ __forceinline__ void put_byte(const KvLayout& L, uint8_t* block, int64_t slot, int64_t r, uint8_t v) {
  block[record_byte_offset(L, slot, r)] = v;
}

// One thread per (token, kv head, K or V, feature) for the dense codecs, per
// (…, group) for the quantized ones: the head vector encoded as kvcodec's
// encode_head does, byte by byte into its place. Each byte is a function of
// its own inputs, so how the work is split cannot change it.
__device__ __forceinline__ int kv_write_units(const KvLayout& L) {
  return L.codec == kF32 || L.codec == kBF16 || L.codec == kF16 ? L.head_dim : L.groups;
}

__global__ void kv_write_kernel(KvLayout L, KvBlocks blocks, const int64_t* slots, int64_t T, const float* k,
                                const float* v) {
  allow_dependents();
  const int units = kv_write_units(L);
  const int64_t item = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= T * L.kv_heads * 2 * units) return;
  const int u = int(item % units);
  const int64_t head_item = item / units;
  const int64_t t = head_item / (L.kv_heads * 2);
  const int h = int(head_item / 2 % L.kv_heads);
  const bool is_v = head_item % 2 == 1;
  const float* x = (is_v ? v : k) + t * int64_t(L.kv_heads) * L.head_dim + int64_t(h) * L.head_dim;
  const int64_t bs = L.block_size, slot = slots[t];
  uint8_t* block = block_at(blocks, slot / bs);
  const int64_t s = slot % bs;
  const int64_t r0 = (is_v ? int64_t(L.kv_heads) + h : h) * L.head_bytes;
  switch (L.codec) {
    case kF32: {
      const int d = u;
      const uint32_t w = float_to_bits(x[d]);
      for (int b = 0; b < 4; ++b) put_byte(L, block, s, r0 + 4 * d + b, uint8_t(w >> (8 * b)));
      return;
    }
    case kBF16:
    case kF16: {
      const int d = u;
      const uint16_t w = L.codec == kBF16 ? f32_to_bf16(x[d]) : f32_to_f16(x[d]);
      put_byte(L, block, s, r0 + 2 * d, uint8_t(w));
      put_byte(L, block, s, r0 + 2 * d + 1, uint8_t(w >> 8));
      return;
    }
    default: {
      uint8_t codes[128];
      const int g = u;
      const GroupParams p = quantize_group(x + g * L.group_size, L.group_size, L.bits, codes);
      const int first = g * L.group_size;
      if (L.bits == 8) {
        for (int j = 0; j < L.group_size; ++j) put_byte(L, block, s, r0 + first + j, codes[j]);
      } else {
        for (int j = 0; j < L.group_size; j += 2)
          put_byte(L, block, s, r0 + (first + j) / 2, uint8_t(codes[j] | (codes[j + 1] << 4)));
      }
      const uint16_t scale = f32_to_bf16(p.scale), bias = f32_to_bf16(p.bias);
      const int64_t params = r0 + L.value_bytes;
      put_byte(L, block, s, params + 2 * g, uint8_t(scale));
      put_byte(L, block, s, params + 2 * g + 1, uint8_t(scale >> 8));
      put_byte(L, block, s, params + 2 * (L.groups + g), uint8_t(bias));
      put_byte(L, block, s, params + 2 * (L.groups + g) + 1, uint8_t(bias >> 8));
    }
  }
}

__global__ void kv_copy_kernel(KvBlocks blocks, const int32_t* src, const int32_t* dst, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * blocks.block_bytes) return;
  const int64_t c = i / blocks.block_bytes, b = i % blocks.block_bytes;
  block_at(blocks, dst[c])[b] = block_at(blocks, src[c])[b];
}

__global__ void kv_read_kernel(KvLayout L, KvBlocks blocks, const int64_t* slots, int64_t n, uint8_t* records) {
  const int64_t rec = L.record_bytes();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * rec) return;
  const int64_t slot = slots[i / rec], bs = L.block_size;
  records[i] = block_at(blocks, slot / bs)[record_byte_offset(L, slot % bs, i % rec)];
}

__global__ void kv_store_kernel(KvLayout L, KvBlocks blocks, const int64_t* slots, int64_t n,
                                const uint8_t* records) {
  const int64_t rec = L.record_bytes();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * rec) return;
  const int64_t slot = slots[i / rec], bs = L.block_size;
  block_at(blocks, slot / bs)[record_byte_offset(L, slot % bs, i % rec)] = records[i];
}

// Copies n bytes global → shared with every thread of the block (kv_device.cuh).
__device__ __forceinline__ void stage_bytes(uint8_t* dst, const uint8_t* src, int64_t n) {
  issue_bytes(dst, src, n);
  cp_async_wait_all();
}

__host__ __device__ __forceinline__ int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

constexpr int kAttentionThreads = 128;
constexpr int kSlotsPerPass = kAttentionThreads / 4;  // four threads score a slot

// One thread block per (query token, query head), in the CPU kernel's order
// (backend/cpu/attention_kernel.inl). Per block of keys: the K and V head
// sections are staged in shared memory; four threads score each slot, thread
// j of the four summing q[d]·k[d] over d ≡ j (mod 4) in increasing d, and
// the score is ((p0 + p1) + (p2 + p3)) · scale; then the online softmax in
// slot order: the block's max, the rescale, l, and every output feature
// (threads own features) accumulated over the slots in order. Each exp is
// computed once per slot; the value is the same wherever it is used.
// Shared memory: q (head_dim rounded to 4 floats), one float per slot, then
// the K and V sections (attention_smem_bytes).
__global__ void __launch_bounds__(kAttentionThreads) attention_kernel(KvLayout L, KvBlocks blocks, AttentionArgs a) {
  allow_dependents();
  extern __shared__ __align__(16) float attention_smem[];
  const int hd = L.head_dim, hd4 = (hd + 3) / 4 * 4, bs = L.block_size;
  const int tid = int(threadIdx.x), lane = tid % 32;
  float* q = attention_smem;
  float* p = q + hd4;  // the block's scores, then exp(score − max), per slot
  uint8_t* ks = reinterpret_cast<uint8_t*>(attention_smem) + round16(int64_t(hd4 + bs) * 4);
  const int64_t v_section = int64_t(bs) * L.head_bytes;
  uint8_t* vs = ks + round16(L.k_head_bytes);
  const int64_t t = blockIdx.x / a.heads;
  const int h = int(blockIdx.x % a.heads);
  const int kvh = h / (a.heads / L.kv_heads);
  const float* qh = a.q + (t * a.heads + h) * hd;
  float* oh = a.out + (t * a.heads + h) * hd;
  for (int d = tid; d < hd4; d += kAttentionThreads) q[d] = d < hd ? qh[d] : 0.0f;
  const int64_t lo = a.lo[t], hi = a.hi[t];
  if (hi < lo) {
    for (int d = tid; d < hd; d += kAttentionThreads) oh[d] = 0.0f;
    return;
  }
  const int32_t* table = a.tables + a.table_offset[t];
  constexpr int kPerThread = kMaxHeadDim / kAttentionThreads;
  float acc[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) acc[j] = 0.0f;
  const float neg_inf = -__int_as_float(0x7f800000);
  float m = neg_inf, l = 0.0f;
  const int chain = tid % 4;
  for (int64_t b = lo / bs; b <= hi / bs; ++b) {
    const uint8_t* blk = block_at(blocks, table[b]);
    const int s0 = b == lo / bs ? int(lo % bs) : 0;
    const int s1 = b == hi / bs ? int(hi % bs) : bs - 1;
    __syncthreads();  // the previous block's bytes and scores are done with (and q is written)
    stage_bytes(ks, blk + int64_t(kvh) * L.k_head_bytes, L.k_head_bytes);
    stage_bytes(vs, blk + L.k_bytes + int64_t(kvh) * L.v_head_bytes, v_section);
    __syncthreads();
    // Every thread of a warp takes part in the shuffles, so the loop runs
    // whole passes of kSlotsPerPass slots.
    for (int base = s0; base <= s1; base += kSlotsPerPass) {
      const int i = base + tid / 4;
      float part = 0.0f;
      if (i <= s1)
        for (int d = chain; d < hd4; d += 4) part = part + q[d] * (d < hd ? key_at(L, ks, i, d) : 0.0f);
      // ((p0 + p1) + (p2 + p3)): pairs first, then the pair sums.
      const float pair = part + __shfl_down_sync(0xffffffffu, part, 1);
      const float quad = pair + __shfl_down_sync(0xffffffffu, pair, 2);
      if (i <= s1 && chain == 0) p[i] = quad * a.scale;
    }
    __syncthreads();
    float mx = neg_inf;
    for (int i = s0; i <= s1; ++i) mx = mx < p[i] ? p[i] : mx;
    const float m_new = m < mx ? mx : m;
    const float alpha = m == neg_inf ? 0.0f : attention_exp(m - m_new);
    __syncthreads();
    for (int i = s0 + tid; i <= s1; i += kAttentionThreads) p[i] = attention_exp(p[i] - m_new);
    __syncthreads();
    l = l * alpha;
    for (int i = s0; i <= s1; ++i) l = l + p[i];
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int d = tid + j * kAttentionThreads;
      if (d >= hd) break;
      float x = acc[j] * alpha;
      for (int i = s0; i <= s1; ++i) x = x + p[i] * value_at(L, vs + int64_t(i) * L.head_bytes, d);
      acc[j] = x;
    }
    m = m_new;
  }
  (void)lane;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int d = tid + j * kAttentionThreads;
    if (d < hd) oh[d] = acc[j] / l;
  }
}

}  // namespace

std::size_t attention_smem_bytes(const KvLayout& L) {
  const int hd4 = (L.head_dim + 3) / 4 * 4;
  return std::size_t(round16(int64_t(hd4 + L.block_size) * 4) + round16(L.k_head_bytes) +
                     int64_t(L.block_size) * L.head_bytes);
}

void kv_write(const KvLayout& layout, KvBlocks blocks, const int64_t* slots, int64_t T, const float* k,
              const float* v, cudaStream_t stream) {
  const bool dense = layout.codec == kF32 || layout.codec == kBF16 || layout.codec == kF16;
  const int64_t items = T * layout.kv_heads * 2 * (dense ? layout.head_dim : layout.groups);
  if (items) kv_write_kernel<<<blocks_for(items), kThreads, 0, stream>>>(layout, blocks, slots, T, k, v);
}

void kv_copy_blocks(const KvLayout&, KvBlocks blocks, const int32_t* src, const int32_t* dst, int64_t n,
                    cudaStream_t stream) {
  if (n) kv_copy_kernel<<<blocks_for(n * blocks.block_bytes), kThreads, 0, stream>>>(blocks, src, dst, n);
}

void kv_read(const KvLayout& layout, KvBlocks blocks, const int64_t* slots, int64_t n, uint8_t* records,
             cudaStream_t stream) {
  const int64_t bytes = n * layout.record_bytes();
  if (bytes) kv_read_kernel<<<blocks_for(bytes), kThreads, 0, stream>>>(layout, blocks, slots, n, records);
}

void kv_store(const KvLayout& layout, KvBlocks blocks, const int64_t* slots, int64_t n, const uint8_t* records,
              cudaStream_t stream) {
  const int64_t bytes = n * layout.record_bytes();
  if (bytes) kv_store_kernel<<<blocks_for(bytes), kThreads, 0, stream>>>(layout, blocks, slots, n, records);
}

void attention(const KvLayout& layout, KvBlocks blocks, const AttentionArgs& args, cudaStream_t stream) {
  if (args.T == 0) return;
  const std::size_t smem = attention_smem_bytes(layout);
  // Above 48 KiB a kernel must opt in (large heads or blocks); the
  // attribute is host-side and idempotent.
  if (smem > 48 * 1024) cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  attention_kernel<<<unsigned(args.T * args.heads), kAttentionThreads, smem, stream>>>(layout, blocks, args);
}

}  // namespace rowlm::cuda
