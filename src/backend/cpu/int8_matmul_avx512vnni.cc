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
    } else if (amax >= kInt8TinyAmax) {
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
// Each 4 steps' parameters are widened into `params` (128 floats) as the
// steps reach them, so the parameter stream runs beside the codes' (widened
// for the whole row first, the codes' stream waited on theirs: on one Zen 4
// core a lone row's decode ran 20% faster this way).
template <int Unit, int MR>
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
    if (s % 4 == 0) tp.widen(4 * s, params);
    const float* P = params + 32 * (s % 4);
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

// Rows of x in groups of up to 4, each group one pass over the tile's codes.
template <int Unit>
void tile_rows(const uint8_t* xq, int64_t ldxq, int64_t M, const uint8_t* const rows[kTileRows], int64_t row_bytes,
               int64_t ahead, const TileParams& tp, float* params, int count, float* y, int64_t ldy) {
  for (int64_t m0 = 0; m0 < M; m0 += 4) {
    const uint8_t* x = xq + m0 * ldxq;
    float* out = y + m0 * ldy;
    switch (M - m0 < 4 ? M - m0 : 4) {
      case 1: tile<Unit, 1>(x, ldxq, rows, row_bytes, ahead, tp, params, count, out, ldy); break;
      case 2: tile<Unit, 2>(x, ldxq, rows, row_bytes, ahead, tp, params, count, out, ldy); break;
      case 3: tile<Unit, 3>(x, ldxq, rows, row_bytes, ahead, tp, params, count, out, ldy); break;
      default: tile<Unit, 4>(x, ldxq, rows, row_bytes, ahead, tp, params, count, out, ldy); break;
    }
  }
}

// ------------------------------------------- many rows of x (prefill) --
//
// Sixteen weight rows at a time, one per 32-bit lane: their codes unpacked
// once per call into bytes, four consecutive codes of a row per lane
// (packed[u][j] holds codes 4j .. 4j + 3 of unit u of rows 0-15), so that
// one VPDPBUSD against x's four codes broadcast adds a unit's products
// straight into each row's lane: no partial sums to fold, and the
// epilogue runs once per unit for 16 rows. The same integer sums and the
// same epilogue, each row's units added in the four lanes of the order
// (acc[u % 4]), so the bits are those of the decode tiles.

constexpr int kWideRows = 16;
// kInt8WideMinRows: from there unpacking w pays. It costs about as much as
// 30 rows' passes over the codes save on the wide tiles (per code: ~0.5
// operations to unpack, 0.026 a row of x there against 0.043 on the decode
// tiles).

// Rows r of w from row n0 (count of them; the rest repeat row n0) unpacked
// as above into `codes` (units · U · 16 bytes), and their parameters as
// 16-lane vectors per unit into `params` (S then B, 32 floats a unit, 0
// for rows past count).
void pack_wide(const AffineRows& w, int64_t n0, int count, int unit, int64_t units, uint8_t* codes, float* params) {
  const int64_t per_group = w.group_size / unit;
  for (int r = 0; r < kWideRows; ++r) {
    const int64_t n = n0 + (r < count ? r : 0);
    const auto* row = reinterpret_cast<const uint8_t*>(w.codes + n * w.code_ld);
    for (int64_t u = 0; u < units; ++u) {
      uint8_t* out = codes + u * unit * kWideRows + 4 * r;
      if (unit == 32) {  // Halves32: byte i holds code i (low nibble) and i + 16
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 16 * u));
        alignas(16) uint8_t c[32];
        _mm_store_si128(reinterpret_cast<__m128i*>(c), _mm_and_si128(b, _mm_set1_epi8(0x0f)));
        _mm_store_si128(reinterpret_cast<__m128i*>(c + 16), _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0x0f)));
        for (int j = 0; j < 8; ++j) __builtin_memcpy(out + j * 4 * kWideRows, c + 4 * j, 4);
      } else {
        for (int j = 0; j < 4; ++j) __builtin_memcpy(out + j * 4 * kWideRows, row + 16 * u + 4 * j, 4);
      }
    }
  }
  for (int64_t u = 0; u < units; ++u)
    for (int r = 0; r < kWideRows; ++r) {
      float s = 0, b = 0;
      if (r < count) {
        const int64_t g = (n0 + r) * w.param_ld + u / per_group;
        s = widened_param(w.scales, w.param_dtype, g);
        b = w.biases ? widened_param(w.biases, w.param_dtype, g) : s * w.bias_per_scale;
      }
      params[u * 32 + r] = s;
      params[u * 32 + 16 + r] = b;
    }
}

// x's codes 4j .. 4j + 3 of unit u (quantize's layout) as one 32-bit value.
template <int Unit>
inline const uint8_t* x_quad(const uint8_t* step, int L, int j) {
  if constexpr (Unit == 32) return step + (j < 4 ? 0 : 64) + 16 * L + 4 * (j % 4);
  return step + 16 * L + 4 * j;
}

