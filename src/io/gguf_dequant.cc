#include "io/gguf_dequant.h"

#include <cstdint>
#include <cstring>
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "io/gguf_block_fields.h"

namespace rowlm::gguf {
namespace {

using block_fields::Block;
using block_fields::half;
using block_fields::scale_min_k4;

void q4_0(Block b, float* y) {  // {d; qs[16]}
  const float d = half(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    const int x0 = (qs[j] & 0x0F) - 8;
    const int x1 = (qs[j] >> 4) - 8;
    y[j] = float(x0) * d;
    y[j + 16] = float(x1) * d;
  }
}

void q4_1(Block b, float* y) {  // {d; m; qs[16]}
  const float d = half(b), m = half(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = float(qs[j] & 0x0F) * d + m;
    y[j + 16] = float(qs[j] >> 4) * d + m;
  }
}

// Q5_0 / Q5_1: bit j of qh is the fifth bit of element j.
int q5_value(const uint8_t* qs, uint32_t qh, int i) {
  const int low = i < 16 ? (qs[i] & 0x0F) : (qs[i - 16] >> 4);
  return low | int(((qh >> i) & 1u) << 4);
}

void q5_0(Block b, float* y) {  // {d; qh[4]; qs[16]}
  const float d = half(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  for (int i = 0; i < 32; ++i) y[i] = float(q5_value(b + 6, qh, i) - 16) * d;
}

void q5_1(Block b, float* y) {  // {d; m; qh[4]; qs[16]}
  const float d = half(b), m = half(b + 2);
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  for (int i = 0; i < 32; ++i) y[i] = float(q5_value(b + 8, qh, i)) * d + m;
}

void q8_0(Block b, float* y) {  // {d; int8 qs[32]}
  const float d = half(b);
  for (int i = 0; i < 32; ++i) y[i] = float(int8_t(b[2 + i])) * d;
}

void q2_k(Block b, float* y) {  // {scales[16]; qs[64]; d; dmin}
  const uint8_t* scales = b;
  const uint8_t* q = b + 16;
  const float d = half(b + 80), dmin = half(b + 82);
  int is = 0;
  for (int n = 0; n < 256; n += 128) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half_ = 0; half_ < 2; ++half_) {
        const uint8_t sc = scales[is++];
        const float dl = d * float(sc & 0xF), ml = dmin * float(sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * float((q[l + 16 * half_] >> shift) & 3) - ml;
      }
    }
    q += 32;
  }
}

// Q3_K's sixteen 6-bit scales: low 4 bits in bytes 0..7 (two per byte),
// high 2 bits in bytes 8..11 (four per byte).
int q3_k_scale(const uint8_t* s, int j) {
  const int low = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
  const int high = (s[8 + (j % 4)] >> (2 * (j / 4))) & 3;
  return (low | (high << 4)) - 32;
}

void q3_k(Block b, float* y) {  // {hmask[32]; qs[64]; scales[12]; d}
  const uint8_t* hm = b;
  const uint8_t* q = b + 32;
  const uint8_t* scales = b + 96;
  const float d_all = half(b + 108);
  int is = 0;
  uint8_t m = 1;
  for (int n = 0; n < 256; n += 128) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half_ = 0; half_ < 2; ++half_) {
        const float dl = d_all * float(q3_k_scale(scales, is++));
        for (int l = 0; l < 16; ++l) {
          const int k = l + 16 * half_;
          *y++ = dl * float(((q[k] >> shift) & 3) - ((hm[k] & m) ? 0 : 4));
        }
      }
      m = uint8_t(m << 1);
    }
    q += 32;
  }
}


void q4_k(Block b, float* y) {  // {d; dmin; scales[12]; qs[128]}
  const float d = half(b), dmin = half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int j = 0; j < 8; j += 2) {
    int sc, m;
    scale_min_k4(j, scales, sc, m);
    const float d1 = d * float(sc), m1 = dmin * float(m);
    scale_min_k4(j + 1, scales, sc, m);
    const float d2 = d * float(sc), m2 = dmin * float(m);
    for (int l = 0; l < 32; ++l) *y++ = d1 * float(q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * float(q[l] >> 4) - m2;
    q += 32;
  }
}

void q5_k(Block b, float* y) {  // {d; dmin; scales[12]; qh[32]; qs[128]}
  const float d = half(b), dmin = half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  int u = 0;  // the bit of qh holding this pair of sub-blocks' fifth bits
  for (int j = 0; j < 8; j += 2, u += 2) {
    int sc, m;
    scale_min_k4(j, scales, sc, m);
    const float d1 = d * float(sc), m1 = dmin * float(m);
    scale_min_k4(j + 1, scales, sc, m);
    const float d2 = d * float(sc), m2 = dmin * float(m);
    for (int l = 0; l < 32; ++l) *y++ = d1 * float((ql[l] & 0xF) + (((qh[l] >> u) & 1) ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * float((ql[l] >> 4) + (((qh[l] >> (u + 1)) & 1) ? 16 : 0)) - m2;
    ql += 32;
  }
}

void q6_k(Block b, float* y) {  // {ql[128]; qh[64]; int8 scales[16]; d}
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = half(b + 208);
  for (int n = 0; n < 256; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * float(sc[is]) * float(q1);
      y[l + 32] = d * float(sc[is + 2]) * float(q2);
      y[l + 64] = d * float(sc[is + 4]) * float(q3);
      y[l + 96] = d * float(sc[is + 6]) * float(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

using BlockFn = void (*)(Block, float*);

BlockFn block_fn(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0: return q4_0;
    case GgmlType::Q4_1: return q4_1;
    case GgmlType::Q5_0: return q5_0;
    case GgmlType::Q5_1: return q5_1;
    case GgmlType::Q8_0: return q8_0;
    case GgmlType::Q2_K: return q2_k;
    case GgmlType::Q3_K: return q3_k;
    case GgmlType::Q4_K: return q4_k;
    case GgmlType::Q5_K: return q5_k;
    case GgmlType::Q6_K: return q6_k;
    default: return nullptr;
  }
}

}  // namespace

void dequantize(GgmlType type, std::span<const std::byte> blocks, std::span<float> out) {
  const GgmlTypeTraits t = traits(type);
  ROWLM_CHECK(int64_t(out.size()) % t.block_size == 0 &&
                  int64_t(blocks.size()) == int64_t(out.size()) / t.block_size * t.block_bytes,
              "gguf::dequantize sizes for " + std::string(t.name));
  const auto* p = reinterpret_cast<const uint8_t*>(blocks.data());
  switch (type) {
    case GgmlType::F32: std::memcpy(out.data(), p, blocks.size()); return;
    case GgmlType::F16:
    case GgmlType::BF16:
      for (std::size_t i = 0; i < out.size(); ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = type == GgmlType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      return;
    default: break;
  }
  const BlockFn fn = block_fn(type);
  if (!fn) throw Error("GGUF tensor type " + std::string(t.name) + " cannot be dequantized by rowlm");
  const std::size_t n_blocks = out.size() / std::size_t(t.block_size);
  for (std::size_t i = 0; i < n_blocks; ++i) fn(p + i * std::size_t(t.block_bytes), out.data() + i * t.block_size);
}

}  // namespace rowlm::gguf
