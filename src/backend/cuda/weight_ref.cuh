#pragma once
// Reading one element of a weight the CUDA backend holds (WeightRef,
// dense_kernels.h), dense or affine in any of its code orders: the kernels
// that read weights element by element (the f32 matmul, embedding lookups)
// share it.

#include <cstdint>

#include "backend/cuda/dense_kernels.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/gemm_affine.h"

namespace rowlm::cuda {

__device__ __forceinline__ float load_weight(const void* w, Storage s, int64_t i) {
  switch (s) {
    case Storage::BF16: return bf16_to_f32(static_cast<const uint16_t*>(w)[i]);
    case Storage::F16: return f16_to_f32(static_cast<const uint16_t*>(w)[i]);
    default: return static_cast<const float*>(w)[i];
  }
}

// Code i of a stream of `bits`-wide codes packed little-end first into
// words (a code may run into the next word).
__device__ __forceinline__ uint32_t stream_code(const uint32_t* words, int64_t i, int bits) {
  const int64_t bit = i * bits;
  const int shift = int(bit % 32);
  uint64_t v = words[bit / 32] >> shift;
  if (shift + bits > 32) v |= uint64_t(words[bit / 32 + 1]) << (32 - shift);
  return uint32_t(v) & ((1u << bits) - 1u);
}

// Code (row, col) of an affine weight in its order (backend/weight.h).
__device__ __forceinline__ uint32_t affine_code(const WeightRef& w, int64_t row, int64_t col) {
  const uint32_t* words = static_cast<const uint32_t*>(w.values);
  const uint32_t mask = (1u << w.bits) - 1u;
  if (w.order == kLanes16Order) {
    const int per_word = 32 / w.bits;
    const int64_t block = col / (16 * per_word), in = col % (16 * per_word);
    const uint32_t word = words[row * (w.cols / per_word) + block * 16 + in % 16];
    return (word >> (int(in / 16) * w.bits)) & mask;
  }
  if (w.order == kMma16Order) {  // the layout is gemm_affine.h's
    const int r = int(row % 16), c = int(col % 16);
    const int64_t row_tile = row / 16, step = col / 16;
    const int lane = (r % 8) * 4 + (c % 8) / 2, field = r / 8 + 2 * (c / 8) + 4 * (c % 2);
    const uint32_t lo =
        (words[mma16_row_tile_words(row_tile, w.cols, w.bits) + step * 32 + lane] >> (4 * field)) & 0xFu;
    const int hi_bits = w.bits - 4;
    if (hi_bits == 0) return lo;
    const unsigned char* fields = reinterpret_cast<const unsigned char*>(words) +
                                  mma16_high_bytes(row_tile, w.cols, w.bits) + (step * 32 + lane) * hi_bits;
    uint32_t f = 0;
    for (int b = 0; b < hi_bits; ++b) f |= uint32_t(fields[b]) << (8 * b);
    return lo | ((f >> (hi_bits * field)) & ((1u << hi_bits) - 1u)) << 4;
  }
  // Stream: rows hold whole words (cols · bits is a multiple of 32), a row's
  // stream starts at its first word.
  return stream_code(words, row * w.cols + col, w.bits);
}

// Element (row, col) of a weight, dense or affine (scale · code + bias in
// f32, two roundings: quant::dequantize's operations).
template <bool kAffine>
__device__ __forceinline__ float weight_at(const WeightRef& w, int64_t row, int64_t col) {
  if constexpr (!kAffine) {
    return load_weight(w.values, w.storage, row * w.cols + col);
  } else {
    const float code = float(affine_code(w, row, col));
    const int64_t g = row * (w.cols / w.group_size) + col / w.group_size;
    const float scaled = load_weight(w.scales, w.storage, g) * code;  // (no contraction: nvcc --fmad=false)
    return scaled + load_weight(w.biases, w.storage, g);
  }
}

}  // namespace rowlm::cuda
