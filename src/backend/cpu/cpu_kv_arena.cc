#include "backend/cpu/cpu_kv_arena.h"

#include "core/error.h"

namespace rowlm::cpu {

void CpuKvArena::grow(int64_t count) {
  if (count <= blocks()) return;
  const std::size_t before = storage_.size();
  try {
    storage_.reserve(std::size_t(count));
    addresses_.reserve(std::size_t(count));
    while (int64_t(storage_.size()) < count) {
      // Unzeroed: a block's slots are written before any query reads them.
      storage_.push_back(AlignedBuffer::uninitialized(layout_.block_bytes));
      addresses_.push_back(storage_.back().data());
    }
  } catch (const std::bad_alloc&) {
    storage_.resize(before);
    addresses_.resize(before);
    throw OutOfMemory("KV arena: out of host memory for " + std::to_string(count) + " blocks");
  } catch (...) {
    storage_.resize(before);
    addresses_.resize(before);
    throw;
  }
}

}  // namespace rowlm::cpu
