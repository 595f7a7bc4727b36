#include "model/gguf_weight.h"

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/gguf_affine.h"
#include "io/gguf_dequant.h"
#include "quant/affine.h"

namespace rowlm {
namespace {

[[noreturn]] void fail(const gguf::File& file, const gguf::TensorInfo& t, const std::string& what) {
  file.fail("GGUF tensor '" + t.name + "' (" + gguf::ggml_type_name(t.type_code) + ") " + what);
}

std::optional<DType> dense_dtype(gguf::GgmlType type) {
  switch (type) {
    case gguf::GgmlType::F32: return DType::F32;
    case gguf::GgmlType::F16: return DType::F16;
    case gguf::GgmlType::BF16: return DType::BF16;
    default: return std::nullopt;
  }
}

bool exact_in_f16(const std::vector<float>& v) {
  for (float x : v)
    if (f16_to_f32(f32_to_f16(x)) != x) return false;
  return true;
}

Tensor params_tensor(const std::vector<float>& v, int64_t rows, int64_t groups, bool f16) {
  Tensor out = Tensor::uninitialized(f16 ? DType::F16 : DType::F32, {rows, groups});
  if (f16) {
    uint16_t* d = out.data<uint16_t>();
    for (std::size_t i = 0; i < v.size(); ++i) d[i] = f32_to_f16(v[i]);
  } else {
    std::memcpy(out.data<float>(), v.data(), v.size() * sizeof(float));
  }
  return out;
}

Weight affine_weight(const gguf::File& file, const gguf::TensorInfo& t, const gguf::AffineLayout& layout) {
  if (t.ne.size() != 2) fail(file, t, "is a quantized tensor of rank " + std::to_string(t.ne.size()) + "; expected a matrix");
  const int64_t rows = t.ne[1], cols = t.ne[0];
  const quant::AffineSpec spec{layout.bits, layout.group_size};
  try {
    quant::check_spec(spec);
  } catch (const Error& e) {
    fail(file, t, "converts to affine " + std::to_string(layout.bits) + "-bit groups of " +
                      std::to_string(layout.group_size) + ", which rowlm's affine format does not take yet (" +
                      e.what() + ")");
  }
  const std::size_t n = std::size_t(rows * cols), groups = n / std::size_t(layout.group_size);
  std::vector<uint8_t> codes(n);
  std::vector<float> scales(groups), biases(groups);
  gguf::decode_affine(t.type, t.bytes, codes, scales, biases);

  Weight w;
  w.format = WeightFormat::Affine;
  w.rows = rows;
  w.cols = cols;
  w.bits = layout.bits;
  w.group_size = layout.group_size;
  w.values = Tensor::uninitialized(DType::U32, {rows, cols * layout.bits / 32});
  quant::pack_codes(codes, layout.bits, std::span(w.values.data<uint32_t>(), std::size_t(w.values.numel())));
  const bool f16 = exact_in_f16(scales) && exact_in_f16(biases);
  w.scales = params_tensor(scales, rows, cols / layout.group_size, f16);
  w.biases = params_tensor(biases, rows, cols / layout.group_size, f16);
  return w;
}

}  // namespace

Weight gguf_weight(const gguf::File& file, const gguf::TensorInfo& t) {
  if (!gguf::traits(t.type).supported) fail(file, t, "has a type rowlm does not read");
  if (const auto dense = dense_dtype(t.type)) {
    if (t.ne.size() != 2) fail(file, t, "has rank " + std::to_string(t.ne.size()) + "; expected a matrix");
    return Weight::dense(Tensor::view(*dense, t.shape(), t.bytes.data(), file.owner()));
  }
  const auto layout = gguf::affine_layout(t.type);
  ROWLM_CHECK(layout.has_value(), "a supported GGUF block type without an affine layout");
  return affine_weight(file, t, *layout);
}

Tensor gguf_tensor(const gguf::File& file, const gguf::TensorInfo& t) {
  if (const auto dense = dense_dtype(t.type)) return Tensor::view(*dense, t.shape(), t.bytes.data(), file.owner());
  return gguf_f32(file, t);
}

Tensor gguf_f32(const gguf::File& file, const gguf::TensorInfo& t) {
  if (!gguf::traits(t.type).supported) fail(file, t, "has a type rowlm does not read");
  Tensor out = Tensor::uninitialized(DType::F32, t.shape());
  gguf::dequantize(t.type, t.bytes, std::span(out.data<float>(), std::size_t(out.numel())));
  return out;
}

}  // namespace rowlm
