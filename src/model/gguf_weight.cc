#include "model/gguf_weight.h"

#include <algorithm>
#include <cstring>
#include <utility>
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

// [rows, cols] of a matrix or of a stack of matrices viewed as one.
std::pair<int64_t, int64_t> matrix_extent(const gguf::File& file, const gguf::TensorInfo& t) {
  if (t.ne.size() != 2 && t.ne.size() != 3)
    fail(file, t, "has rank " + std::to_string(t.ne.size()) + "; expected a matrix or a stack of matrices");
  return {t.numel() / t.ne[0], t.ne[0]};
}

Weight affine_weight(const gguf::File& file, const gguf::TensorInfo& t, const gguf::AffineLayout& layout) {
  const auto [rows, cols] = matrix_extent(file, t);
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

Weight gguf_weight(const gguf::File& file, const gguf::TensorInfo& t, std::shared_ptr<const void> owner) {
  if (!gguf::traits(t.type).supported) fail(file, t, "has a type rowlm does not read");
  if (const auto dense = dense_dtype(t.type)) {
    const auto [rows, cols] = matrix_extent(file, t);
    return Weight::dense(Tensor::view(*dense, {rows, cols}, t.bytes.data(), owner ? std::move(owner) : file.owner()));
  }
  const auto layout = gguf::affine_layout(t.type);
  ROWLM_CHECK(layout.has_value(), "a supported GGUF block type without an affine layout");
  return affine_weight(file, t, *layout);
}

Tensor gguf_tensor(const gguf::File& file, const gguf::TensorInfo& t, std::shared_ptr<const void> owner) {
  if (const auto dense = dense_dtype(t.type))
    return Tensor::view(*dense, t.shape(), t.bytes.data(), owner ? std::move(owner) : file.owner());
  return gguf_f32(file, t);
}

PermutedTensor gguf_permute_rows(const gguf::File& file, const gguf::TensorInfo& t, std::span<const int64_t> from) {
  const int64_t rows = t.ne.empty() ? 0 : t.ne.back();
  if (int64_t(from.size()) != rows)
    fail(file, t, "has " + std::to_string(rows) + " rows; the permutation has " + std::to_string(from.size()));
  if (t.ne.size() == 1 && gguf::ggml_type_traits(t.type_code) && gguf::ggml_type_traits(t.type_code)->block_size != 1)
    fail(file, t, "is a vector of a block type; its elements cannot be reordered");
  const std::size_t row_bytes = t.bytes.size() / std::size_t(std::max<int64_t>(rows, 1));
  auto bytes = std::make_shared<std::vector<std::byte>>(t.bytes.size());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t src = from[std::size_t(r)];
    ROWLM_CHECK(src >= 0 && src < rows, "a row permutation names a row outside the tensor");
    std::memcpy(bytes->data() + std::size_t(r) * row_bytes, t.bytes.data() + std::size_t(src) * row_bytes, row_bytes);
  }
  PermutedTensor out{t, bytes};
  out.info.bytes = std::span<const std::byte>(bytes->data(), bytes->size());
  return out;
}

Tensor gguf_f32(const gguf::File& file, const gguf::TensorInfo& t) {
  if (!gguf::traits(t.type).supported) fail(file, t, "has a type rowlm does not read");
  Tensor out = Tensor::uninitialized(DType::F32, t.shape());
  gguf::dequantize(t.type, t.bytes, std::span(out.data<float>(), std::size_t(out.numel())));
  return out;
}

}  // namespace rowlm
