#pragma once
// Element types of weights, activations and KV storage, and exact scalar
// conversions between them. bf16 and f16 rounding is round-to-nearest-even,
// matching PyTorch and MLX, so stored values are bit-compatible.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace rowlm {

enum class DType : uint8_t { F32, BF16, F16, U32, I32, U8, I64 };

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: case DType::U32: case DType::I32: return 4;
    case DType::BF16: case DType::F16: return 2;
    case DType::U8: return 1;
    case DType::I64: return 8;
  }
  return 0;
}

std::string_view dtype_name(DType t);

inline float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }

inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Rounds through the narrower type and back: what storing a value costs.
inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

}  // namespace rowlm
