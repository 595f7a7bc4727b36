#pragma once
// A typed n-dimensional array in row-major order. A Tensor either owns its
// bytes or views bytes kept alive by `owner` (an mmapped checkpoint, say).
// Copies share the same bytes.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace rowlm {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& s);
int64_t shape_numel(const Shape& s);

class Tensor {
 public:
  Tensor() = default;
  // Allocates zeroed, owned storage.
  Tensor(DType dtype, Shape shape);
  // Views `data`; `owner` keeps it alive (may be null for static data).
  static Tensor view(DType dtype, Shape shape, const void* data, std::shared_ptr<const void> owner);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int rank() const { return int(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  std::size_t nbytes() const { return std::size_t(numel()) * dtype_size(dtype_); }
  bool empty() const { return data_ == nullptr; }

  template <class T> T* data() { return static_cast<T*>(data_); }
  template <class T> const T* data() const { return static_cast<const T*>(data_); }
  void* raw() { return data_; }
  const void* raw() const { return data_; }

  // Same bytes, new shape with the same element count.
  Tensor reshaped(Shape shape) const;
  // Rows [begin, end) along the first axis, as a view.
  Tensor rows(int64_t begin, int64_t end) const;

 private:
  DType dtype_ = DType::F32;
  Shape shape_;
  void* data_ = nullptr;
  std::shared_ptr<const void> owner_;
};

}  // namespace rowlm
