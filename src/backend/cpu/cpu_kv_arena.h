#pragma once
// The CPU backend's KV arena: one storage layer's blocks in host memory.
// Blocks live in chunks, anonymous page-aligned mappings of about 1 MiB
// that are never moved or unmapped while the arena lives (attention reads
// blocks through a table of their addresses), so growing never moves a
// block. Each block starts on a 64-byte boundary. Chunks are what the
// arena can give back: release_free_blocks returns the pages that free
// blocks cover to the system (madvise MADV_DONTNEED) and resident_bytes
// reports what is resident (mincore). Under AddressSanitizer a poisoned
// 64-byte gap follows every block, as a block of its own allocation had.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/kv_block_layout.h"
#include "backend/kv_storage.h"

namespace rowlm::cpu {

class CpuKvArena final : public KvArena {
 public:
  CpuKvArena(const kv::LayerSpec& spec, int block_size);

  const kv::LayerSpec& spec() const override { return spec_; }
  int block_size() const override { return layout_.block_size; }
  std::size_t block_bytes() const override { return layout_.block_bytes; }
  int64_t blocks() const override { return int64_t(addresses_.size()); }
  void grow(int64_t count) override;
  std::size_t release_free_blocks(std::span<const int32_t> free_blocks) override;
  std::size_t resident_bytes() const override;

  const KvBlockLayout& layout() const { return layout_; }
  std::byte* block(int32_t id) { return addresses_[std::size_t(id)]; }
  const std::byte* block(int32_t id) const { return addresses_[std::size_t(id)]; }
  std::byte* const* addresses() const { return addresses_.data(); }
  // Blocks per chunk (a chunk's pages are released only where whole pages
  // lie under free blocks).
  int64_t blocks_per_chunk() const { return blocks_per_chunk_; }

 private:
  struct Unmap {
    std::size_t bytes = 0;
    void operator()(std::byte* p) const;
  };
  using Chunk = std::unique_ptr<std::byte, Unmap>;

  kv::LayerSpec spec_;
  KvBlockLayout layout_;
  std::size_t stride_ = 0;        // bytes from one block's start to the next
  int64_t blocks_per_chunk_ = 0;
  std::size_t chunk_bytes_ = 0;   // whole pages
  std::vector<Chunk> chunks_;
  std::vector<std::byte*> addresses_;
};

}  // namespace rowlm::cpu
