#pragma once
// Scratch memory for one forward step, on a backend's device.
//
// A forward pass needs dozens of short-lived activations per layer. Taking
// each from the allocator (zero-filled, as a fresh Tensor is) would cost a
// page-faulting allocation and a memset per op; instead the step takes them
// from this arena, bump-allocated and never zeroed, and the next step reuses
// the same memory. reset() ends the previous step: every tensor the
// workspace handed out becomes invalid. Tensors from it carry no owner.
//
// Growth: when the current chunk is full a new one is added, so tensors
// already handed out stay where they are; at the next reset() the chunks
// are replaced by one chunk as large as the whole high-water mark, so a
// steady workload settles on a single allocation.
//
// Threads: one caller at a time (the backend's).

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "core/tensor.h"

namespace rowlm {

class Workspace {
 public:
  // Allocates `bytes` on the device: the address, and what keeps it alive.
  // Throws OutOfMemory on failure.
  struct Chunk {
    std::byte* data = nullptr;
    std::shared_ptr<void> owner;
  };
  using Allocator = std::function<Chunk(std::size_t bytes)>;

  Workspace(Device device, Allocator allocate, std::size_t alignment = 256);

  // An uninitialised tensor valid until the next reset().
  Tensor tensor(DType dtype, Shape shape);
  void reset();
  // Called at the start of every reset(): a backend that stages host data
  // for asynchronous copies recycles its staging there.
  void on_reset(std::function<void()> hook) { on_reset_ = std::move(hook); }

  Device device() const { return device_; }
  // Bytes handed out since the last reset, and the most ever in one step.
  std::size_t used() const { return used_total_; }
  std::size_t high_water() const { return high_water_; }
  std::size_t capacity() const;

 private:
  struct Block {
    Chunk chunk;
    std::size_t size = 0;
    std::size_t used = 0;
  };
  Device device_;
  Allocator allocate_;
  std::function<void()> on_reset_;
  std::size_t alignment_;
  std::vector<Block> blocks_;
  std::size_t used_total_ = 0;
  std::size_t high_water_ = 0;
};

}  // namespace rowlm
