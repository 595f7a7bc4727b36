#include "quant/affine.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

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
  if (spec.bits < 2 || spec.bits > 8 || spec.bits == 7)
    throw Error("affine quantization: bits must be 2, 3, 4, 5, 6 or 8, not " + std::to_string(spec.bits));
  if (spec.group_size != 16 && spec.group_size != 32 && spec.group_size != 64 && spec.group_size != 128)
    throw Error("affine quantization: group size must be 16, 32, 64 or 128, not " +
                std::to_string(spec.group_size));
}

void pack_codes(std::span<const uint8_t> codes, int bits, std::span<uint32_t> out) {
  ROWLM_CHECK(codes.size() * bits % 32 == 0 && out.size() * 32 == codes.size() * bits, "pack_codes sizes");
  std::fill(out.begin(), out.end(), 0u);
  const uint32_t mask = uint32_t(max_code(bits));
  for (std::size_t i = 0; i < codes.size(); ++i) {
    const std::size_t bit = i * std::size_t(bits);
    const int shift = int(bit % 32);
    const uint64_t v = uint64_t(codes[i] & mask) << shift;
    out[bit / 32] |= uint32_t(v);
    if (shift + bits > 32) out[bit / 32 + 1] |= uint32_t(v >> 32);
  }
}

void unpack_codes(std::span<const uint32_t> packed, int bits, std::span<uint8_t> out) {
  ROWLM_CHECK(out.size() * bits == packed.size() * 32, "unpack_codes sizes");
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = uint8_t(code_at(packed.data(), int64_t(i), bits));
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
  if (n * spec.bits % 32 != 0)
    throw Error("affine quantization: " + std::to_string(n) + " values of " + std::to_string(spec.bits) +
                " bits do not fill whole 32-bit words");
  ROWLM_CHECK(int64_t(packed.size()) == packed_words(n, spec.bits), "packed size");
  // Codes of the whole vector first: a 3-, 5- or 6-bit group need not end on
  // a word boundary.
  std::vector<uint8_t> codes(static_cast<std::size_t>(n));
  for (int64_t g = 0; g < n / spec.group_size; ++g) {
    const GroupParams p = quantize_group(x.data() + g * spec.group_size, spec.group_size, spec.bits,
                                         codes.data() + g * spec.group_size);
    store_param(scales, param_dtype, g, p.scale);
    store_param(biases, param_dtype, g, p.bias);
  }
  pack_codes(codes, spec.bits, packed);
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
  if (out.size() * spec.bits != packed.size() * 32 || out.size() % spec.group_size != 0)
    throw Error("affine dequantization: " + std::to_string(packed.size()) + " packed words of " +
                std::to_string(spec.bits) + "-bit codes do not fill " + std::to_string(out.size()) +
                " outputs in groups of " + std::to_string(spec.group_size));
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int64_t g = int64_t(i) / spec.group_size;
    const float code = float(code_at(packed.data(), int64_t(i), spec.bits));
    const float scaled = load_param(scales, param_dtype, g) * code;
    out[i] = scaled + load_param(biases, param_dtype, g);
  }
}

}  // namespace rowlm::quant
