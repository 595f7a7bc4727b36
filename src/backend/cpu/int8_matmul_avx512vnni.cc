// The 8-bit-activation matmul on AVX512-VNNI (int8_matmul.h states the
// order; int8_matmul.cc is its portable statement, which these kernels
// match bit for bit). Compiled with the AVX-512 flags and -mavx512vnni
// (cmake: files named *_avx512vnni.cc); like the other ISA files it calls no
// std:: template that could be emitted out of line.
//
// How: weight rows go four at a time, one per 32-bit lane of each 128-bit
// lane. A step is 64 bytes of each row's codes (4 units: 128 4-bit codes,
// or 64 8-bit ones); VPDPBUSD multiplies them with x's codes into 16
// int32 partial sums per row, four per unit, which a transpose-add folds
// into one vector holding (unit L, row n) in lane 4L + n. The epilogue then
// runs on 16 lanes at once: 4 units of 4 rows.

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cfloat>
#include <cstdint>

#include "backend/cpu/int8_matmul.h"

namespace rowlm::cpu {
namespace {

constexpr int kTileRows = 4;
constexpr float kTinyAmax = 0x1p-96f;  // int8_matmul.cc's
constexpr int kStepCodeBytes = 64;

// ------------------------------------------------------------ quantize --

inline void put_unit_fields(uint8_t* step, int unit, int L, float dx, int32_t xs) {
  float* fields = reinterpret_cast<float*>(step + 4 * unit);
  const float xsd = float(xs) * dx;
  for (int j = 0; j < 4; ++j) {
    fields[4 * L + j] = dx;
    fields[16 + 4 * L + j] = xsd;
  }
}

void quantize(const float* x, int64_t K, int unit, uint8_t* out) {
  const int64_t step_bytes = 4 * unit + kInt8StepFloatBytes, row_bytes = int8_x_row_bytes(K, unit);
  for (int64_t i = 0; i < row_bytes; i += 64) _mm512_storeu_si512(out + i, _mm512_setzero_si512());
  const __m512 max_finite = _mm512_set1_ps(FLT_MAX);
  for (int64_t b0 = 0; b0 < K; b0 += 32) {
    const bool whole = K - b0 >= 32;  // else the row's last 16
    const __m512 a = _mm512_loadu_ps(x + b0);
    const __m512 b = whole ? _mm512_loadu_ps(x + b0 + 16) : _mm512_setzero_ps();
    const __m512 abs_a = _mm512_abs_ps(a), abs_b = _mm512_abs_ps(b);
    // NaN compares false: a block is finite iff every |x| <= FLT_MAX.
    const bool finite = (_mm512_cmp_ps_mask(abs_a, max_finite, _CMP_LE_OQ) &
                         _mm512_cmp_ps_mask(abs_b, max_finite, _CMP_LE_OQ)) == 0xffff;
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(abs_a, abs_b));
    __m512i qa = _mm512_setzero_si512(), qb = qa;
    float dx = 0.0f;
    if (!finite) {
      dx = __builtin_nanf("");
    } else if (amax >= kTinyAmax) {
      dx = amax / 127.0f;
      const __m512 id = _mm512_set1_ps(127.0f / amax);
      // To nearest even, as MXCSR rounds by default (nearbyint's mode).
      qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, id));
      qb = _mm512_cvtps_epi32(_mm512_mul_ps(b, id));
    }
    if (unit == 32) {
      const int64_t u = b0 / 32;
      uint8_t* step = out + u / 4 * step_bytes;
      const int L = int(u % 4);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(step + 16 * L), _mm512_cvtepi32_epi8(qa));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(step + 64 + 16 * L), _mm512_cvtepi32_epi8(qb));
      put_unit_fields(step, unit, L, dx, _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb)));
    } else {
      for (int half = 0; half < (whole ? 2 : 1); ++half) {
        const int64_t u = b0 / 16 + half;
        const __m512i q = half ? qb : qa;
        uint8_t* step = out + u / 4 * step_bytes;
        const int L = int(u % 4);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(step + 16 * L), _mm512_cvtepi32_epi8(q));
        put_unit_fields(step, unit, L, dx, _mm512_reduce_add_epi32(q));
      }
    }
  }
}

// ---------------------------------------------------------- parameters --

