#pragma once
// A typed n-dimensional array in row-major order, and where its bytes live.
//
// A Tensor is a view: a dtype, a shape, the address of its first element on
// its device, and `owner`, which keeps the bytes alive (an owned buffer, an
// mmapped checkpoint, a backend's device allocation), or null when someone
// else guarantees their lifetime (a backend's per-step workspace: such a
// tensor is valid until that workspace is reset). Copies share the bytes.
//
// data<T>() is an address in the tensor's device's memory: only host tensors
// may be dereferenced by host code. Model code never dereferences activations
// at all; it hands tensors to its backend.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"

namespace rowlm {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& s);
int64_t shape_numel(const Shape& s);

class Tensor {
 public:
  Tensor() = default;
  // Allocates zeroed, owned host storage.
  Tensor(DType dtype, Shape shape);
  // Owned host storage whose contents are undefined until written.
  static Tensor uninitialized(DType dtype, Shape shape);
  // Views `data` on `device`; `owner` keeps it alive (may be null when the
  // bytes' lifetime is guaranteed otherwise).
  static Tensor view(DType dtype, Shape shape, const void* data, std::shared_ptr<const void> owner,
                     Device device = Device::host());

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int rank() const { return int(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  std::size_t nbytes() const { return std::size_t(numel()) * dtype_size(dtype_); }
  bool empty() const { return data_ == nullptr; }
  Device device() const { return device_; }
  bool on_host() const { return device_.is_host(); }
  const std::shared_ptr<const void>& owner() const { return owner_; }

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
  Device device_;
};

}  // namespace rowlm
