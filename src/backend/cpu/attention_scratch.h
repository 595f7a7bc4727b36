#pragma once
// Host scratch the attention driver keeps between calls. A decode step runs
// attention once per layer; allocating its tiles afresh each time costs a
// page fault per 4 KiB whenever the allocator hands back fresh pages (large
// blocks come straight from mmap), so the buffer grows to the largest size
// asked and stays. One caller at a time, as the backend that owns it.

#include <cstddef>
#include <cstdint>
#include <memory>

namespace rowlm::cpu {

class AttentionScratch {
 public:
  // At least n floats, 64-byte aligned, contents unspecified. Pointers from
  // an earlier call are invalid after this one.
  float* floats(std::size_t n) {
    if (n > capacity_) {
      data_ = std::make_unique_for_overwrite<float[]>(n + kAlignFloats);
      capacity_ = n;
    }
    const auto u = reinterpret_cast<std::uintptr_t>(data_.get());
    return data_.get() + (((u + 63) & ~std::uintptr_t(63)) - u) / sizeof(float);
  }

 private:
  static constexpr std::size_t kAlignFloats = 16;
  std::unique_ptr<float[]> data_;
  std::size_t capacity_ = 0;
};

}  // namespace rowlm::cpu
