// AVX2 + FMA + F16C kernels: each 16-lane vector is two 8-lane halves,
// lanes 0-7 and 8-15, so the canonical tree starts by adding the halves.

#include <immintrin.h>

#include <cstring>

#include "backend/cpu/kernel_algorithms.h"

namespace rowlm::cpu {
namespace {

struct VAvx2 {
  struct R {
    __m256 lo, hi;
  };
  using Mask = R;
  struct P {
    __m256i lo, hi;  // elements 0-15 (lanes 0-7) and 16-31 (lanes 8-15)
  };
  // Tiles of 2 x 2 (or 1 x 4): 8 accumulator ymm + x + 2 for w fit the 16 ymm.
  static constexpr int kMR = 2;
  static constexpr int kAccumulators = 4;

  static R zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static R set1(float f) { return {_mm256_set1_ps(f), _mm256_set1_ps(f)}; }
  static R load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static R load_partial(const float* p, int n) {
    alignas(32) float buf[kLanes] = {};
    std::memcpy(buf, p, sizeof(float) * n);
    return load(buf);
  }
  static __m256 widen_bf16(__m128i h) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static R load_bf16(const uint16_t* p) {
    return {widen_bf16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
            widen_bf16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
  }
  static R load_bf16_partial(const uint16_t* p, int n) {
    alignas(32) uint16_t buf[kLanes] = {};
    std::memcpy(buf, p, sizeof(uint16_t) * n);
    return load_bf16(buf);
  }
  static R load_f16(const uint16_t* p) {
    return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
  }
  static R load_f16_partial(const uint16_t* p, int n) {
    alignas(32) uint16_t buf[kLanes] = {};
    std::memcpy(buf, p, sizeof(uint16_t) * n);
    return load_f16(buf);
  }
  static R widen_codes(__m128i c) {  // 16 bytes of codes
    return {_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(c)), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(c, 8)))};
  }
  static R codes4(const uint32_t* p) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    const __m128i m = _mm_set1_epi8(0x0f);
    // Code 2i is byte i's low nibble, code 2i + 1 its high one.
    return widen_codes(_mm_unpacklo_epi8(_mm_and_si128(b, m), _mm_and_si128(_mm_srli_epi16(b, 4), m)));
  }
  static R codes8(const uint32_t* p) { return widen_codes(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  // Codes of 1-7 bits: the 2·bits bytes in both 128-bit halves, each lane's
  // two bytes picked by VPSHUFB (code_lanes), shifted by its own count and
  // masked. Where fewer than 16 bytes of the row are left, the bytes go
  // through a zeroed copy (AVX2 has no masked byte load).
  struct Unpack {
    __m256i shuffle_lo, shuffle_hi, shift_lo, shift_hi, mask;
    int bits;
  };
  static Unpack unpack(int bits) {
    const CodeLanes c = code_lanes(bits);
    const auto at = [](const int32_t* v) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v)); };
    return {at(c.shuffle), at(c.shuffle + 8), at(c.shift), at(c.shift + 8), _mm256_set1_epi32((1 << bits) - 1), bits};
  }
  static R codes(const Unpack& u, const uint8_t* p, int64_t readable) {
    __m128i b;
    if (readable >= 16) {
      b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    } else {
      alignas(16) uint8_t buf[16] = {};
      for (int i = 0; i < 2 * u.bits; ++i) buf[i] = p[i];
      b = _mm_load_si128(reinterpret_cast<const __m128i*>(buf));
    }
    const __m256i v = _mm256_broadcastsi128_si256(b);
    const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(_mm256_shuffle_epi8(v, u.shuffle_lo), u.shift_lo), u.mask);
    const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_shuffle_epi8(v, u.shuffle_hi), u.shift_hi), u.mask);
    return {_mm256_cvtepi32_ps(lo), _mm256_cvtepi32_ps(hi)};
  }
  // 4-bit dequantization by arithmetic (AVX-512 uses a lookup table).
  struct Table4 {
    R s, b;
  };
  static Table4 table4(const R& s, const R& b) { return {s, b}; }
  static R dequant4(const Table4& t, const uint32_t* p) { return add(mul(codes4(p), t.s), t.b); }
  // A Halves32 block: byte i holds code i | code i + 16 << 4.
  struct Block4 {
    __m128i v;
  };
  static Block4 block4(const uint32_t* p) { return {_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))}; }
  static R dequant4_lo(const Table4& t, const Block4& c) {
    return add(mul(widen_codes(_mm_and_si128(c.v, _mm_set1_epi8(0x0f))), t.s), t.b);
  }
  static R dequant4_hi(const Table4& t, const Block4& c) {
    return add(mul(widen_codes(_mm_and_si128(_mm_srli_epi16(c.v, 4), _mm_set1_epi8(0x0f))), t.s), t.b);
  }
  static void store(float* p, const R& a) {
    _mm256_storeu_ps(p, a.lo);
    _mm256_storeu_ps(p + 8, a.hi);
  }
  static void store_partial(float* p, const R& a, int n) {
    alignas(32) float buf[kLanes];
    store(buf, a);
    std::memcpy(p, buf, sizeof(float) * n);
  }

  static R add(const R& a, const R& b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
  static R sub(const R& a, const R& b) { return {_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)}; }
  static R mul(const R& a, const R& b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
  static R div(const R& a, const R& b) { return {_mm256_div_ps(a.lo, b.lo), _mm256_div_ps(a.hi, b.hi)}; }
  static R fma(const R& a, const R& b, const R& c) {
    return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
  }
  static __m256 abs1(__m256 a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
  static R abs(const R& a) { return {abs1(a.lo), abs1(a.hi)}; }
  static R min(const R& a, const R& b) { return {_mm256_min_ps(a.lo, b.lo), _mm256_min_ps(a.hi, b.hi)}; }
  static R round_even(const R& a) {
    constexpr int kMode = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    return {_mm256_round_ps(a.lo, kMode), _mm256_round_ps(a.hi, kMode)};
  }
  static __m256 pow2(__m256 n) {  // 2^n for integral n in the normal range, built exactly
    const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
  }
  static R ldexp(const R& a, const R& n) { return {_mm256_mul_ps(a.lo, pow2(n.lo)), _mm256_mul_ps(a.hi, pow2(n.hi))}; }
  static __m256 copysign1(__m256 mag, __m256 sign) {
    const __m256 s = _mm256_set1_ps(-0.0f);
    return _mm256_or_ps(_mm256_andnot_ps(s, mag), _mm256_and_ps(s, sign));
  }
  static R copysign(const R& mag, const R& sign) { return {copysign1(mag.lo, sign.lo), copysign1(mag.hi, sign.hi)}; }
  static Mask less(const R& a, const R& b) {
    return {_mm256_cmp_ps(a.lo, b.lo, _CMP_LT_OQ), _mm256_cmp_ps(a.hi, b.hi, _CMP_LT_OQ)};
  }
  static Mask is_nan(const R& a) {
    return {_mm256_cmp_ps(a.lo, a.lo, _CMP_UNORD_Q), _mm256_cmp_ps(a.hi, a.hi, _CMP_UNORD_Q)};
  }
  static R select(const Mask& m, const R& a, const R& b) {
    return {_mm256_blendv_ps(b.lo, a.lo, m.lo), _mm256_blendv_ps(b.hi, a.hi, m.hi)};
  }
  static uint32_t bits(const Mask& m) {
    return uint32_t(_mm256_movemask_ps(m.lo)) | uint32_t(_mm256_movemask_ps(m.hi)) << 8;
  }

  static P load_pairs(const uint16_t* p) {
    return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)),
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16))};
  }
  static P load_pairs_partial(const uint16_t* p, int n) {
    alignas(32) uint16_t buf[2 * kLanes] = {};
    std::memcpy(buf, p, sizeof(uint16_t) * n);
    return load_pairs(buf);
  }
  // VDPBF16PS emulated (kernel_algorithms.h, PairStep): denormal
  // inputs as signed zero, one rounding per product, results below the
  // normal range flushed to signed zero, the odd element first.
  static __m256 daz(__m256 f) {
    const __m256 exponent = _mm256_and_ps(f, _mm256_castsi256_ps(_mm256_set1_epi32(0x7f800000)));
    const __m256 is_denormal = _mm256_cmp_ps(exponent, _mm256_setzero_ps(), _CMP_EQ_OQ);
    return _mm256_blendv_ps(f, _mm256_and_ps(f, _mm256_set1_ps(-0.0f)), is_denormal);
  }
  static __m256 ftz(__m256 f) {
    const __m256 tiny = _mm256_cmp_ps(abs1(f), _mm256_set1_ps(0x1p-126f), _CMP_LT_OQ);
    return _mm256_blendv_ps(f, _mm256_and_ps(f, _mm256_set1_ps(-0.0f)), tiny);
  }
  static __m256 odd(__m256i v) {
    return daz(_mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(int(0xffff0000u)))));
  }
  static __m256 even(__m256i v) { return daz(_mm256_castsi256_ps(_mm256_slli_epi32(v, 16))); }
  static __m256 dot_pairs1(__m256 acc, __m256i a, __m256i b) {
    acc = ftz(_mm256_fmadd_ps(odd(a), odd(b), ftz(acc)));
    return ftz(_mm256_fmadd_ps(even(a), even(b), acc));
  }
  static R dot_pairs(const R& acc, const P& a, const P& b) {
    return {dot_pairs1(acc.lo, a.lo, b.lo), dot_pairs1(acc.hi, a.hi, b.hi)};
  }

  static float reduce(const R& a) {
    const __m256 s8 = _mm256_add_ps(a.lo, a.hi);  // lanes j + (j + 8)
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    const __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
  }
};

uint64_t stream_read(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  std::size_t i = 0;
  for (; i + 128 <= bytes; i += 128) {
    a0 = _mm256_xor_si256(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_xor_si256(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_xor_si256(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_xor_si256(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  for (; i < bytes; i += 32)
    a0 = _mm256_xor_si256(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
  const __m256i a = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), a);
  return lanes[0] ^ lanes[1] ^ lanes[2] ^ lanes[3];
}

double fma_chains(int64_t iters, float* sink) {
  // 12 independent chains cover FMA latency x throughput on current cores.
  __m256 acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm256_set1_ps(float(j));
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(0.5f);
  for (int64_t i = 0; i < iters; ++i)
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) acc[j] = _mm256_fmadd_ps(acc[j], m, c);
  __m256 s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm256_add_ps(s, acc[j]);
  *sink = _mm256_cvtss_f32(s);
  return double(iters) * 12 * 8 * 2;
}

}  // namespace

const Kernels& avx2_kernels() {
  static const Kernels k = make_kernels<VAvx2>(Isa::Avx2, &stream_read, &fma_chains, attention_avx2);
  return k;
}

}  // namespace rowlm::cpu
