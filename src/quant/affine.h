#pragma once
// MLX's affine group quantization (ml-explore/mlx, mlx/backend/cpu/quantized.cpp),
// shared by quantized KV storage and MLX-quantized checkpoints.
//
// Values are quantized in groups of `group_size` consecutive elements. Per
// group, computed in f32 with n = 2^bits - 1:
//   scale = max((max - min) / n, 1e-7); the edge is the extreme of larger
//   magnitude (min if |min| > |max|, else max, and then scale = -scale);
//   q0 = rint(edge / scale); if q0 != 0: scale = edge / q0, bias = edge,
//   else bias = 0;  code = clamp(rint((x - bias) / scale), 0, n).
// Dequantization is scale * code + bias (two roundings, as MLX's CPU kernel).
//
// Packing, for every bit width: a row's codes form one little-endian bit
// stream, code i in bits [i·bits, (i+1)·bits) of it, bit b of the stream
// being bit b % 32 of uint32 word b / 32 (equivalently bit b % 8 of byte
// b / 8 on a little-endian machine). For 2, 4 and 8 bits this is "code j of
// a word in bits [j·bits, (j+1)·bits)"; for 3 and 6 bits it is MLX's packs
// of 8 (3-bit) or 4 (6-bit) codes in 3 bytes and for 5 bits 8 codes in 5
// bytes, so a 3-, 5- or 6-bit code may straddle two bytes or two words.
// Scales and biases are stored in the checkpoint's
// dtype (bf16 for a bf16 model), which rounds them; codes are computed with
// the unrounded f32 scale and bias, exactly as MLX does.

#include <cstdint>
#include <span>

#include "core/dtype.h"

namespace rowlm::quant {

struct AffineSpec {
  int bits = 4;         // 2, 3, 4, 5, 6 or 8
  int group_size = 64;  // 16, 32, 64 or 128
  bool operator==(const AffineSpec&) const = default;
};

// Throws rowlm::Error naming the bad field unless bits is 2/3/4/5/6/8 and the
// group size 16/32/64/128. (The KV codecs take a subset, checked there.)
void check_spec(const AffineSpec& spec);

constexpr int max_code(int bits) { return (1 << bits) - 1; }
// uint32 words holding n codes of `bits` bits (n · bits a multiple of 32).
constexpr int64_t packed_words(int64_t n, int bits) { return n * bits / 32; }

// Code i of a packed stream (the layout above).
inline uint32_t code_at(const uint32_t* packed, int64_t i, int bits) {
  const int64_t bit = i * bits;
  const int shift = int(bit % 32);
  uint64_t v = packed[bit / 32] >> shift;
  if (shift + bits > 32) v |= uint64_t(packed[bit / 32 + 1]) << (32 - shift);
  return uint32_t(v) & uint32_t(max_code(bits));
}

// Packs codes (each < 2^bits) in the layout above; codes.size() · bits must
// be a multiple of 32 and out.size() == codes.size() · bits / 32.
void pack_codes(std::span<const uint8_t> codes, int bits, std::span<uint32_t> out);
void unpack_codes(std::span<const uint32_t> packed, int bits, std::span<uint8_t> out);

// One group: x has spec.group_size values. Returns the unpacked codes in
// `codes` and the f32 scale and bias before storage rounding. Non-finite
// inputs give deterministic but meaningless codes (never undefined behaviour).
struct GroupParams {
  float scale = 0.0f;
  float bias = 0.0f;
};
GroupParams quantize_group(const float* x, int group_size, int bits, uint8_t* codes);

// A whole vector of n values (n a multiple of the group size, n · bits of
// 32): packed codes (n * bits / 32 words), and one scale and bias per group stored as
// `param_dtype` (F32, BF16 or F16).
void quantize(std::span<const float> x, const AffineSpec& spec, DType param_dtype,
              std::span<uint32_t> packed, void* scales, void* biases);

// out[i] = scale * code + bias, with scale and bias read as `param_dtype`.
void dequantize(std::span<const uint32_t> packed, const void* scales, const void* biases,
                DType param_dtype, const AffineSpec& spec, std::span<float> out);

// Reads one stored scale or bias as f32.
float load_param(const void* params, DType param_dtype, int64_t index);

}  // namespace rowlm::quant
