#include "backend/cuda/kv_kernels.h"

#include "backend/cuda/device_math.cuh"

namespace rowlm::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kAttentionThreads = 128;
constexpr int kMaxHeadDim = 512;

// kv::Codec values.
enum : int { kF32 = 0, kBF16 = 1, kF16 = 2, kQ8 = 3, kQ4 = 4 };

int64_t blocks_for(int64_t threads) { return (threads + kThreads - 1) / kThreads; }

__device__ __forceinline__ uint8_t* block_at(const KvBlocks& b, int64_t id) {
  return b.chunks[id / b.chunk_blocks] + (id % b.chunk_blocks) * b.block_bytes;
}

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

// One thread per (token, kv head, K or V): the head vector encoded as
// kvcodec's encode_head does, byte by byte into its place.
__global__ void kv_write_kernel(KvLayout L, KvBlocks blocks, const int64_t* slots, int64_t T, const float* k,
                                const float* v) {
  const int64_t item = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= T * L.kv_heads * 2) return;
  const int64_t t = item / (L.kv_heads * 2);
  const int h = int(item / 2 % L.kv_heads);
  const bool is_v = item % 2 == 1;
  const float* x = (is_v ? v : k) + t * int64_t(L.kv_heads) * L.head_dim + int64_t(h) * L.head_dim;
  const int64_t bs = L.block_size, slot = slots[t];
  uint8_t* block = block_at(blocks, slot / bs);
  const int64_t s = slot % bs;
  const int64_t r0 = (is_v ? int64_t(L.kv_heads) + h : h) * L.head_bytes;
  switch (L.codec) {
    case kF32:
      for (int d = 0; d < L.head_dim; ++d) {
        const uint32_t u = float_to_bits(x[d]);
        for (int b = 0; b < 4; ++b) put_byte(L, block, s, r0 + 4 * d + b, uint8_t(u >> (8 * b)));
      }
      return;
    case kBF16:
    case kF16:
      for (int d = 0; d < L.head_dim; ++d) {
        const uint16_t u = L.codec == kBF16 ? f32_to_bf16(x[d]) : f32_to_f16(x[d]);
        put_byte(L, block, s, r0 + 2 * d, uint8_t(u));
        put_byte(L, block, s, r0 + 2 * d + 1, uint8_t(u >> 8));
      }
      return;
    default: {
      uint8_t codes[128];
      for (int g = 0; g < L.groups; ++g) {
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

__device__ __forceinline__ float bf16_at(const uint8_t* p) { return bf16_to_f32(uint16_t(p[0] | (p[1] << 8))); }
__device__ __forceinline__ float f16_at(const uint8_t* p) { return f16_to_f32(uint16_t(p[0] | (p[1] << 8))); }
__device__ __forceinline__ float f32_at(const uint8_t* p) {
  return bits_to_float(uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24));
}

// Feature d of the key in slot i of a K head section (feature-major).
__device__ __forceinline__ float key_at(const KvLayout& L, const uint8_t* kh, int i, int d) {
  const int64_t bs = L.block_size;
  switch (L.codec) {
    case kF32: return f32_at(kh + (int64_t(d) * bs + i) * 4);
    case kBF16: return bf16_at(kh + (int64_t(d) * bs + i) * 2);
    case kF16: return f16_at(kh + (int64_t(d) * bs + i) * 2);
    default: {
      const int g = d / L.group_size;
      const float s = bf16_at(kh + L.k_scales_offset + (int64_t(g) * bs + i) * 2);
      const float b = bf16_at(kh + L.k_biases_offset + (int64_t(g) * bs + i) * 2);
      int code;
      if (L.codec == kQ8) {
        code = kh[int64_t(d) * bs + i];
      } else {
        const uint8_t pair = kh[int64_t(d / 2) * bs + i];
        code = d % 2 == 0 ? (pair & 15) : (pair >> 4);
      }
      return s * float(code) + b;
    }
  }
}

// Feature d of a value record (the canonical head record).
__device__ __forceinline__ float value_at(const KvLayout& L, const uint8_t* rec, int d) {
  switch (L.codec) {
    case kF32: return f32_at(rec + 4 * d);
    case kBF16: return bf16_at(rec + 2 * d);
    case kF16: return f16_at(rec + 2 * d);
    default: {
      const int g = d / L.group_size;
      const float s = bf16_at(rec + L.value_bytes + 2 * g);
      const float b = bf16_at(rec + L.value_bytes + 2 * (L.groups + g));
      const int code = L.codec == kQ8 ? rec[d] : (d % 2 == 0 ? (rec[d / 2] & 15) : (rec[d / 2] >> 4));
      return s * float(code) + b;
    }
  }
}

// One thread block per (query token, query head), the CPU kernel's order
// (backend/cpu/attention_kernel.inl): per block of keys, slot scores as four
// partial sums over d mod 4, then the online softmax in slot order.
__global__ void attention_kernel(KvLayout L, KvBlocks blocks, AttentionArgs a) {
  __shared__ float q[kMaxHeadDim + 4];
  extern __shared__ float scores[];  // block_size
  const int64_t t = blockIdx.x / a.heads;
  const int h = int(blockIdx.x % a.heads);
  const int hd = L.head_dim, hd4 = (hd + 3) / 4 * 4, bs = L.block_size;
  const int kvh = h / (a.heads / L.kv_heads);
  const float* qh = a.q + (t * a.heads + h) * hd;
  float* oh = a.out + (t * a.heads + h) * hd;
  for (int d = threadIdx.x; d < hd4; d += blockDim.x) q[d] = d < hd ? qh[d] : 0.0f;
  const int64_t lo = a.lo[t], hi = a.hi[t];
  if (hi < lo) {
    for (int d = threadIdx.x; d < hd; d += blockDim.x) oh[d] = 0.0f;
    return;
  }
  __syncthreads();
  const int32_t* table = a.tables + a.table_offset[t];
  constexpr int kPerThread = kMaxHeadDim / kAttentionThreads;
  float acc[kPerThread];
  for (int j = 0; j < kPerThread; ++j) acc[j] = 0.0f;
  float m = -__int_as_float(0x7f800000), l = 0.0f;
  for (int64_t b = lo / bs; b <= hi / bs; ++b) {
    const uint8_t* blk = block_at(blocks, table[b]);
    const int s0 = b == lo / bs ? int(lo % bs) : 0;
    const int s1 = b == hi / bs ? int(hi % bs) : bs - 1;
    const uint8_t* kh = blk + int64_t(kvh) * L.k_head_bytes;
    const uint8_t* vh = blk + L.k_bytes + int64_t(kvh) * L.v_head_bytes;
    for (int i = s0 + threadIdx.x; i <= s1; i += blockDim.x) {
      float p0 = 0.0f, p1 = 0.0f, p2 = 0.0f, p3 = 0.0f;
      for (int d = 0; d < hd4; d += 4) {
        p0 = p0 + q[d] * (d < hd ? key_at(L, kh, i, d) : 0.0f);
        p1 = p1 + q[d + 1] * (d + 1 < hd ? key_at(L, kh, i, d + 1) : 0.0f);
        p2 = p2 + q[d + 2] * (d + 2 < hd ? key_at(L, kh, i, d + 2) : 0.0f);
        p3 = p3 + q[d + 3] * (d + 3 < hd ? key_at(L, kh, i, d + 3) : 0.0f);
      }
      scores[i] = ((p0 + p1) + (p2 + p3)) * a.scale;
    }
    __syncthreads();
    float mx = -__int_as_float(0x7f800000);
    for (int i = s0; i <= s1; ++i) mx = mx < scores[i] ? scores[i] : mx;
    const float m_new = m < mx ? mx : m;
    const float alpha = m == -__int_as_float(0x7f800000) ? 0.0f : attention_exp(m - m_new);
    l = l * alpha;
    for (int i = s0; i <= s1; ++i) l = l + attention_exp(scores[i] - m_new);
    for (int j = 0; j < kPerThread; ++j) {
      const int d = int(threadIdx.x) + j * kAttentionThreads;
      if (d >= hd) break;
      float x = acc[j] * alpha;
      for (int i = s0; i <= s1; ++i) x = x + attention_exp(scores[i] - m_new) * value_at(L, vh + int64_t(i) * L.head_bytes, d);
      acc[j] = x;
    }
    m = m_new;
    __syncthreads();
  }
  for (int j = 0; j < kPerThread; ++j) {
    const int d = int(threadIdx.x) + j * kAttentionThreads;
    if (d < hd) oh[d] = acc[j] / l;
  }
}

}  // namespace

void kv_write(const KvLayout& layout, KvBlocks blocks, const int64_t* slots, int64_t T, const float* k,
              const float* v, cudaStream_t stream) {
  const int64_t items = T * layout.kv_heads * 2;
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
  attention_kernel<<<args.T * args.heads, kAttentionThreads, std::size_t(layout.block_size) * sizeof(float), stream>>>(
      layout, blocks, args);
}

}  // namespace rowlm::cuda
