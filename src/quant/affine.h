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
// Codes are packed little end first: code j of a word sits in bits
// [j*bits, (j+1)*bits). Scales and biases are stored in the checkpoint's
// dtype (bf16 for a bf16 model), which rounds them; codes are computed with
// the unrounded f32 scale and bias, exactly as MLX does.

#include <cstdint>
#include <span>

#include "core/dtype.h"

namespace rowlm::quant {

struct AffineSpec {
  int bits = 4;         // 2, 4 or 8
  int group_size = 64;  // 32, 64 or 128
  bool operator==(const AffineSpec&) const = default;
};

// Throws rowlm::Error naming the bad field unless bits is 2/4/8 and the group
// size 32/64/128.
void check_spec(const AffineSpec& spec);

constexpr int codes_per_word(int bits) { return 32 / bits; }
constexpr int max_code(int bits) { return (1 << bits) - 1; }

// Packs codes (each < 2^bits) little end first; codes.size() must be a
// multiple of 32 / bits and out.size() == codes.size() * bits / 32.
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

// A whole vector of n values (n a multiple of the group size): packed codes
// (n * bits / 32 words), and one scale and bias per group stored as
// `param_dtype` (F32, BF16 or F16).
void quantize(std::span<const float> x, const AffineSpec& spec, DType param_dtype,
              std::span<uint32_t> packed, void* scales, void* biases);

// out[i] = scale * code + bias, with scale and bias read as `param_dtype`.
void dequantize(std::span<const uint32_t> packed, const void* scales, const void* biases,
                DType param_dtype, const AffineSpec& spec, std::span<float> out);

// Reads one stored scale or bias as f32.
float load_param(const void* params, DType param_dtype, int64_t index);

}  // namespace rowlm::quant
