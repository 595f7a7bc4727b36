// The portable kernels: plain C++ on 16-float arrays, std::fma for every
// fused multiply-add. The reference that the SIMD paths must match bitwise.

#include <cmath>
#include <cstring>

#include "backend/cpu/kernel_algorithms.h"
#include "core/dtype.h"

namespace rowlm::cpu {
namespace {

struct VScalar {
  struct R {
    float v[kLanes];
  };
  struct Mask {
    bool v[kLanes];
  };
  struct P {
    uint16_t v[2 * kLanes];
  };
  static constexpr int kMR = 2;
  static constexpr int kAccumulators = 4;

  template <class F>
  static R map(F f) {
    R r;
    for (int i = 0; i < kLanes; ++i) r.v[i] = f(i);
    return r;
  }

  static R zero() { return set1(0.0f); }
  static R set1(float f) { return map([&](int) { return f; }); }
  static R load(const float* p) { return map([&](int i) { return p[i]; }); }
  static R load_partial(const float* p, int n) { return map([&](int i) { return i < n ? p[i] : 0.0f; }); }
  static R load_bf16(const uint16_t* p) { return map([&](int i) { return bf16_to_f32(p[i]); }); }
  static R load_bf16_partial(const uint16_t* p, int n) {
    return map([&](int i) { return i < n ? bf16_to_f32(p[i]) : 0.0f; });
  }
  static R load_f16(const uint16_t* p) { return map([&](int i) { return f16_to_f32(p[i]); }); }
  static R load_f16_partial(const uint16_t* p, int n) {
    return map([&](int i) { return i < n ? f16_to_f32(p[i]) : 0.0f; });
  }
  static R codes4(const uint32_t* p) { return map([&](int i) { return float((p[i / 8] >> (4 * (i % 8))) & 15u); }); }
  static R codes8(const uint32_t* p) { return map([&](int i) { return float((p[i / 4] >> (8 * (i % 4))) & 255u); }); }
  // Codes of 1-7 bits, one lane at a time: the byte the code starts in, and
  // the next one only where the code runs into it.
  struct Unpack {
    int bits;
  };
  static Unpack unpack(int bits) { return {bits}; }
  static R codes(const Unpack& u, const uint8_t* p, int64_t) {
    return map([&](int i) {
      const int bit = i * u.bits, byte = bit / 8, shift = bit % 8;
      uint32_t v = uint32_t(p[byte]) >> shift;
      if (shift + u.bits > 8) v |= uint32_t(p[byte + 1]) << (8 - shift);
      return float(v & ((1u << u.bits) - 1u));
    });
  }
  // 4-bit dequantization by arithmetic (AVX-512 uses a lookup table).
  struct Table4 {
    R s, b;
  };
  static Table4 table4(const R& s, const R& b) { return {s, b}; }
  static R dequant4(const Table4& t, const uint32_t* p) { return add(mul(codes4(p), t.s), t.b); }
  // A Halves32 block: byte i holds code i | code i + 16 << 4.
  struct Block4 {
    const uint8_t* bytes;
  };
  static Block4 block4(const uint32_t* p) { return {reinterpret_cast<const uint8_t*>(p)}; }
  static R dequant4_lo(const Table4& t, const Block4& c) {
    return add(mul(map([&](int i) { return float(c.bytes[i] & 15u); }), t.s), t.b);
  }
  static R dequant4_hi(const Table4& t, const Block4& c) {
    return add(mul(map([&](int i) { return float(c.bytes[i] >> 4); }), t.s), t.b);
  }
  static void store(float* p, const R& a) { std::memcpy(p, a.v, sizeof a.v); }
  static void store_partial(float* p, const R& a, int n) { std::memcpy(p, a.v, sizeof(float) * n); }

