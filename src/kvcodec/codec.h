#pragma once
// The KV codecs: how one token's K/V is stored, for each codec, and the
// descriptors of a storage layer (LayerSpec) and of a cache's layout. This
// module is below the backends and the KV bookkeeping: a backend stores the
// bytes, the KV module keeps the books, both agree on what a token record is.
//
// The canonical *token record* of a layer is what extract(), read_token() and
// saved files carry, and what tests compare byte for byte:
//   [K head 0] ... [K head kv_heads-1] [V head 0] ... [V head kv_heads-1]
// and each head record is
//   f32 / bf16 / f16: head_dim values;
//   q8 / q4: head_dim codes packed little end first in uint32 words (MLX's
//   layout), then head_dim/group scales, then as many biases, as bf16.
//
// Inside a backend's blocks the bytes may be arranged for its attention
// kernel (the CPU backend's is backend/cpu/kv_block_layout.h); the two forms
// convert losslessly.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvcodec/codec_id.h"

namespace rowlm::kv {

struct CodecSpec {
  Codec codec = Codec::BF16;
  int group_size = 64;  // quantized codecs only: 32, 64 or 128
  bool operator==(const CodecSpec&) const = default;
};

// "f32", "bf16", "f16", "q8", "q4", optionally with a group: "q4:32".
CodecSpec parse_codec(std::string_view text);
std::string codec_name(const CodecSpec& c);

// One storage layer: the K/V geometry of an attention layer that owns its
// cache (KV-shared layers read their donor's storage layer).
struct LayerSpec {
  int kv_heads = 0;
  int head_dim = 0;
  int window = 0;  // 0 = full attention; else keys p-window < j <= p are visible
  CodecSpec codec;
  bool operator==(const LayerSpec&) const = default;
};

// The layout descriptor: which layers, geometries and codecs a cache (or a
// saved row) holds. Rows move only between identical layouts.
// e.g. "L0 kv1x256 bf16 w512; L1 kv1x512 q4:64 full".
std::string layout_signature(std::span<const LayerSpec> layers);

// A per-layer codec choice: `--kv-codec q8` for every layer, or a map such as
// "bf16,3=q8,7=q4:32" (default first, then layer=codec overrides). Returns one
// CodecSpec per layer; errors name the bad entry.
std::vector<CodecSpec> parse_codec_map(std::string_view text, int num_layers);

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

// Token records of `from` re-encoded as records of `to` (a precision switch,
// docs/kv.md): every head decoded to f32 and encoded again, so a quantized
// `to` quantizes the stored values, not the activations they came from. The
// layers must have the same kv_heads and head_dim; in.size() is a whole
// number of `from` records and out.size() as many `to` records.
void transcode_records(const LayerSpec& from, const LayerSpec& to, std::span<const std::byte> in,
                       std::span<std::byte> out);

}  // namespace rowlm::kv
