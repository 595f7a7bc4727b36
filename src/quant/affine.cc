#include "quant/affine.h"

#include <cmath>
#include <string>

#include "core/error.h"

namespace rowlm::quant {
namespace {

void check_param_dtype(DType t) {
  if (t != DType::F32 && t != DType::BF16 && t != DType::F16)
    throw Error("affine quantization: scales and biases must be f32, bf16 or f16, not " +
                std::string(dtype_name(t)));
}

void store_param(void* params, DType t, int64_t index, float v) {
  switch (t) {
    case DType::F32: static_cast<float*>(params)[index] = v; return;
    case DType::BF16: static_cast<uint16_t*>(params)[index] = f32_to_bf16(v); return;
    case DType::F16: static_cast<uint16_t*>(params)[index] = f32_to_f16(v); return;
    default: check_param_dtype(t);
  }
}

// rint and clamp to [0, n]; NaN maps to 0 so the integer conversion is defined.
uint8_t to_code(float v, float n) {
  v = std::rint(v);
  if (!(v > 0.0f)) return 0;
  return uint8_t(v < n ? v : n);
}

}  // namespace

void check_spec(const AffineSpec& spec) {
  if (spec.bits != 2 && spec.bits != 4 && spec.bits != 8)
    throw Error("affine quantization: bits must be 2, 4 or 8, not " + std::to_string(spec.bits));
  if (spec.group_size != 32 && spec.group_size != 64 && spec.group_size != 128)
    throw Error("affine quantization: group size must be 32, 64 or 128, not " +
                std::to_string(spec.group_size));
}

void pack_codes(std::span<const uint8_t> codes, int bits, std::span<uint32_t> out) {
  const int per = codes_per_word(bits);
  ROWLM_CHECK(codes.size() % per == 0 && out.size() * per == codes.size(), "pack_codes sizes");
  for (std::size_t w = 0; w < out.size(); ++w) {
    uint32_t word = 0;
    for (int j = 0; j < per; ++j) word |= uint32_t(codes[w * per + j]) << (j * bits);
    out[w] = word;
  }
}

void unpack_codes(std::span<const uint32_t> packed, int bits, std::span<uint8_t> out) {
  const int per = codes_per_word(bits);
  ROWLM_CHECK(out.size() == packed.size() * per, "unpack_codes sizes");
  const uint32_t mask = uint32_t(max_code(bits));
  for (std::size_t w = 0; w < packed.size(); ++w)
    for (int j = 0; j < per; ++j) out[w * per + j] = uint8_t((packed[w] >> (j * bits)) & mask);
}

GroupParams quantize_group(const float* x, int group_size, int bits, uint8_t* codes) {
  const float n = float(max_code(bits));
  float w_min = INFINITY, w_max = -INFINITY;
  for (int j = 0; j < group_size; ++j) {
    // MLX's std::max(w_max, x) / std::min(w_min, x): a NaN element is skipped.
    w_max = w_max < x[j] ? x[j] : w_max;
    w_min = x[j] < w_min ? x[j] : w_min;
  }
  const bool negative_edge = std::fabs(w_min) > std::fabs(w_max);
  float scale = (w_max - w_min) / n;
  scale = scale < 1e-7f ? 1e-7f : scale;  // MLX's std::max(scale, eps), NaN included
  if (!negative_edge) scale = -scale;
  const float edge = negative_edge ? w_min : w_max;
  const float q0 = std::rint(edge / scale);
  float bias = 0.0f;
  if (q0 != 0.0f) {
    scale = edge / q0;
    bias = edge;
  }
  for (int j = 0; j < group_size; ++j) codes[j] = to_code((x[j] - bias) / scale, n);
  return {scale, bias};
}

void quantize(std::span<const float> x, const AffineSpec& spec, DType param_dtype,
              std::span<uint32_t> packed, void* scales, void* biases) {
  check_spec(spec);
  check_param_dtype(param_dtype);
  const int64_t n = int64_t(x.size());
  if (n % spec.group_size != 0)
    throw Error("affine quantization: " + std::to_string(n) +
                " values are not a whole number of groups of " + std::to_string(spec.group_size));
  ROWLM_CHECK(int64_t(packed.size()) * codes_per_word(spec.bits) == n, "packed size");
  uint8_t codes[128];
  const int words_per_group = spec.group_size / codes_per_word(spec.bits);
  for (int64_t g = 0; g < n / spec.group_size; ++g) {
    const GroupParams p = quantize_group(x.data() + g * spec.group_size, spec.group_size, spec.bits, codes);
    pack_codes({codes, std::size_t(spec.group_size)}, spec.bits,
               packed.subspan(std::size_t(g * words_per_group), std::size_t(words_per_group)));
    store_param(scales, param_dtype, g, p.scale);
    store_param(biases, param_dtype, g, p.bias);
  }
}

float load_param(const void* params, DType t, int64_t index) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(params)[index];
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(params)[index]);
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(params)[index]);
    default: check_param_dtype(t);
  }
  return 0.0f;
}

void dequantize(std::span<const uint32_t> packed, const void* scales, const void* biases,
                DType param_dtype, const AffineSpec& spec, std::span<float> out) {
  check_spec(spec);
  check_param_dtype(param_dtype);
  const int per = codes_per_word(spec.bits);
  if (out.size() != packed.size() * per || out.size() % spec.group_size != 0)
    throw Error("affine dequantization: " + std::to_string(packed.size()) + " packed words of " +
                std::to_string(spec.bits) + "-bit codes do not fill " + std::to_string(out.size()) +
                " outputs in groups of " + std::to_string(spec.group_size));
  const uint32_t mask = uint32_t(max_code(spec.bits));
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int64_t g = int64_t(i) / spec.group_size;
    const float code = float((packed[i / per] >> ((i % per) * spec.bits)) & mask);
    const float scaled = load_param(scales, param_dtype, g) * code;
    out[i] = scaled + load_param(biases, param_dtype, g);
  }
}

}  // namespace rowlm::quant
