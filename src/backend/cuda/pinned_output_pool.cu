#include "backend/cuda/pinned_output_pool.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <bit>

#include "backend/cuda/cuda_check.h"

namespace rowlm::cuda {

std::shared_ptr<PinnedOutputPool> PinnedOutputPool::create() {
  return std::shared_ptr<PinnedOutputPool>(new PinnedOutputPool());
}

PinnedOutputPool::~PinnedOutputPool() {
  for (const Buffer& b : free_) cudaFreeHost(b.data);
}

std::size_t PinnedOutputPool::size_class(std::size_t bytes) {
  constexpr std::size_t kMin = std::size_t(1) << 16;
  if (bytes <= kMin) return kMin;
  // The power of two at or below bytes, in quarter steps up to the next.
  const std::size_t base = std::bit_floor(bytes), quarter = base / 4;
  return base + (bytes - base + quarter - 1) / quarter * quarter;
}

std::shared_ptr<void> PinnedOutputPool::take(std::size_t bytes) {
  const std::size_t size = size_class(bytes);
  Buffer b;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // The smallest free buffer that holds the request, if it is not more than
    // twice the request's class (a small request must not hold a large one).
    auto it = std::find_if(free_.begin(), free_.end(), [&](const Buffer& f) { return f.size >= size; });
    if (it != free_.end() && it->size <= 2 * size) {
      b = *it;
      free_.erase(it);
    }
  }
  if (b.data == nullptr) {
    check(cudaHostAlloc(&b.data, size, cudaHostAllocDefault), "pinned output buffer");
    b.size = size;
  }
  std::weak_ptr<PinnedOutputPool> pool = weak_from_this();
  return std::shared_ptr<void>(b.data, [pool, b](void*) {
    if (auto p = pool.lock()) {
      p->give_back(b);
    } else {
      cudaFreeHost(b.data);
    }
  });
}

void PinnedOutputPool::give_back(Buffer b) {
  std::vector<Buffer> to_free;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.insert(std::upper_bound(free_.begin(), free_.end(), b,
                                  [](const Buffer& x, const Buffer& y) { return x.size < y.size; }),
                 b);
    while (free_.size() > kKeep) {
      to_free.push_back(free_.front());
      free_.erase(free_.begin());
    }
  }
  for (const Buffer& f : to_free) cudaFreeHost(f.data);  // outside the lock: it may take a while
}

std::size_t PinnedOutputPool::free_buffers() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return free_.size();
}

std::size_t PinnedOutputPool::free_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::size_t n = 0;
  for (const Buffer& b : free_) n += b.size;
  return n;
}

}  // namespace rowlm::cuda