// The scales (or biases) of units u0 .. u0 + 15 of one row, unit i in lane
// i: `first` is the row's first parameter, `per_group` units share one
// (int8_supported: it divides 16 or 16 divides it), `idx` lane i = i /
// per_group. Lanes of units at or past `units` are 0.
inline __m512 unit_params(const void* p, DType t, int64_t first, int64_t u0, int64_t units, int per_group,
                          __m512i idx) {
  const int64_t valid = units - u0 < 16 ? units - u0 : 16;
  const int64_t count = (valid + per_group - 1) / per_group;
  const __mmask16 load = __mmask16((1u << count) - 1u), lanes = __mmask16((1u << valid) - 1u);
  const int64_t g = first + u0 / per_group;
  __m512 v;
  if (t == DType::F32) {
    v = _mm512_maskz_loadu_ps(load, static_cast<const float*>(p) + g);
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(load, static_cast<const uint16_t*>(p) + g);
    v = t == DType::F16 ? _mm512_cvtph_ps(h)
                        : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  return _mm512_maskz_permutexvar_ps(lanes, idx, v);
}

// Rows 0-3's values of 16 units (v[n], unit i in lane i) as four steps of
// the scratch's layout: step s lane 4L + n = v[n][4s + L]. An in-lane 4 x 4
// transpose, then one of the 128-bit lanes.
inline void transpose_params(const __m512 v[kTileRows], __m512 out[4]) {
  const __m512 t0 = _mm512_unpacklo_ps(v[0], v[1]), t1 = _mm512_unpackhi_ps(v[0], v[1]);
  const __m512 t2 = _mm512_unpacklo_ps(v[2], v[3]), t3 = _mm512_unpackhi_ps(v[2], v[3]);
  const auto lo = [](__m512 a, __m512 b) {
    return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
  };
  const auto hi = [](__m512 a, __m512 b) {
    return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
  };
  // c[L], 128-bit lane s: element 4s + L of rows 0-3.
  const __m512 c0 = lo(t0, t2), c1 = hi(t0, t2), c2 = lo(t1, t3), c3 = hi(t1, t3);
  const __m512 e0 = _mm512_shuffle_f32x4(c0, c1, 0x44), e1 = _mm512_shuffle_f32x4(c0, c1, 0xee);
  const __m512 e2 = _mm512_shuffle_f32x4(c2, c3, 0x44), e3 = _mm512_shuffle_f32x4(c2, c3, 0xee);
  out[0] = _mm512_shuffle_f32x4(e0, e2, 0x88);
  out[1] = _mm512_shuffle_f32x4(e0, e2, 0xdd);
  out[2] = _mm512_shuffle_f32x4(e1, e3, 0x88);
  out[3] = _mm512_shuffle_f32x4(e1, e3, 0xdd);
}

// A tile's parameters: each row's first parameter, what their units
// share, and the tile's place in w.
struct TileParams {
  const AffineRows* w;
  int64_t first[kTileRows];
  int64_t units;
  int per_group;
  __m512i idx;  // lane i: i / per_group
  int64_t ahead;  // parameters to the next tile's rows, for the prefetch

  // The scales and biases of the 4 steps from unit u0 (a multiple of 16):
  // out + 32·j holds step j's S (16 floats, lane 4L + n), then its B.
  void widen(int64_t u0, float* out) const {
    __m512 s[kTileRows], b[kTileRows], s_out[4], b_out[4];
    const int64_t bytes = int64_t(dtype_size(w->param_dtype));
    for (int n = 0; n < kTileRows; ++n) {
      const int64_t g = first[n] + u0 / per_group;
      __builtin_prefetch(static_cast<const char*>(w->scales) + (g + ahead) * bytes, 0, 2);
      s[n] = unit_params(w->scales, w->param_dtype, first[n], u0, units, per_group, idx);
      if (w->biases) {
        __builtin_prefetch(static_cast<const char*>(w->biases) + (g + ahead) * bytes, 0, 2);
        b[n] = unit_params(w->biases, w->param_dtype, first[n], u0, units, per_group, idx);
      } else {
        b[n] = _mm512_mul_ps(s[n], _mm512_set1_ps(w->bias_per_scale));
      }
    }
    transpose_params(s, s_out);
    transpose_params(b, b_out);
    for (int j = 0; j < 4; ++j) {
      _mm512_storeu_ps(out + 32 * j, s_out[j]);
      _mm512_storeu_ps(out + 32 * j + 16, b_out[j]);
    }
  }
};

// -------------------------------------------------------------- matmul --

// a[n]: row n's partial sums, four per unit (128-bit lane L = unit L).
// Returns lane 4L + n = the sum of a[n]'s lane L (exact).
inline __m512i transpose_sum(const __m512i a[kTileRows]) {
  const __m512i s01 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[0], a[1]), _mm512_unpackhi_epi32(a[0], a[1]));
  const __m512i s23 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[2], a[3]), _mm512_unpackhi_epi32(a[2], a[3]));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
}

