#pragma once
// Device helpers shared by the KV kernels (kv_kernels.cu, attention_split.cu):
// where a block lives and how one key or value feature is read in the CPU
// backend's block layout (backend/kv_block_layout.h).

#include <cstdint>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kv_kernels.h"

namespace rowlm::cuda {

// kv::Codec values.
enum : int { kF32 = 0, kBF16 = 1, kF16 = 2, kQ8 = 3, kQ4 = 4 };

__device__ __forceinline__ uint8_t* block_at(const KvBlocks& b, int64_t id) {
  return b.chunks[id / b.chunk_blocks] + (id % b.chunk_blocks) * b.block_bytes;
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

// Issues copies of n bytes global → shared with every thread of the block:
// 16-byte cp.async where both ends and n allow it (all in flight at once, so
// a block of keys costs one memory latency, not one per load), else byte by
// byte. cp_async_wait_all() then waits for this thread's copies; a
// __syncthreads() after it makes every thread's visible.
__device__ __forceinline__ void issue_bytes(uint8_t* dst, const uint8_t* src, int64_t n) {
  if (((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst) | uintptr_t(n)) & 15) == 0) {
    for (int64_t i = threadIdx.x; i < n / 16; i += blockDim.x) {
      const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst + 16 * i));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src + 16 * i));
    }
  } else {
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
  }
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.commit_group;\n" ::);
  asm volatile("cp.async.wait_group 0;\n" ::);
}

}  // namespace rowlm::cuda