  static R add(const R& a, const R& b) { return map([&](int i) { return a.v[i] + b.v[i]; }); }
  static R sub(const R& a, const R& b) { return map([&](int i) { return a.v[i] - b.v[i]; }); }
  static R mul(const R& a, const R& b) { return map([&](int i) { return a.v[i] * b.v[i]; }); }
  static R div(const R& a, const R& b) { return map([&](int i) { return a.v[i] / b.v[i]; }); }
  static R fma(const R& a, const R& b, const R& c) {
    return map([&](int i) { return std::fma(a.v[i], b.v[i], c.v[i]); });
  }
  static R abs(const R& a) { return map([&](int i) { return std::fabs(a.v[i]); }); }
  // x86 MINPS semantics: the second operand when unordered or equal.
  static R min(const R& a, const R& b) { return map([&](int i) { return a.v[i] < b.v[i] ? a.v[i] : b.v[i]; }); }
  static R round_even(const R& a) { return map([&](int i) { return std::nearbyint(a.v[i]); }); }
  // n holds small integers (|n| < 128): the scaling is exact.
  static R ldexp(const R& a, const R& n) {
    return map([&](int i) { return std::ldexp(a.v[i], int(n.v[i])); });
  }
  static R copysign(const R& mag, const R& sign) {
    return map([&](int i) { return std::copysign(mag.v[i], sign.v[i]); });
  }
  static Mask less(const R& a, const R& b) {
    Mask m;
    for (int i = 0; i < kLanes; ++i) m.v[i] = a.v[i] < b.v[i];
    return m;
  }
  static Mask is_nan(const R& a) {
    Mask m;
    for (int i = 0; i < kLanes; ++i) m.v[i] = std::isnan(a.v[i]);
    return m;
  }
  static R select(const Mask& m, const R& a, const R& b) { return map([&](int i) { return m.v[i] ? a.v[i] : b.v[i]; }); }
  static uint32_t bits(const Mask& m) {
    uint32_t b = 0;
    for (int i = 0; i < kLanes; ++i) b |= uint32_t(m.v[i]) << i;
    return b;
  }

  static P load_pairs(const uint16_t* p) {
    P r;
    std::memcpy(r.v, p, sizeof r.v);
    return r;
  }
  static P load_pairs_partial(const uint16_t* p, int n) {
    P r{};
    std::memcpy(r.v, p, sizeof(uint16_t) * n);
    return r;
  }
  // VDPBF16PS, one lane: denormal inputs read as signed zero, the exact
  // product added with one rounding, a result below the normal range
  // flushed to signed zero; the odd element first.
  static float bf16_daz(uint16_t h) {
    return (h & 0x7f80u) == 0 ? std::copysign(0.0f, bf16_to_f32(h)) : bf16_to_f32(h);
  }
  static float ftz(float f) { return std::fabs(f) < 0x1p-126f ? std::copysign(0.0f, f) : f; }
  static R dot_pairs(const R& acc, const P& a, const P& b) {
    return map([&](int i) {
      const float odd = ftz(std::fma(bf16_daz(a.v[2 * i + 1]), bf16_daz(b.v[2 * i + 1]), ftz(acc.v[i])));
      return ftz(std::fma(bf16_daz(a.v[2 * i]), bf16_daz(b.v[2 * i]), odd));
    });
  }

  static float reduce(const R& a) {
    float s8[8], s4[4];
    for (int j = 0; j < 8; ++j) s8[j] = a.v[j] + a.v[j + 8];
    for (int j = 0; j < 4; ++j) s4[j] = s8[j] + s8[j + 4];
    const float s2_0 = s4[0] + s4[2];
    const float s2_1 = s4[1] + s4[3];
    return s2_0 + s2_1;
  }
};

uint64_t stream_read(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t acc[8] = {};
  for (std::size_t i = 0; i < bytes; i += 64) {
    for (int j = 0; j < 8; ++j) {
      uint64_t v;
      std::memcpy(&v, p + i + 8 * j, 8);
      acc[j] ^= v;
    }
  }
  uint64_t out = 0;
  for (uint64_t v : acc) out ^= v;
  return out;
}

double fma_chains(int64_t iters, float* sink) {
  constexpr int kChains = 8;
  float acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = float(j);
  for (int64_t i = 0; i < iters; ++i)
    for (float& a : acc) a = a * 0.999999f + 0.5f;  // baseline x86-64 has no FMA: mul + add
  float s = 0;
  for (float a : acc) s += a;
  *sink = s;
  return double(iters) * kChains * 2;
}

}  // namespace

const Kernels& scalar_kernels() {
  static const Kernels k = make_kernels<VScalar>(Isa::Scalar, &stream_read, &fma_chains, attention_portable);
  return k;
}

}  // namespace rowlm::cpu
