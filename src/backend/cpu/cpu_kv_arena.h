#pragma once
// The CPU backend's KV arena: one storage layer's blocks in host memory,
// each its own 64-byte aligned allocation so that growing never moves a
// block (attention reads them through a table of block addresses).

#include <cstdint>
#include <vector>

#include "backend/kv_block_layout.h"
#include "backend/kv_storage.h"
#include "core/buffer.h"

namespace rowlm::cpu {

class CpuKvArena final : public KvArena {
 public:
  CpuKvArena(const kv::LayerSpec& spec, int block_size) : spec_(spec), layout_(spec, block_size) {}

  const kv::LayerSpec& spec() const override { return spec_; }
  int block_size() const override { return layout_.block_size; }
  std::size_t block_bytes() const override { return layout_.block_bytes; }
  int64_t blocks() const override { return int64_t(storage_.size()); }
  void grow(int64_t count) override;

  const KvBlockLayout& layout() const { return layout_; }
  std::byte* block(int32_t id) { return addresses_[std::size_t(id)]; }
  const std::byte* block(int32_t id) const { return addresses_[std::size_t(id)]; }
  std::byte* const* addresses() const { return addresses_.data(); }

 private:
  kv::LayerSpec spec_;
  KvBlockLayout layout_;
  std::vector<AlignedBuffer> storage_;
  std::vector<std::byte*> addresses_;
};

}  // namespace rowlm::cpu
