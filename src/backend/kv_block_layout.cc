#include "backend/kv_block_layout.h"

#include <cstring>

namespace rowlm {

using kv::Codec;

KvBlockLayout::KvBlockLayout(const kv::LayerSpec& spec, int bs) : head(kv::head_format(spec)), kv_heads(spec.kv_heads), block_size(bs) {
  k_head_bytes = std::size_t(bs) * head.head_bytes;
  k_bytes = std::size_t(kv_heads) * k_head_bytes;
  v_head_bytes = std::size_t(bs) * head.head_bytes;
  block_bytes = 2 * k_bytes;
}

void KvBlockLayout::store_token(std::byte* block, int slot, const std::byte* record) const {
  const std::size_t bs = std::size_t(block_size);
  for (int h = 0; h < kv_heads; ++h) {
    const std::byte* k = record + std::size_t(h) * head.head_bytes;
    std::byte* kh = block + std::size_t(h) * k_head_bytes;
    switch (head.codec) {
      case Codec::F32:
      case Codec::BF16:
      case Codec::F16: {
        const std::size_t e = std::size_t(head.elem_bytes);
        for (int d = 0; d < head.head_dim; ++d) std::memcpy(kh + (d * bs + slot) * e, k + d * e, e);
        break;
      }
      case Codec::Q8:
        for (int d = 0; d < head.head_dim; ++d) kh[d * bs + slot] = k[d];
        break;
      case Codec::Q4:
        // Canonical byte d/2 holds features d (low nibble) and d+1 (high):
        // the same pairing the block uses, so bytes move unchanged.
        for (int b = 0; b < head.head_dim / 2; ++b) kh[b * bs + slot] = k[b];
        break;
    }
    if (kv::is_quantized(head.codec)) {
      for (int g = 0; g < head.groups; ++g) {
        std::memcpy(kh + k_scales_offset() + (g * bs + slot) * 2, k + head.value_bytes + 2 * g, 2);
        std::memcpy(kh + k_biases_offset() + (g * bs + slot) * 2, k + head.value_bytes + 2 * (head.groups + g), 2);
      }
    }
  }
  const std::byte* v = record + std::size_t(kv_heads) * head.head_bytes;
  for (int h = 0; h < kv_heads; ++h)
    std::memcpy(block + k_bytes + std::size_t(h) * v_head_bytes + std::size_t(slot) * head.head_bytes,
                v + std::size_t(h) * head.head_bytes, head.head_bytes);
}

void KvBlockLayout::load_token(const std::byte* block, int slot, std::byte* record) const {
  const std::size_t bs = std::size_t(block_size);
  for (int h = 0; h < kv_heads; ++h) {
    std::byte* k = record + std::size_t(h) * head.head_bytes;
    const std::byte* kh = block + std::size_t(h) * k_head_bytes;
    switch (head.codec) {
      case Codec::F32:
      case Codec::BF16:
      case Codec::F16: {
        const std::size_t e = std::size_t(head.elem_bytes);
        for (int d = 0; d < head.head_dim; ++d) std::memcpy(k + d * e, kh + (d * bs + slot) * e, e);
        break;
      }
      case Codec::Q8:
        for (int d = 0; d < head.head_dim; ++d) k[d] = kh[d * bs + slot];
        break;
      case Codec::Q4:
        for (int b = 0; b < head.head_dim / 2; ++b) k[b] = kh[b * bs + slot];
        break;
    }
    if (kv::is_quantized(head.codec)) {
      for (int g = 0; g < head.groups; ++g) {
        std::memcpy(k + head.value_bytes + 2 * g, kh + k_scales_offset() + (g * bs + slot) * 2, 2);
        std::memcpy(k + head.value_bytes + 2 * (head.groups + g), kh + k_biases_offset() + (g * bs + slot) * 2, 2);
      }
    }
  }
  std::byte* v = record + std::size_t(kv_heads) * head.head_bytes;
  for (int h = 0; h < kv_heads; ++h)
    std::memcpy(v + std::size_t(h) * head.head_bytes,
                block + k_bytes + std::size_t(h) * v_head_bytes + std::size_t(slot) * head.head_bytes, head.head_bytes);
}

}  // namespace rowlm
