#include "backend/cpu/cpu_kv_arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <new>
#include <string>

#include "core/asan.h"
#include "core/error.h"

namespace rowlm::cpu {
namespace {

// About this much per mapping: few mappings for a large pool, and little
// address space reserved ahead of the blocks in use.
constexpr std::size_t kChunkTarget = std::size_t(1) << 20;
// A block's bytes as the kernels may touch them: a 64-byte multiple.
std::size_t block_extent(std::size_t block_bytes) { return (block_bytes + 63) / 64 * 64; }
// Under ASan, poisoned after every block: overruns are reported.
constexpr std::size_t kRedZone = kAsan ? 64 : 0;

std::size_t page_bytes() {
  const long p = sysconf(_SC_PAGESIZE);
  return p > 0 ? std::size_t(p) : 4096;
}

std::size_t round_up(std::size_t n, std::size_t m) { return (n + m - 1) / m * m; }

}  // namespace

void CpuKvArena::Unmap::operator()(std::byte* p) const {
  asan_unpoison(p, bytes);  // the range may be mapped again by anyone
  munmap(p, bytes);
}

CpuKvArena::CpuKvArena(const kv::LayerSpec& spec, int block_size) : spec_(spec), layout_(spec, block_size) {
  stride_ = block_extent(layout_.block_bytes) + kRedZone;
  blocks_per_chunk_ = int64_t(std::max<std::size_t>(1, kChunkTarget / stride_));
  chunk_bytes_ = round_up(std::size_t(blocks_per_chunk_) * stride_, page_bytes());
}

void CpuKvArena::grow(int64_t count) {
  if (count <= blocks()) return;
  // Everything that can fail happens before the arena changes.
  const auto chunks_needed = std::size_t((count + blocks_per_chunk_ - 1) / blocks_per_chunk_);
  std::vector<Chunk> fresh;
  try {
    addresses_.reserve(std::size_t(count));
    chunks_.reserve(chunks_needed);
    while (chunks_.size() + fresh.size() < chunks_needed) {
      // Untouched pages of a private anonymous mapping cost no memory until
      // written; a block's slots are written before any query reads them.
      void* p = mmap(nullptr, chunk_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED)
        throw OutOfMemory("KV arena: out of host memory for " + std::to_string(count) + " blocks");
      fresh.emplace_back(static_cast<std::byte*>(p), Unmap{chunk_bytes_});
      asan_poison(fresh.back().get(), chunk_bytes_);  // blocks are unpoisoned as they come to exist
    }
  } catch (const std::bad_alloc&) {
    throw OutOfMemory("KV arena: out of host memory for " + std::to_string(count) + " blocks");
  }
  for (Chunk& c : fresh) chunks_.push_back(std::move(c));  // capacity reserved: no throw
  for (int64_t id = blocks(); id < count; ++id) {
    std::byte* b = chunks_[std::size_t(id / blocks_per_chunk_)].get() + std::size_t(id % blocks_per_chunk_) * stride_;
    asan_unpoison(b, block_extent(layout_.block_bytes));
    addresses_.push_back(b);
  }
}

std::size_t CpuKvArena::release_free_blocks(std::span<const int32_t> free_blocks) {
  // A bit per block slot (linear in the pool, no sort: a large pool's free
  // list has millions of ids), the chunks' slots past blocks() (never handed
  // out) free too; each run of free slots inside one chunk gives back the
  // whole pages it covers.
  const int64_t slots = int64_t(chunks_.size()) * blocks_per_chunk_;
  std::vector<bool> free(std::size_t(slots), false);
  for (int32_t id : free_blocks) {
    ROWLM_CHECK(id >= 0 && id < blocks(), "release_free_blocks: no such block");
    free[std::size_t(id)] = true;
  }
  for (int64_t id = blocks(); id < slots; ++id) free[std::size_t(id)] = true;
  const std::size_t page = page_bytes();
  std::size_t released = 0;
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    const int64_t base_id = int64_t(c) * blocks_per_chunk_;
    // Bytes of the chunk's blocks that exist (what the count reports).
    const std::size_t existing = std::size_t(std::min(blocks() - base_id, blocks_per_chunk_)) * stride_;
    for (int64_t first = 0; first < blocks_per_chunk_;) {
      if (!free[std::size_t(base_id + first)]) {
        ++first;
        continue;
      }
      int64_t end_id = first + 1;
      while (end_id < blocks_per_chunk_ && free[std::size_t(base_id + end_id)]) ++end_id;
      const std::size_t begin = round_up(std::size_t(first) * stride_, page);
      const std::size_t end = end_id == blocks_per_chunk_ ? chunk_bytes_ : std::size_t(end_id) * stride_ / page * page;
      if (begin < end && madvise(chunks_[c].get() + begin, end - begin, MADV_DONTNEED) == 0)
        released += std::min(end, existing) > begin ? std::min(end, existing) - begin : 0;
      first = end_id;
    }
  }
  return released;
}

std::size_t CpuKvArena::resident_bytes() const {
  const std::size_t page = page_bytes();
  std::vector<unsigned char> in_core(chunk_bytes_ / page);
  std::size_t pages = 0;
  for (const Chunk& c : chunks_) {
    if (mincore(c.get(), chunk_bytes_, in_core.data()) != 0)
      throw Error("KV arena: mincore failed on a chunk of the arena");
    for (unsigned char v : in_core) pages += v & 1u;
  }
  return pages * page;
}

}  // namespace rowlm::cpu
