#include "core/buffer.h"

#include <cstring>
#include <new>

#include "core/error.h"

namespace rowlm {

AlignedBuffer::AlignedBuffer(std::size_t bytes) : AlignedBuffer(bytes, true) {}

AlignedBuffer AlignedBuffer::uninitialized(std::size_t bytes) { return AlignedBuffer(bytes, false); }

AlignedBuffer::AlignedBuffer(std::size_t bytes, bool zero) : size_(bytes) {
  if (bytes == 0) return;
  const std::size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) throw OutOfMemory("out of memory allocating " + std::to_string(bytes) + " bytes");
  if (zero) std::memset(p, 0, rounded);
  data_.reset(static_cast<std::byte*>(p));
}

}  // namespace rowlm
