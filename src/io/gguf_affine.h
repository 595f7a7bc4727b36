#pragma once
// ggml's block quantizations as affine groups. Every block type rowlm reads
// dequantizes each group of consecutive elements by an affine map of an
// unsigned code, value = scale · code + bias, with one scale and bias per
// group:
//
//   type   bits group  scale            bias               code
//   Q4_0    4    32    d                −8·d               nibble
//   Q4_1    4    32    d                m                  nibble
//   Q5_0    5    32    d                −16·d              5 bits
//   Q5_1    5    32    d                m                  5 bits
//   Q8_0    8    32    d                −128·d             q + 128
//   Q2_K    2    16    d·sc             −dmin·m            2 bits
//   Q3_K    3    16    d·(sc−32)        −4·d·(sc−32)       3 bits
//   Q4_K    4    32    d·sc             −dmin·m            nibble
//   Q5_K    5    32    d·sc             −dmin·m            5 bits
//   Q6_K    6    16    d·sc             −32·d·sc           6 bits
//
// (d, m, dmin f16 from the block, sc and m its sub-block scales). Scales and
// biases are computed in f32 exactly as ggml's dequantizers compute them, so
// scale · code + bias in f32 (two roundings) reproduces ggml's value bit for
// bit for every type but Q6_K, whose ggml order (d·sc)·(code − 32) may round
// differently in the last place (tests bound it).
//
// This is the loader's conversion: it is what lets one affine weight format
// and one set of kernels serve MLX checkpoints and GGUF files.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "io/gguf_types.h"

namespace rowlm::gguf {

struct AffineLayout {
  int bits = 0;
  int group_size = 0;
};

// The affine form of a block type, or nullopt for a dense (F32/F16/BF16) or
// unsupported type.
std::optional<AffineLayout> affine_layout(GgmlType type);

// Decodes a whole number of blocks of `type` (which must have an affine
// layout): codes gets one code per element (each < 2^bits), scales and
// biases one value per group.
void decode_affine(GgmlType type, std::span<const std::byte> blocks, std::span<uint8_t> codes,
                   std::span<float> scales, std::span<float> biases);

}  // namespace rowlm::gguf
