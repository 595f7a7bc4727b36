#pragma once
// Owned, 64-byte aligned host bytes: zero-initialised unless asked otherwise
// (scratch that is written before it is read need not pay for the zeroing).

#include <cstddef>
#include <cstdlib>
#include <memory>

namespace rowlm {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t bytes);
  // Bytes whose contents are undefined until written.
  static AlignedBuffer uninitialized(std::size_t bytes);

  std::byte* data() { return data_.get(); }
  const std::byte* data() const { return data_.get(); }
  std::size_t size() const { return size_; }
  template <class T> T* as() { return reinterpret_cast<T*>(data_.get()); }
  template <class T> const T* as() const { return reinterpret_cast<const T*>(data_.get()); }

 private:
  struct Free { void operator()(std::byte* p) const { std::free(p); } };
  std::unique_ptr<std::byte[], Free> data_;
  std::size_t size_ = 0;
  AlignedBuffer(std::size_t bytes, bool zero);
};

}  // namespace rowlm
