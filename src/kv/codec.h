#pragma once
// How one token's K/V is stored, for each codec.
//
// The canonical *token record* of a layer is what extract(), read_token() and
// saved files carry, and what tests compare byte for byte:
//   [K head 0] ... [K head kv_heads-1] [V head 0] ... [V head kv_heads-1]
// and each head record is
//   f32 / bf16 / f16: head_dim values;
//   q8 / q4: head_dim codes packed little end first in uint32 words (MLX's
//   layout), then head_dim/group scales, then as many biases, as bf16.
//
// Inside a pool block the bytes are arranged for the attention kernel
// (BlockLayout below); the two forms convert losslessly.

#include <cstddef>
#include <cstdint>
#include <string>

#include "kv/kv_cache.h"

namespace rowlm::kv {

// Byte geometry of one kv head's K (or V) for one token.
struct HeadFormat {
  Codec codec = Codec::BF16;
  int head_dim = 0;
  int group_size = 0;          // quantized codecs
  int bits = 0;                // 8 or 4 for quantized codecs, else 0
  int elem_bytes = 0;          // float codecs: 4 or 2
  std::size_t value_bytes = 0; // values, or packed codes
  int groups = 0;              // quantized: head_dim / group_size
  std::size_t head_bytes = 0;  // value_bytes + 2 * 2 * groups
};

bool is_quantized(Codec c);
// Validates the spec (throws rowlm::Error naming the layer and field).
HeadFormat head_format(const LayerSpec& spec, int layer_index = -1);
void check_layer_spec(const LayerSpec& spec, int layer_index);
std::size_t token_record_bytes(const LayerSpec& spec);

// One kv head vector (head_dim f32) to its head record; quantized codecs
// quantize here (MLX's formula, scales and biases rounded to bf16).
void encode_head(const HeadFormat& f, const float* x, std::byte* record);
// Head record to f32 (dequantized as scale * code + bias).
void decode_head(const HeadFormat& f, const std::byte* record, float* out);

// The layout of one pool block: `block_size` token slots of one layer.
//   K, per kv head h (at h * k_head_bytes): feature-major, so the kernel
//     reads one vector of slots per feature:
//       values: [head_dim][block_size] elements (f32 / bf16 / f16 / q8 code);
//       q4: [head_dim/2][block_size] bytes, low nibble = even feature;
//       then scales [groups][block_size] and biases [groups][block_size] bf16.
//   V, per kv head h (at k_bytes + h * v_head_bytes): token-major, each slot
//     one head record (the canonical form).
struct BlockLayout {
  HeadFormat head;
  int kv_heads = 0;
  int block_size = 0;
  std::size_t k_head_bytes = 0;  // block_size * head.head_bytes
  std::size_t k_bytes = 0;
  std::size_t v_head_bytes = 0;
  std::size_t block_bytes = 0;

  BlockLayout() = default;
  BlockLayout(const LayerSpec& spec, int block_size);

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

}  // namespace rowlm::kv
