#include "kv/codec.h"

#include <cstring>
#include <span>

#include "core/dtype.h"
#include "core/error.h"
#include "quant/affine.h"

namespace rowlm::kv {
namespace {

constexpr int kMaxHeadDim = 4096;

std::string layer_name(int index) {
  return index < 0 ? std::string("kv layer") : "kv layer " + std::to_string(index);
}

uint16_t load_u16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
void store_u16(std::byte* p, uint16_t v) { std::memcpy(p, &v, 2); }

}  // namespace

CodecSpec parse_codec(std::string_view text) {
  CodecSpec c;
  std::string_view name = text, group;
  if (const auto colon = text.find(':'); colon != std::string_view::npos) {
    name = text.substr(0, colon);
    group = text.substr(colon + 1);
  }
  if (name == "f32") c.codec = Codec::F32;
  else if (name == "bf16") c.codec = Codec::BF16;
  else if (name == "f16") c.codec = Codec::F16;
  else if (name == "q8") c.codec = Codec::Q8;
  else if (name == "q4") c.codec = Codec::Q4;
  else
    throw Error("unknown KV codec '" + std::string(text) +
                "' (expected f32, bf16, f16, q8 or q4, optionally q8:G / q4:G with G 32, 64 or 128)");
  if (!group.empty()) {
    if (!is_quantized(c.codec))
      throw Error("KV codec '" + std::string(text) + "': only q8 and q4 take a group size");
    if (group == "32") c.group_size = 32;
    else if (group == "64") c.group_size = 64;
    else if (group == "128") c.group_size = 128;
    else
      throw Error("KV codec '" + std::string(text) + "': group size must be 32, 64 or 128");
  } else if (text.find(':') != std::string_view::npos) {
    throw Error("KV codec '" + std::string(text) + "': missing group size after ':'");
  }
  return c;
}

std::string codec_name(const CodecSpec& c) {
  switch (c.codec) {
    case Codec::F32: return "f32";
    case Codec::BF16: return "bf16";
    case Codec::F16: return "f16";
    case Codec::Q8: return "q8:" + std::to_string(c.group_size);
    case Codec::Q4: return "q4:" + std::to_string(c.group_size);
  }
  return "?";
}

bool is_quantized(Codec c) { return c == Codec::Q8 || c == Codec::Q4; }

HeadFormat head_format(const LayerSpec& spec, int layer_index) {
  const std::string where = layer_name(layer_index);
  if (spec.kv_heads <= 0) throw Error(where + ": kv_heads must be positive, not " + std::to_string(spec.kv_heads));
  if (spec.head_dim <= 0) throw Error(where + ": head_dim must be positive, not " + std::to_string(spec.head_dim));
  if (spec.window < 0) throw Error(where + ": window must be 0 (full) or positive, not " + std::to_string(spec.window));
  if (spec.kv_heads > 4096) throw Error(where + ": implausible kv_heads " + std::to_string(spec.kv_heads));
  if (spec.head_dim > kMaxHeadDim)
    throw Error(where + ": head_dim " + std::to_string(spec.head_dim) + " exceeds the supported " +
                std::to_string(kMaxHeadDim));
  HeadFormat f;
  f.codec = spec.codec.codec;
  f.head_dim = spec.head_dim;
  switch (f.codec) {
    case Codec::F32: f.elem_bytes = 4; break;
    case Codec::BF16:
    case Codec::F16: f.elem_bytes = 2; break;
    case Codec::Q8: f.bits = 8; break;
    case Codec::Q4: f.bits = 4; break;
    default: throw Error(where + ": unknown codec value " + std::to_string(int(f.codec)));
  }
  if (is_quantized(f.codec)) {
    const int g = spec.codec.group_size;
    if (g != 32 && g != 64 && g != 128)
      throw Error(where + ": quantized codec group size must be 32, 64 or 128, not " + std::to_string(g));
    if (spec.head_dim % g != 0)
      throw Error(where + ": head_dim " + std::to_string(spec.head_dim) + " is not a multiple of the group size " +
                  std::to_string(g));
    f.group_size = g;
    f.groups = spec.head_dim / g;
    f.value_bytes = std::size_t(spec.head_dim) * std::size_t(f.bits) / 8;
    f.head_bytes = f.value_bytes + 4 * std::size_t(f.groups);
  } else {
    f.value_bytes = std::size_t(spec.head_dim) * std::size_t(f.elem_bytes);
    f.head_bytes = f.value_bytes;
  }
  return f;
}

void check_layer_spec(const LayerSpec& spec, int layer_index) { (void)head_format(spec, layer_index); }

std::size_t token_record_bytes(const LayerSpec& spec) {
  return 2 * std::size_t(spec.kv_heads) * head_format(spec).head_bytes;
}

void encode_head(const HeadFormat& f, const float* x, std::byte* record) {
  switch (f.codec) {
    case Codec::F32: std::memcpy(record, x, f.value_bytes); return;
    case Codec::BF16:
      for (int d = 0; d < f.head_dim; ++d) store_u16(record + 2 * d, f32_to_bf16(x[d]));
      return;
    case Codec::F16:
      for (int d = 0; d < f.head_dim; ++d) store_u16(record + 2 * d, f32_to_f16(x[d]));
      return;
    case Codec::Q8:
    case Codec::Q4: {
      // Words are assembled in an aligned buffer: records need not be aligned.
      uint32_t words[kMaxHeadDim * 8 / 32];
      uint16_t params[2 * kMaxHeadDim / 32];
      const std::size_t n_words = f.value_bytes / 4;
      quant::quantize({x, std::size_t(f.head_dim)}, {f.bits, f.group_size}, DType::BF16, {words, n_words}, params,
                      params + f.groups);
      std::memcpy(record, words, f.value_bytes);
      std::memcpy(record + f.value_bytes, params, 4 * std::size_t(f.groups));
      return;
    }
  }
}

void decode_head(const HeadFormat& f, const std::byte* record, float* out) {
  switch (f.codec) {
    case Codec::F32: std::memcpy(out, record, f.value_bytes); return;
    case Codec::BF16:
      for (int d = 0; d < f.head_dim; ++d) out[d] = bf16_to_f32(load_u16(record + 2 * d));
      return;
    case Codec::F16:
      for (int d = 0; d < f.head_dim; ++d) out[d] = f16_to_f32(load_u16(record + 2 * d));
      return;
    case Codec::Q8:
    case Codec::Q4: {
      uint32_t words[kMaxHeadDim * 8 / 32];
      uint16_t params[2 * kMaxHeadDim / 32];
      const std::size_t n_words = f.value_bytes / 4;
      std::memcpy(words, record, f.value_bytes);
      std::memcpy(params, record + f.value_bytes, 4 * std::size_t(f.groups));
      quant::dequantize({words, n_words}, params, params + f.groups, DType::BF16, {f.bits, f.group_size},
                        {out, std::size_t(f.head_dim)});
      return;
    }
  }
}

BlockLayout::BlockLayout(const LayerSpec& spec, int bs) : head(head_format(spec)), kv_heads(spec.kv_heads), block_size(bs) {
  k_head_bytes = std::size_t(bs) * head.head_bytes;
  k_bytes = std::size_t(kv_heads) * k_head_bytes;
  v_head_bytes = std::size_t(bs) * head.head_bytes;
  block_bytes = 2 * k_bytes;
}

void BlockLayout::store_token(std::byte* block, int slot, const std::byte* record) const {
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
    if (is_quantized(head.codec)) {
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

void BlockLayout::load_token(const std::byte* block, int slot, std::byte* record) const {
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
    if (is_quantized(head.codec)) {
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

}  // namespace rowlm::kv
