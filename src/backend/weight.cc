#include "backend/weight.h"

#include <bit>
#include <cstring>

#include "core/error.h"

namespace rowlm {

Weight Weight::dense(Tensor t) {
  ROWLM_CHECK(t.rank() == 2, "a dense weight is a matrix, got " + shape_str(t.shape()));
  Weight w;
  w.rows = t.dim(0);
  w.cols = t.dim(1);
  w.values = std::move(t);
  return w;
}

std::string Weight::describe() const {
  const std::string shape = shape_str({rows, cols});
  if (format == WeightFormat::Dense) return std::string(dtype_name(values.dtype())) + " " + shape;
  return "affine q" + std::to_string(bits) + "/" + std::to_string(group_size) + " " + shape;
}

Weight Weight::row_range(int64_t begin, int64_t end) const {
  ROWLM_CHECK(0 <= begin && begin <= end && end <= rows,
              "weight rows [" + std::to_string(begin) + ", " + std::to_string(end) + ") outside " + describe());
  ROWLM_CHECK(code_order != CodeOrder::Mma16 || (begin % 16 == 0 && end % 16 == 0),
              "weight rows [" + std::to_string(begin) + ", " + std::to_string(end) + ") of " + describe() +
                  ": its codes are in tiles of 16 rows");
  Weight w = *this;
  w.rows = end - begin;
  w.values = values.rows(begin, end);
  if (format == WeightFormat::Affine) {
    w.scales = scales.rows(begin, end);
    if (!implied_zero) w.biases = biases.rows(begin, end);
  }
  return w;
}

Weight Weight::reshaped(int64_t new_rows, int64_t new_cols) const {
  ROWLM_CHECK(new_rows >= 0 && new_cols >= 0 && new_rows * new_cols == rows * cols,
              "cannot view " + describe() + " as [" + std::to_string(new_rows) + ", " + std::to_string(new_cols) + "]");
  Weight w = *this;
  w.rows = new_rows;
  w.cols = new_cols;
  if (format == WeightFormat::Dense) {
    w.values = values.reshaped({new_rows, new_cols});
  } else {
    ROWLM_CHECK(group_size > 0 && new_cols % group_size == 0 && new_cols * bits % 32 == 0,
                "cannot view " + describe() + " with " + std::to_string(new_cols) + " columns");
    ROWLM_CHECK(code_order != CodeOrder::Mma16 || new_cols == cols,
                "cannot view " + describe() + " (codes in 16 × 16 tiles) with " + std::to_string(new_cols) +
                    " columns");
    // Halves32 and Lanes16 blocks stay whole only where both widths are whole blocks.
    const int64_t block = code_order == CodeOrder::Halves32  ? 32
                          : code_order == CodeOrder::Lanes16 ? lanes16_block_codes(bits)
                                                             : 1;
    ROWLM_CHECK(cols % block == 0 && new_cols % block == 0,
                "cannot view " + describe() + " (codes in blocks of " + std::to_string(block) + ") with " +
                    std::to_string(new_cols) + " columns");
    w.values = values.reshaped({new_rows, new_cols * bits / 32});
    w.scales = scales.reshaped({new_rows, new_cols / group_size});
    if (!implied_zero) w.biases = biases.reshaped({new_rows, new_cols / group_size});
  }
  return w;
}

Weight without_implied_biases(const Weight& w) {
  if (w.format != WeightFormat::Affine || w.implied_zero || w.bits < 1 || w.bits > 8) return w;
  const DType t = w.scales.dtype();
  const bool float_storage = t == DType::F32 || t == DType::BF16 || t == DType::F16;
  ROWLM_CHECK(float_storage && w.biases.dtype() == t && w.scales.shape() == w.biases.shape() &&
                    w.scales.on_host() && w.biases.on_host(),
                "without_implied_biases: " + w.describe() + ": scales and biases must be host f32, bf16 or f16 of one shape");
  const auto widen = [t](const Tensor& p, int64_t i) {
    if (t == DType::F32) return static_cast<const float*>(p.raw())[i];
    const uint16_t h = static_cast<const uint16_t*>(p.raw())[i];
    return t == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
  };
  const int zero = 1 << (w.bits - 1);
  const float minus_zero = -float(zero);
  for (int64_t i = 0, n = w.scales.numel(); i < n; ++i)
    if (std::bit_cast<uint32_t>(widen(w.scales, i) * minus_zero) != std::bit_cast<uint32_t>(widen(w.biases, i)))
      return w;
  Weight out = w;
  out.biases = Tensor();
  out.implied_zero = zero;
  return out;
}

}  // namespace rowlm
