#include "core/tensor.h"

#include "core/buffer.h"
#include "core/error.h"

namespace rowlm {

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

namespace {

Tensor host_tensor(DType dtype, Shape shape, bool zero) {
  for (int64_t d : shape) ROWLM_CHECK(d >= 0, "negative dimension in " + shape_str(shape));
  const std::size_t bytes = std::size_t(shape_numel(shape)) * dtype_size(dtype);
  auto buffer = std::make_shared<AlignedBuffer>(zero ? AlignedBuffer(bytes) : AlignedBuffer::uninitialized(bytes));
  const void* data = buffer->data();
  return Tensor::view(dtype, std::move(shape), data, std::move(buffer));
}

}  // namespace

Tensor::Tensor(DType dtype, Shape shape) : Tensor(host_tensor(dtype, std::move(shape), true)) {}

Tensor Tensor::uninitialized(DType dtype, Shape shape) { return host_tensor(dtype, std::move(shape), false); }

Tensor Tensor::view(DType dtype, Shape shape, const void* data, std::shared_ptr<const void> owner, Device device) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.data_ = const_cast<void*>(data);  // constness is the caller's contract
  t.owner_ = std::move(owner);
  t.device_ = device;
  return t;
}

Tensor Tensor::reshaped(Shape shape) const {
  ROWLM_CHECK(shape_numel(shape) == numel(), "reshape " + shape_str(shape_) + " to " + shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  ROWLM_CHECK(rank() >= 1 && 0 <= begin && begin <= end && end <= shape_[0],
              "rows out of range of " + shape_str(shape_));
  Tensor t = *this;
  const int64_t row = numel() / (shape_[0] ? shape_[0] : 1);
  t.shape_[0] = end - begin;
  t.data_ = static_cast<std::byte*>(data_) + std::size_t(begin * row) * dtype_size(dtype_);
  return t;
}

}  // namespace rowlm