// Unit 4s + L of MR rows of x into acc (lane L of the order: a template
// argument, so that the four lanes' accumulators stay in registers).
template <int Unit, int MR, int L>
inline void wide_unit(const uint8_t* xq, int64_t ldxq, int64_t s, const uint8_t* codes, const float* params,
                      __m512 (&acc)[MR]) {
  constexpr int64_t kStepBytes = 4 * Unit + kInt8StepFloatBytes;
  const int64_t u = 4 * s + L;
  __m512i isum[MR];
  for (int m = 0; m < MR; ++m) isum[m] = _mm512_setzero_si512();
  const uint8_t* c = codes + u * Unit * kWideRows;
#pragma GCC unroll 8
  for (int j = 0; j < Unit / 4; ++j) {
    const __m512i wq = _mm512_loadu_si512(c + j * 4 * kWideRows);
    for (int m = 0; m < MR; ++m) {
      int32_t quad;
      __builtin_memcpy(&quad, x_quad<Unit>(xq + m * ldxq + s * kStepBytes, L, j), 4);
      isum[m] = _mm512_dpbusd_epi32(isum[m], wq, _mm512_set1_epi32(quad));
    }
  }
  const __m512 S = _mm512_loadu_ps(params + u * 32), B = _mm512_loadu_ps(params + u * 32 + 16);
  for (int m = 0; m < MR; ++m) {
    const float* fields = reinterpret_cast<const float*>(xq + m * ldxq + s * kStepBytes + 4 * Unit);
    const __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(isum[m]), _mm512_set1_ps(fields[4 * L]));
    const __m512 b = _mm512_mul_ps(B, _mm512_set1_ps(fields[16 + 4 * L]));
    acc[m] = _mm512_add_ps(acc[m], _mm512_fmadd_ps(S, t, b));
  }
}

template <int Unit, int MR>
[[gnu::noinline]] void wide_tile(const uint8_t* xq, int64_t ldxq, int64_t units, const uint8_t* codes,
                                 const float* params, int count, float* y, int64_t ldy) {
  __m512 a0[MR], a1[MR], a2[MR], a3[MR];
  for (int m = 0; m < MR; ++m) a0[m] = a1[m] = a2[m] = a3[m] = _mm512_setzero_ps();
  const int64_t whole = units / 4;
  for (int64_t s = 0; s < whole; ++s) {
    wide_unit<Unit, MR, 0>(xq, ldxq, s, codes, params, a0);
    wide_unit<Unit, MR, 1>(xq, ldxq, s, codes, params, a1);
    wide_unit<Unit, MR, 2>(xq, ldxq, s, codes, params, a2);
    wide_unit<Unit, MR, 3>(xq, ldxq, s, codes, params, a3);
  }
  // The last step's units, and the order's +0 for those past the row's end.
  if (const int64_t rest = units % 4; rest > 0) {
    const __m512 zero = _mm512_setzero_ps();
    wide_unit<Unit, MR, 0>(xq, ldxq, whole, codes, params, a0);
    if (rest > 1) wide_unit<Unit, MR, 1>(xq, ldxq, whole, codes, params, a1);
    if (rest > 2) wide_unit<Unit, MR, 2>(xq, ldxq, whole, codes, params, a2);
    for (int m = 0; m < MR; ++m) {
      if (rest <= 1) a1[m] = _mm512_add_ps(a1[m], zero);
      if (rest <= 2) a2[m] = _mm512_add_ps(a2[m], zero);
      a3[m] = _mm512_add_ps(a3[m], zero);
    }
  }
  const __mmask16 stored = __mmask16((1u << count) - 1u);
  for (int m = 0; m < MR; ++m)
    _mm512_mask_storeu_ps(y + m * ldy, stored, _mm512_add_ps(_mm512_add_ps(a0[m], a1[m]), _mm512_add_ps(a2[m], a3[m])));
}

template <int Unit>
void wide_rows(const uint8_t* xq, int64_t ldxq, int64_t M, int64_t units, const uint8_t* codes, const float* params,
               int count, float* y, int64_t ldy) {
  for (int64_t m0 = 0; m0 < M; m0 += 4) {
    const uint8_t* x = xq + m0 * ldxq;
    float* out = y + m0 * ldy;
    switch (M - m0 < 4 ? M - m0 : 4) {
      case 1: wide_tile<Unit, 1>(x, ldxq, units, codes, params, count, out, ldy); break;
      case 2: wide_tile<Unit, 2>(x, ldxq, units, codes, params, count, out, ldy); break;
      case 3: wide_tile<Unit, 3>(x, ldxq, units, codes, params, count, out, ldy); break;
      default: wide_tile<Unit, 4>(x, ldxq, units, codes, params, count, out, ldy); break;
    }
  }
}

void dot_rows(const uint8_t* xq, int64_t ldxq, int64_t M, const AffineRows& w, int64_t N, int64_t K, float* y,
              int64_t ldy, float* scratch) {
  const int unit = int8_unit(w.bits);
  const int64_t row_bytes = K * w.bits / 8, code_ld_bytes = w.code_ld * 4;
  if (M >= kInt8WideMinRows) {
    // Prefill: 16 rows of w unpacked once per call, met by every row of x.
    const int64_t units = K / unit;
    auto* codes = reinterpret_cast<uint8_t*>(scratch);
    float* params = scratch + units * unit * kWideRows / 4;
    for (int64_t n0 = 0; n0 < N; n0 += kWideRows) {
      const int count = N - n0 < kWideRows ? int(N - n0) : kWideRows;
      pack_wide(w, n0, count, unit, units, codes, params);
      if (unit == 32)
        wide_rows<32>(xq, ldxq, M, units, codes, params, count, y + n0, ldy);
      else
        wide_rows<16>(xq, ldxq, M, units, codes, params, count, y + n0, ldy);
    }
    return;
  }
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
      tile_rows<32>(xq, ldxq, M, rows, row_bytes, 4 * kTileRows * code_ld_bytes, tp, scratch, count, y + n0, ldy);
    else
      tile_rows<16>(xq, ldxq, M, rows, row_bytes, 4 * kTileRows * code_ld_bytes, tp, scratch, count, y + n0, ldy);
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
