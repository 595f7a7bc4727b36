#include "backend/workspace.h"

#include <algorithm>

#include "core/error.h"

namespace rowlm {
namespace {

constexpr std::size_t kFirstChunk = std::size_t(1) << 20;

std::size_t round_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

}  // namespace

Workspace::Workspace(Device device, Allocator allocate, std::size_t alignment)
    : device_(device), allocate_(std::move(allocate)), alignment_(alignment) {
  ROWLM_CHECK(alignment_ > 0 && (alignment_ & (alignment_ - 1)) == 0, "workspace alignment must be a power of two");
}

std::size_t Workspace::capacity() const {
  std::size_t n = 0;
  for (const Block& b : blocks_) n += b.size;
  return n;
}

Tensor Workspace::tensor(DType dtype, Shape shape) {
  for (int64_t d : shape) ROWLM_CHECK(d >= 0, "negative dimension in " + shape_str(shape));
  const std::size_t bytes = round_up(std::max<std::size_t>(1, std::size_t(shape_numel(shape)) * dtype_size(dtype)),
                                     alignment_);
  if (blocks_.empty() || blocks_.back().size - blocks_.back().used < bytes) {
    // A new chunk at least as large as everything so far: few chunks per step.
    const std::size_t size = round_up(std::max({bytes, kFirstChunk, capacity()}), alignment_);
    Block b;
    b.chunk = allocate_(size);
    b.size = size;
    blocks_.push_back(std::move(b));
  }
  Block& b = blocks_.back();
  std::byte* p = b.chunk.data + b.used;
  b.used += bytes;
  used_total_ += bytes;
  high_water_ = std::max(high_water_, used_total_);
  return Tensor::view(dtype, std::move(shape), p, nullptr, device_);
}

void Workspace::reset() {
  if (on_reset_) on_reset_();
  if (blocks_.size() > 1) {
    // Coalesce: one chunk for the whole high-water mark.
    const std::size_t size = round_up(std::max(high_water_, capacity()), alignment_);
    blocks_.clear();
    Block b;
    b.chunk = allocate_(size);
    b.size = size;
    blocks_.push_back(std::move(b));
  }
  for (Block& b : blocks_) b.used = 0;
  used_total_ = 0;
}

}  // namespace rowlm
