#pragma once
// The AVX-512 (F/BW/VL/DQ) vector type of the kernel algorithms, shared by
// kernels_avx512.cc and kernels_avx512bf16.cc (which adds VDPBF16PS). One
// zmm register per 16-lane vector; K tails use masked loads, which read
// nothing past the end. Include only from files compiled for AVX-512.

// GCC 12 reports its own _mm512_undefined_* placeholders inside the
// intrinsic headers as uninitialized (GCC PR 105593, fixed in GCC 13).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include "backend/cpu/kernel_algorithms.h"

namespace rowlm::cpu {
namespace {

struct VAvx512 {
  struct R {
    __m512 v;
  };
  struct Mask {
    __mmask16 m;
  };
  // Tiles of 6 rows of x x 4 weight rows (fewer rows: 4 x 6, 3 x 8, 2 x 12,
  // 1 x 12): 24 accumulators + the x vectors + 1 weight vector of the 32 zmm.
  // Six rows rather than four: each widened weight vector feeds six FMAs
  // (prefill on the 16-core Xeon host 2% faster, and 6% against 4 x 6 with
  // K in blocks).
  struct P {
    __m512i v;  // 32 bf16, pairs (2j, 2j+1) in lane j
  };
  static constexpr int kMR = 6;
  static constexpr int kAccumulators = 24;

  static __mmask16 first(int n) { return __mmask16((1u << n) - 1u); }
  // bf16 j into the high half of lane j, zeros below: one VPERMW with
  // zero-masking (the shuffle port only), where zero-extend and shift take
  // two ops, one of them on a port the FMAs use on Intel cores.
  static __m512 widen_bf16(__m256i h) {
    const __m512i to_high = _mm512_set_epi16(15, 0, 14, 0, 13, 0, 12, 0, 11, 0, 10, 0, 9, 0, 8, 0, 7, 0, 6, 0, 5,
                                             0, 4, 0, 3, 0, 2, 0, 1, 0, 0, 0);
    return _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(__mmask32(0xAAAAAAAAu), to_high,
                                                               _mm512_castsi256_si512(h)));
  }

