#include "io/gguf_affine.h"

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

// Every decoder writes one block: 32 or 256 codes and its groups' params.
struct Out {
  uint8_t* code;
  float* scale;
  float* bias;
};

void q4_0(Block b, Out o) {
  const float d = half(b);
  o.scale[0] = d;
  o.bias[0] = -8.0f * d;
  for (int j = 0; j < 16; ++j) {
    o.code[j] = b[2 + j] & 0x0F;
    o.code[j + 16] = b[2 + j] >> 4;
  }
}

void q4_1(Block b, Out o) {
  o.scale[0] = half(b);
  o.bias[0] = half(b + 2);
  for (int j = 0; j < 16; ++j) {
    o.code[j] = b[4 + j] & 0x0F;
    o.code[j + 16] = b[4 + j] >> 4;
  }
}

void q5_codes(const uint8_t* qh_bytes, const uint8_t* qs, uint8_t* code) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 16; ++j) {
    code[j] = uint8_t((qs[j] & 0x0F) | (((qh >> j) & 1u) << 4));
    code[j + 16] = uint8_t((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
  }
}

void q5_0(Block b, Out o) {
  const float d = half(b);
  o.scale[0] = d;
  o.bias[0] = -16.0f * d;
  q5_codes(b + 2, b + 6, o.code);
}

void q5_1(Block b, Out o) {
  o.scale[0] = half(b);
  o.bias[0] = half(b + 2);
  q5_codes(b + 4, b + 8, o.code);
}

void q8_0(Block b, Out o) {
  const float d = half(b);
  o.scale[0] = d;
  o.bias[0] = -128.0f * d;
  for (int j = 0; j < 32; ++j) o.code[j] = uint8_t(int(int8_t(b[2 + j])) + 128);
}

// The K-quants lay a 256-element super-block out as two halves of 128; in
// each half, byte l of a 32-byte run of codes holds element l (and l + 16
// for the 16-element sub-blocks) of consecutive sub-blocks in successive bit
// fields. element(e) below names each element's place directly.

void q2_k(Block b, Out o) {  // {scales[16]; qs[64]; d; dmin}
  const float d = half(b + 80), dmin = half(b + 82);
  for (int g = 0; g < 16; ++g) {
    o.scale[g] = d * float(b[g] & 0xF);
    o.bias[g] = -(dmin * float(b[g] >> 4));
  }
  for (int e = 0; e < 256; ++e) {
    const int half_ = e / 128, r = e % 128;  // r: 32 elements per 2-bit field
    const int shift = 2 * (r / 32), l = r % 32;
    o.code[e] = (b[16 + 32 * half_ + l] >> shift) & 3;
  }
}

void q3_k(Block b, Out o) {  // {hmask[32]; qs[64]; scales[12]; d}
  const float d = half(b + 108);
  const uint8_t* s = b + 96;
  for (int g = 0; g < 16; ++g) {
    const int low = g < 8 ? (s[g] & 0xF) : (s[g - 8] >> 4);
    const int high = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
    const float dl = d * float((low | (high << 4)) - 32);
    o.scale[g] = dl;
    o.bias[g] = -4.0f * dl;
  }
  for (int e = 0; e < 256; ++e) {
    const int half_ = e / 128, r = e % 128;
    const int field = r / 32, l = r % 32;
    const int low = (b[32 + 32 * half_ + l] >> (2 * field)) & 3;
    const int high = (b[l] >> (4 * half_ + field)) & 1;  // hmask bit: set means +4 over ggml's q − 4
    o.code[e] = uint8_t(low | (high << 2));
  }
}


void k4_params(Block b, Out o) {  // {d; dmin; scales[12]; ...}: Q4_K and Q5_K
  const float d = half(b), dmin = half(b + 2);
  for (int g = 0; g < 8; ++g) {
    int sc, m;
    scale_min_k4(g, b + 4, sc, m);
    o.scale[g] = d * float(sc);
    o.bias[g] = -(dmin * float(m));
  }
}

void q4_k(Block b, Out o) {  // {d; dmin; scales[12]; qs[128]}
  k4_params(b, o);
  for (int e = 0; e < 256; ++e) {
    const int pair = e / 64, r = e % 64;  // 64 elements per 32 bytes: low nibbles, then high
    const uint8_t q = b[16 + 32 * pair + r % 32];
    o.code[e] = r < 32 ? (q & 0xF) : (q >> 4);
  }
}

void q5_k(Block b, Out o) {  // {d; dmin; scales[12]; qh[32]; qs[128]}
  k4_params(b, o);
  for (int e = 0; e < 256; ++e) {
    const int pair = e / 64, r = e % 64;
    const uint8_t q = b[48 + 32 * pair + r % 32];
    const int low = r < 32 ? (q & 0xF) : (q >> 4);
    const int high = (b[16 + r % 32] >> (e / 32)) & 1;  // sub-block g's fifth bits are qh bit g
    o.code[e] = uint8_t(low | (high << 4));
  }
}

void q6_k(Block b, Out o) {  // {ql[128]; qh[64]; int8 scales[16]; d}
  const float d = half(b + 208);
  for (int g = 0; g < 16; ++g) {
    const float ds = d * float(int8_t(b[192 + g]));
    o.scale[g] = ds;
    o.bias[g] = -32.0f * ds;
  }
  for (int e = 0; e < 256; ++e) {
    const int half_ = e / 128, r = e % 128;
    const int quarter = r / 32, l = r % 32;  // quarters: ql low, ql+32 low, ql high, ql+32 high
    const uint8_t ql = b[64 * half_ + l + 32 * (quarter % 2)];
    const int low = quarter < 2 ? (ql & 0xF) : (ql >> 4);
    const int high = (b[128 + 32 * half_ + l] >> (2 * quarter)) & 3;
    o.code[e] = uint8_t(low | (high << 4));
  }
}

using DecodeFn = void (*)(Block, Out);

struct Entry {
  GgmlType type;
  AffineLayout layout;
  DecodeFn fn;
};

constexpr Entry kEntries[] = {
    {GgmlType::Q4_0, {4, 32}, q4_0}, {GgmlType::Q4_1, {4, 32}, q4_1}, {GgmlType::Q5_0, {5, 32}, q5_0},
    {GgmlType::Q5_1, {5, 32}, q5_1}, {GgmlType::Q8_0, {8, 32}, q8_0}, {GgmlType::Q2_K, {2, 16}, q2_k},
    {GgmlType::Q3_K, {3, 16}, q3_k}, {GgmlType::Q4_K, {4, 32}, q4_k}, {GgmlType::Q5_K, {5, 32}, q5_k},
    {GgmlType::Q6_K, {6, 16}, q6_k},
};

const Entry* entry(GgmlType type) {
  for (const Entry& e : kEntries)
    if (e.type == type) return &e;
  return nullptr;
}

}  // namespace

