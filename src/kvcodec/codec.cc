#include "kvcodec/codec.h"

#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

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

void transcode_records(const LayerSpec& from, const LayerSpec& to, std::span<const std::byte> in,
                       std::span<std::byte> out) {
  if (from.kv_heads != to.kv_heads || from.head_dim != to.head_dim)
    throw Error("KV transcode: layers of " + std::to_string(from.kv_heads) + "x" + std::to_string(from.head_dim) +
                " and " + std::to_string(to.kv_heads) + "x" + std::to_string(to.head_dim) + " differ in geometry");
  const HeadFormat f = head_format(from), t = head_format(to);
  const std::size_t heads = 2 * std::size_t(from.kv_heads);  // K heads, then V heads
  const std::size_t n = in.size() / (heads * f.head_bytes);
  if (in.size() != n * heads * f.head_bytes || out.size() != n * heads * t.head_bytes)
    throw Error("KV transcode: " + std::to_string(in.size()) + " bytes in and " + std::to_string(out.size()) +
                " out are not the same whole number of records");
  std::vector<float> x(std::size_t(from.head_dim));
  for (std::size_t h = 0; h < n * heads; ++h) {
    decode_head(f, in.data() + h * f.head_bytes, x.data());
    encode_head(t, x.data(), out.data() + h * t.head_bytes);
  }
}

// ---------------------------------------------------------------------------
// Layout descriptors and codec maps

std::string layout_signature(std::span<const LayerSpec> layers) {
  std::string s;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const LayerSpec& l = layers[i];
    if (i) s += "; ";
    s += "L" + std::to_string(i) + " kv" + std::to_string(l.kv_heads) + "x" + std::to_string(l.head_dim) + " " +
         codec_name(l.codec) + " " + (l.window ? "w" + std::to_string(l.window) : std::string("full"));
  }
  return s;
}

std::vector<CodecSpec> parse_codec_map(std::string_view text, int num_layers) {
  if (num_layers <= 0) throw Error("KV codec map: the model has no storage layers");
  std::vector<CodecSpec> out;
  std::size_t pos = 0;
  bool first = true;
  while (pos <= text.size()) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    const std::string_view item = text.substr(pos, comma - pos);
    if (item.empty()) throw Error("KV codec map '" + std::string(text) + "': empty entry");
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      if (!first) throw Error("KV codec map '" + std::string(text) + "': only the first entry may omit 'layer='");
      out.assign(std::size_t(num_layers), parse_codec(item));
    } else {
      if (first) throw Error("KV codec map '" + std::string(text) + "': the first entry must be the default codec");
      const std::string idx(item.substr(0, eq));
      int layer = -1;
      try {
        std::size_t used = 0;
        layer = std::stoi(idx, &used);
        if (used != idx.size()) layer = -1;
      } catch (const std::exception&) {
        layer = -1;
      }
      if (layer < 0 || layer >= num_layers)
        throw Error("KV codec map '" + std::string(text) + "': '" + idx + "' is not a storage layer index (0.." +
                    std::to_string(num_layers - 1) + ")");
      out[std::size_t(layer)] = parse_codec(item.substr(eq + 1));
    }
    first = false;
    pos = comma + 1;
  }
  return out;
}

}  // namespace rowlm::kv