// y[m·ldy + n] for MR rows of x and the tile's `count` rows (rows[n]: the
// codes of row n, of row_bytes bytes).
// Params: with Inline (one pass over K: decode), each 4 steps' parameters
// are widened into `params` (128 floats) as the steps reach them, so the
// parameter stream runs beside the codes'; otherwise `params` holds every
// step's, widened once for all the passes.
template <int Unit, int MR, bool Inline>
[[gnu::noinline]] void tile(const uint8_t* xq, int64_t ldxq, const uint8_t* const rows[kTileRows], int64_t row_bytes,
                            int64_t ahead, const TileParams& tp, float* params, int count, float* y, int64_t ldy) {
  constexpr int64_t kStepBytes = 4 * Unit + kInt8StepFloatBytes;
  const int64_t full_steps = row_bytes / kStepCodeBytes, steps = (row_bytes + kStepCodeBytes - 1) / kStepCodeBytes;
  const __mmask64 tail = (__mmask64(1) << (row_bytes % kStepCodeBytes)) - 1;
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  __m512 acc[MR];
  for (int m = 0; m < MR; ++m) acc[m] = _mm512_setzero_ps();
  for (int64_t s = 0; s < steps; ++s) {
    __m512i lo[kTileRows], hi[kTileRows];
    for (int n = 0; n < kTileRows; ++n) {
      const uint8_t* p = rows[n] + s * kStepCodeBytes;
      // The next tile's rows into L2, as the f32 kernels do.
      __builtin_prefetch(p + ahead, 0, 2);
      const __m512i c = s < full_steps ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8(tail, p);
      if constexpr (Unit == 32) {
        lo[n] = _mm512_and_si512(c, low4);
        hi[n] = _mm512_and_si512(_mm512_srli_epi16(c, 4), low4);
      } else {
        lo[n] = c;
      }
    }
    if (Inline && s % 4 == 0) tp.widen(4 * s, params);
    const float* P = params + 32 * (Inline ? s % 4 : s);
    const __m512 S = _mm512_loadu_ps(P), B = _mm512_loadu_ps(P + 16);
    for (int m = 0; m < MR; ++m) {
      const uint8_t* xs = xq + m * ldxq + s * kStepBytes;
      const __m512i x_lo = _mm512_loadu_si512(xs);
      __m512i a[kTileRows];
      for (int n = 0; n < kTileRows; ++n) a[n] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[n], x_lo);
      if constexpr (Unit == 32) {
        const __m512i x_hi = _mm512_loadu_si512(xs + 64);
        for (int n = 0; n < kTileRows; ++n) a[n] = _mm512_dpbusd_epi32(a[n], hi[n], x_hi);
      }
      const __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(transpose_sum(a)), _mm512_loadu_ps(xs + 4 * Unit));
      const __m512 b = _mm512_mul_ps(B, _mm512_loadu_ps(xs + 4 * Unit + 64));
      acc[m] = _mm512_add_ps(acc[m], _mm512_fmadd_ps(S, t, b));
    }
  }
  const __mmask8 stored = __mmask8((1u << count) - 1u);
  for (int m = 0; m < MR; ++m) {
    const __m128 l01 = _mm_add_ps(_mm512_castps512_ps128(acc[m]), _mm512_extractf32x4_ps(acc[m], 1));
    const __m128 l23 = _mm_add_ps(_mm512_extractf32x4_ps(acc[m], 2), _mm512_extractf32x4_ps(acc[m], 3));
    _mm_mask_storeu_ps(y + m * ldy, stored, _mm_add_ps(l01, l23));
  }
}

