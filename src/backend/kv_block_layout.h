#pragma once
// How rowlm's backends arrange one KV block: `block_size` token slots of one
// storage layer, laid out for the attention kernels. The CPU and CUDA
// backends share it, so a block holds the same bytes on both.
//   K, per kv head h (at h * k_head_bytes): feature-major, so the kernel
//     reads one vector of slots per feature:
//       values: [head_dim][block_size] elements (f32 / bf16 / f16 / q8 code);
//       q4: [head_dim/2][block_size] bytes, low nibble = even feature;
//       then scales [groups][block_size] and biases [groups][block_size] bf16.
//   V, per kv head h (at k_bytes + h * v_head_bytes): token-major, each slot
//     one head record (the canonical form of kvcodec/codec.h).
// A block holds exactly block_size canonical token records' bytes, so the
// two forms convert losslessly.

#include <cstddef>

#include "kvcodec/codec.h"

namespace rowlm {

struct KvBlockLayout {
  kv::HeadFormat head;
  int kv_heads = 0;
  int block_size = 0;
  std::size_t k_head_bytes = 0;  // block_size * head.head_bytes
  std::size_t k_bytes = 0;
  std::size_t v_head_bytes = 0;
  std::size_t block_bytes = 0;

  KvBlockLayout() = default;
  KvBlockLayout(const kv::LayerSpec& spec, int block_size);

  // Offsets inside a K head section.
  std::size_t k_values_offset() const { return 0; }
  std::size_t k_scales_offset() const { return head.value_bytes * std::size_t(block_size); }
  std::size_t k_biases_offset() const {
    return k_scales_offset() + std::size_t(head.groups) * std::size_t(block_size) * 2;
  }

  // Canonical token record <-> slot of a block.
  void store_token(std::byte* block, int slot, const std::byte* record) const;
  void load_token(const std::byte* block, int slot, std::byte* record) const;
};

}  // namespace rowlm
