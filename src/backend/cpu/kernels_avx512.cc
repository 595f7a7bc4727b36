// AVX-512 (F/BW/VL/DQ) kernels: one zmm register per 16-lane vector; K tails
// use masked loads, which read nothing past the end.

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
  // Tiles of 4 rows of x x 6 weight rows (or 2 x 12, 1 x 12): 24
  // accumulators + the x vectors + 1 weight vector of the 32 zmm.
  static constexpr int kMR = 4;
  static constexpr int kAccumulators = 24;

  static __mmask16 first(int n) { return __mmask16((1u << n) - 1u); }
  static __m512 widen_bf16(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
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

  static float reduce(R a) {
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(a.v), _mm512_extractf32x8_ps(a.v, 1));
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    const __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
  }
};

uint64_t stream_read(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  std::size_t i = 0;
  for (; i + 256 <= bytes; i += 256) {
    a0 = _mm512_xor_si512(a0, _mm512_load_si512(p + i));
    a1 = _mm512_xor_si512(a1, _mm512_load_si512(p + i + 64));
    a2 = _mm512_xor_si512(a2, _mm512_load_si512(p + i + 128));
    a3 = _mm512_xor_si512(a3, _mm512_load_si512(p + i + 192));
  }
  for (; i < bytes; i += 64) a0 = _mm512_xor_si512(a0, _mm512_load_si512(p + i));
  const __m512i a = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, a);
  uint64_t out = 0;
  for (uint64_t v : lanes) out ^= v;
  return out;
}

double fma_chains(int64_t iters, float* sink) {
  // 16 independent chains: more than FMA latency x throughput on current cores.
  __m512 acc[16];
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_set1_ps(float(j));
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(0.5f);
  for (int64_t i = 0; i < iters; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) acc[j] = _mm512_fmadd_ps(acc[j], m, c);
  __m512 s = acc[0];
  for (int j = 1; j < 16; ++j) s = _mm512_add_ps(s, acc[j]);
  *sink = _mm512_reduce_add_ps(s);
  return double(iters) * 16 * 16 * 2;
}

}  // namespace

const Kernels& avx512_kernels() {
  static const Kernels k = make_kernels<VAvx512>(Isa::Avx512, &stream_read, &fma_chains);
  return k;
}

}  // namespace rowlm::cpu