template <int Unit, bool Inline>
void tile_rows(const uint8_t* xq, int64_t ldxq, int64_t M, const uint8_t* const rows[kTileRows], int64_t row_bytes,
               int64_t ahead, const TileParams& tp, float* params, int count, float* y, int64_t ldy) {
  for (int64_t m0 = 0; m0 < M; m0 += 4) {
    const uint8_t* x = xq + m0 * ldxq;
    float* out = y + m0 * ldy;
    switch (M - m0 < 4 ? M - m0 : 4) {
      case 1: tile<Unit, 1, Inline>(x, ldxq, rows, row_bytes, ahead, tp, params, count, out, ldy); break;
      case 2: tile<Unit, 2, Inline>(x, ldxq, rows, row_bytes, ahead, tp, params, count, out, ldy); break;
      case 3: tile<Unit, 3, Inline>(x, ldxq, rows, row_bytes, ahead, tp, params, count, out, ldy); break;
      default: tile<Unit, 4, Inline>(x, ldxq, rows, row_bytes, ahead, tp, params, count, out, ldy); break;
    }
  }
}

template <int Unit>
void tiles(const uint8_t* xq, int64_t ldxq, int64_t M, const uint8_t* const rows[kTileRows], int64_t row_bytes,
           int64_t ahead, const TileParams& tp, float* scratch, int count, float* y, int64_t ldy) {
  if (M <= 4) return tile_rows<Unit, true>(xq, ldxq, M, rows, row_bytes, ahead, tp, scratch, count, y, ldy);
  for (int64_t u0 = 0; u0 < tp.units; u0 += 16) tp.widen(u0, scratch + u0 / 4 * 32);
  tile_rows<Unit, false>(xq, ldxq, M, rows, row_bytes, ahead, tp, scratch, count, y, ldy);
}

void dot_rows(const uint8_t* xq, int64_t ldxq, int64_t M, const AffineRows& w, int64_t N, int64_t K, float* y,
              int64_t ldy, float* scratch) {
  const int unit = int8_unit(w.bits);
  const int64_t row_bytes = K * w.bits / 8, code_ld_bytes = w.code_ld * 4;
  TileParams tp;
  tp.w = &w;
  tp.units = K / unit;
  tp.per_group = w.group_size / unit;
  alignas(64) int32_t lanes[16];
  for (int i = 0; i < 16; ++i) lanes[i] = i / tp.per_group;
  tp.idx = _mm512_load_si512(lanes);
  tp.ahead = 4 * kTileRows * w.param_ld;
  for (int64_t n0 = 0; n0 < N; n0 += kTileRows) {
    const int count = N - n0 < kTileRows ? int(N - n0) : kTileRows;
    // Rows past N repeat row n0 (computed, not stored).
    const uint8_t* rows[kTileRows];
    for (int n = 0; n < kTileRows; ++n) {
      const int64_t r = n0 + (n < count ? n : 0);
      rows[n] = reinterpret_cast<const uint8_t*>(w.codes + r * w.code_ld);
      tp.first[n] = r * w.param_ld;
    }
    if (unit == 32)
      tiles<32>(xq, ldxq, M, rows, row_bytes, 4 * kTileRows * code_ld_bytes, tp, scratch, count, y + n0, ldy);
    else
      tiles<16>(xq, ldxq, M, rows, row_bytes, 4 * kTileRows * code_ld_bytes, tp, scratch, count, y + n0, ldy);
  }
}

// The ceiling probe: 16 independent VPDPBUSD chains.
double int8_dot_chains(int64_t iters, float* sink) {
  __m512i acc[16];
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_set1_epi32(j);
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-5);
  for (int64_t i = 0; i < iters; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) acc[j] = _mm512_dpbusd_epi32(acc[j], a, b);
  __m512i s = acc[0];
  for (int j = 1; j < 16; ++j) s = _mm512_add_epi32(s, acc[j]);
  *sink = float(_mm512_reduce_add_epi32(s));
  return double(iters) * 16 * 64 * 2;
}

}  // namespace

void set_int8_vnni(Kernels& k) {
  k.quantize_int8 = &quantize;
  k.dot_rows_int8 = &dot_rows;
  k.int8_dot_chains = &int8_dot_chains;
  k.native_int8 = true;
}

}  // namespace rowlm::cpu
