#pragma once
// Field readers shared by the GGUF block decoders (gguf_dequant.cc, which
// produces floats, and gguf_affine.cc, which produces codes and affine
// parameters): a block's bytes are read at the offsets of ggml's structs.

#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace rowlm::gguf::block_fields {

using Block = const uint8_t*;

// The f16 stored at p (blocks are byte-aligned, so no direct load).
inline float half(Block p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// Q4_K / Q5_K: eight 6-bit scales and mins packed in 12 bytes
// (ggml's get_scale_min_k4).
inline void scale_min_k4(int j, const uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

}  // namespace rowlm::gguf::block_fields