  static R zero() { return {_mm512_setzero_ps()}; }
  static R set1(float f) { return {_mm512_set1_ps(f)}; }
  static R load(const float* p) { return {_mm512_loadu_ps(p)}; }
  static R load_partial(const float* p, int n) { return {_mm512_maskz_loadu_ps(first(n), p)}; }
  static R load_bf16(const uint16_t* p) {
    return {widen_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
  }
  static R load_bf16_partial(const uint16_t* p, int n) { return {widen_bf16(_mm256_maskz_loadu_epi16(first(n), p))}; }
  static R load_f16(const uint16_t* p) {
    return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
  }
  static R load_f16_partial(const uint16_t* p, int n) { return {_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(first(n), p))}; }
  static R codes8(const uint32_t* p) {
    return {_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))))};
  }
  // Codes of 1-7 bits: the 2·bits bytes (a masked load, so nothing past
  // them is read) in every 128-bit lane, each lane's two bytes picked by
  // VPSHUFB (code_lanes), shifted by its own count and masked. (A plain
  // broadcasting load where 16 bytes are readable measured slower.)
  struct Unpack {
    __m512i shuffle, shift, mask;
    __mmask16 bytes;
    int bits;
  };
  static Unpack unpack(int bits) {
    const CodeLanes c = code_lanes(bits);
    return {_mm512_loadu_si512(c.shuffle), _mm512_loadu_si512(c.shift), _mm512_set1_epi32((1 << bits) - 1),
            __mmask16((1u << (2 * bits)) - 1u), bits};
  }
  static R codes(const Unpack& u, const uint8_t* p, int64_t) {
    const __m512i v = _mm512_broadcast_i32x4(_mm_maskz_loadu_epi8(u.bytes, p));
    return {_mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srlv_epi32(_mm512_shuffle_epi8(v, u.shuffle), u.shift), u.mask))};
  }
  // 4-bit dequantization by lookup: the table holds scale·c + bias for the
  // 16 codes c (the same two roundings as the arithmetic), and each code
  // picks its lane with VPERMPS, which reads an index's low 4 bits only, so
  // the nibbles need no masking.
  struct Table4 {
    __m512 v;
  };
  static Table4 table4(R s, R b) {
    const __m512 codes = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    return {_mm512_add_ps(_mm512_mul_ps(codes, s.v), b.v)};
  }
  static R dequant4(const Table4& t, const uint32_t* p) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    // Byte 2i: byte i (code 2i in its low nibble); byte 2i + 1: byte i >> 4 (code 2i + 1).
    const __m128i c = _mm_unpacklo_epi8(b, _mm_srli_epi16(b, 4));
    return {_mm512_permutexvar_ps(_mm512_cvtepu8_epi32(c), t.v)};
  }
  // A Halves32 block widened: lane i holds byte i (code i | code i + 16 << 4).
  struct Block4 {
    __m512i v;
  };
  static Block4 block4(const uint32_t* p) {
    return {_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))};
  }
  static R dequant4_lo(const Table4& t, const Block4& c) { return {_mm512_permutexvar_ps(c.v, t.v)}; }
  static R dequant4_hi(const Table4& t, const Block4& c) {
    return {_mm512_permutexvar_ps(_mm512_srli_epi32(c.v, 4), t.v)};
  }
  static void store(float* p, R a) { _mm512_storeu_ps(p, a.v); }
  static void store_partial(float* p, R a, int n) { _mm512_mask_storeu_ps(p, first(n), a.v); }

  static R add(R a, R b) { return {_mm512_add_ps(a.v, b.v)}; }
  static R sub(R a, R b) { return {_mm512_sub_ps(a.v, b.v)}; }
  static R mul(R a, R b) { return {_mm512_mul_ps(a.v, b.v)}; }
  static R div(R a, R b) { return {_mm512_div_ps(a.v, b.v)}; }
  static R fma(R a, R b, R c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
  static R abs(R a) { return {_mm512_abs_ps(a.v)}; }
  static R min(R a, R b) { return {_mm512_min_ps(a.v, b.v)}; }
  static R round_even(R a) { return {_mm512_roundscale_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)}; }
  static R ldexp(R a, R n) { return {_mm512_scalef_ps(a.v, n.v)}; }
  static R copysign(R mag, R sign) {
    const __m512 s = _mm512_set1_ps(-0.0f);
    return {_mm512_or_ps(_mm512_andnot_ps(s, mag.v), _mm512_and_ps(s, sign.v))};
  }
  static Mask less(R a, R b) { return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_LT_OQ)}; }
  static Mask is_nan(R a) { return {_mm512_cmp_ps_mask(a.v, a.v, _CMP_UNORD_Q)}; }
  static R select(Mask m, R a, R b) { return {_mm512_mask_blend_ps(m.m, b.v, a.v)}; }
  static uint32_t bits(Mask m) { return uint32_t(m.m); }

  static P load_pairs(const uint16_t* p) { return {_mm512_loadu_si512(p)}; }
  static P load_pairs_partial(const uint16_t* p, int n) {
    return {_mm512_maskz_loadu_epi16(__mmask32((uint64_t(1) << n) - 1u), p)};
  }
  // VDPBF16PS emulated (kernel_algorithms.h, PairStep), for AVX-512
  // CPUs without AVX512-BF16; VAvx512Bf16 (kernels_avx512bf16.cc) runs the
  // instruction itself.
  static __m512 to_signed_zero(__m512 f, __mmask16 m) {
    return _mm512_mask_and_ps(f, m, f, _mm512_set1_ps(-0.0f));
  }
  static __m512 daz(__m512 f) {
    const __m512i exponent = _mm512_and_si512(_mm512_castps_si512(f), _mm512_set1_epi32(0x7f800000));
    return to_signed_zero(f, _mm512_cmpeq_epi32_mask(exponent, _mm512_setzero_si512()));
  }
  static __m512 ftz(__m512 f) {
    return to_signed_zero(f, _mm512_cmp_ps_mask(_mm512_abs_ps(f), _mm512_set1_ps(0x1p-126f), _CMP_LT_OQ));
  }
  static R dot_pairs(R acc, P a, P b) {
    const __m512i high = _mm512_set1_epi32(int(0xffff0000u));
    const __m512 a_odd = daz(_mm512_castsi512_ps(_mm512_and_si512(a.v, high)));
    const __m512 b_odd = daz(_mm512_castsi512_ps(_mm512_and_si512(b.v, high)));
    const __m512 a_even = daz(_mm512_castsi512_ps(_mm512_slli_epi32(a.v, 16)));
    const __m512 b_even = daz(_mm512_castsi512_ps(_mm512_slli_epi32(b.v, 16)));
    const __m512 t = ftz(_mm512_fmadd_ps(a_odd, b_odd, ftz(acc.v)));
    return {ftz(_mm512_fmadd_ps(a_even, b_even, t))};
  }

  static float reduce(R a) {
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(a.v), _mm512_extractf32x8_ps(a.v, 1));
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    const __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
  }
};

}  // namespace
}  // namespace rowlm::cpu