std::optional<AffineLayout> affine_layout(GgmlType type) {
  const Entry* e = entry(type);
  if (!e) return std::nullopt;
  return e->layout;
}

void decode_affine(GgmlType type, std::span<const std::byte> blocks, std::span<uint8_t> codes,
                   std::span<float> scales, std::span<float> biases) {
  const Entry* e = entry(type);
  const GgmlTypeTraits t = traits(type);
  if (!e) throw Error("GGUF tensor type " + std::string(t.name) + " has no affine form");
  const std::size_t n_blocks = codes.size() / std::size_t(t.block_size);
  const std::size_t groups_per_block = std::size_t(t.block_size / e->layout.group_size);
  ROWLM_CHECK(codes.size() % std::size_t(t.block_size) == 0 &&
                  blocks.size() == n_blocks * std::size_t(t.block_bytes) &&
                  scales.size() == n_blocks * groups_per_block && biases.size() == scales.size(),
              "gguf::decode_affine sizes for " + std::string(t.name));
  const auto* p = reinterpret_cast<const uint8_t*>(blocks.data());
  for (std::size_t i = 0; i < n_blocks; ++i)
    e->fn(p + i * std::size_t(t.block_bytes),
          {codes.data() + i * std::size_t(t.block_size), scales.data() + i * groups_per_block,
           biases.data() + i * groups_per_block});
}

}  // namespace rowlm::gguf
