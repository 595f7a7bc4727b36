#include "backend/weight.h"

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
    w.biases = biases.rows(begin, end);
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
    w.biases = biases.reshaped({new_rows, new_cols / group_size});
  }
  return w;
}

}  // namespace rowlm
