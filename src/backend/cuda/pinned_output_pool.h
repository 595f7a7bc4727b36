#pragma once
// Page-locked host buffers for what the CUDA backend reads back every step
// (logits: a batch of 256 rows over a 262,144-token vocabulary is 268 MB a
// step). A copy into pageable memory is staged by the driver and, into a
// freshly allocated buffer, faults every page in on the way; into pinned
// memory it runs at the bus's speed. Pinning is itself slow (milliseconds
// per hundred MB), so buffers are kept and handed out again.
//
// take(bytes) returns an owner of at least `bytes`; when its last copy is
// dropped the buffer goes back to the pool, which keeps at most kKeep free
// buffers (the smallest go first) and frees the rest. Sizes are rounded up
// to a quarter of a power of two, so steps whose batches differ a little
// share buffers.
//
// Threads: take() and the owners' release may run on any threads; an owner
// may outlive the pool (its buffer is then freed, not returned).

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

namespace rowlm::cuda {

class PinnedOutputPool : public std::enable_shared_from_this<PinnedOutputPool> {
 public:
  static constexpr std::size_t kKeep = 4;
  static std::shared_ptr<PinnedOutputPool> create();
  ~PinnedOutputPool();
  PinnedOutputPool(const PinnedOutputPool&) = delete;
  PinnedOutputPool& operator=(const PinnedOutputPool&) = delete;

  std::shared_ptr<void> take(std::size_t bytes);
  // Free buffers held now, and their bytes (for tests).
  std::size_t free_buffers() const;
  std::size_t free_bytes() const;
  // The size a request of `bytes` is rounded up to.
  static std::size_t size_class(std::size_t bytes);

 private:
  PinnedOutputPool() = default;
  struct Buffer {
    void* data = nullptr;
    std::size_t size = 0;
  };
  void give_back(Buffer b);

  mutable std::mutex mutex_;
  std::vector<Buffer> free_;  // sorted by size, smallest first
};

}  // namespace rowlm::cuda
