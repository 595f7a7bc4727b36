#pragma once
// The kernel algorithms, written once over a 16-lane vector type V and
// instantiated by each ISA translation unit (kernels_scalar.cc,
// kernels_avx2.cc, kernels_avx512.cc). Because every ISA runs the same
// sequence of IEEE operations (loads, exact widenings, FMA, add, mul, div,
// exact scaling by powers of two), their results agree bitwise.
//
// Everything is in an unnamed namespace on purpose: each ISA file gets its own
// copy compiled for its instruction set, so the linker can never pick an
// AVX-512 copy for baseline code. For the same reason this header calls no
// std:: templates that could be emitted out of line.
//
// V provides: R (16 floats), codes8
// (16 consecutive 8-bit codes from 4 words, as floats), Unpack with
// unpack(bits) and codes(unpack, bytes, readable) (16 codes of 1-7 bits from
// the bit stream at `bytes`, as floats; `readable` bytes from there may be
// read, at least 2·bits), Table4 with table4(s, b) and, each giving 16 4-bit codes
// dequantized as add(mul(code, s), b) (a lookup table on AVX-512, the
// arithmetic elsewhere): dequant4(table, words) for 16 codes in stream
// order, and Block4 with block4(words) (a 32-code block in Halves32 order,
// backend/weight.h), dequant4_lo(table, block) and dequant4_hi(table,
// block) for its first and second 16 codes; Mask, kMR (rows of x per matmul tile),
// kAccumulators (R values that fit in registers besides the operands), zero, set1,
// load/store (+ _partial for n < 16 lanes, zero-filling loads), load_bf16,
// load_f16 (+ _partial), add, sub, mul, div, fma(a, b, c) = a·b + c, abs,
// min(a, b) = a < b ? a : b, round_even, ldexp(x, n) = x·2^n (n integral),
// copysign, less, is_nan, select(mask, a, b), bits(mask) (lane i's flag in
// bit i), reduce (the canonical tree);
// and for the bf16-dot matmul P (32 bf16 values), load_pairs (+ _partial, n
// elements < 32, zero-filled) and dot_pairs(acc, a, b) (see PairStep).

#include <cstdint>

#include "backend/cpu/int8_matmul.h"
#include "backend/cpu/kernels.h"

namespace rowlm::cpu {
namespace {

constexpr int kLanes = 16;

// Weight loaders by storage type: the widening to f32 is exact.
template <class V>
struct LoadF32 {
  using T = float;
  static typename V::R full(const T* p) { return V::load(p); }
  static typename V::R partial(const T* p, int n) { return V::load_partial(p, n); }
};
template <class V>
struct LoadBF16 {
  using T = uint16_t;
  static typename V::R full(const T* p) { return V::load_bf16(p); }
  static typename V::R partial(const T* p, int n) { return V::load_bf16_partial(p, n); }
};
template <class V>
struct LoadF16 {
  using T = uint16_t;
  static typename V::R full(const T* p) { return V::load_f16(p); }
  static typename V::R partial(const T* p, int n) { return V::load_f16_partial(p, n); }
};

// ---------------------------------------------------------------- matmul --

// What one step of a dot product does, for the two matmul paths:
//
// WidenStep: f32 x against f32/bf16/f16 w widened in registers (exactly);
// the canonical order of kernels.h, 16 elements per step, one FMA per lane.
//
// PairStep, the bf16-dot path (MatmulPrecision::Bf16): x and w both bf16.
// Canonical order: 16 lanes; lane j owns the element pairs (2p, 2p+1) with
// p ≡ j (mod 16), in increasing p, the K tail zero-padded; for each pair it
// adds the odd element's product, then the even one's, each as one rounding
// of acc + a·b (a bf16 product is exact in f32), with denormal inputs read
// as (signed) zero and results below the normal range flushed to (signed)
// zero: AVX512-BF16's VDPBF16PS, which V::dot_pairs either is or emulates.
//
// Both end with the canonical reduce tree over the 16 lanes.
template <class V, class L>
struct WidenStep {
  using X = float;
  using W = typename L::T;
  using XV = typename V::R;
  using WV = typename V::R;
  static constexpr int kElements = kLanes;
  static XV load_x(const X* p) { return V::load(p); }
  static XV load_x_partial(const X* p, int n) { return V::load_partial(p, n); }
  static WV load_w(const W* p) { return L::full(p); }
  static WV load_w_partial(const W* p, int n) { return L::partial(p, n); }
  static typename V::R mac(typename V::R acc, const XV& x, const WV& w) { return V::fma(x, w, acc); }
};
template <class V>
struct PairStep {
  using X = uint16_t;
  using W = uint16_t;
  using XV = typename V::P;
  using WV = typename V::P;
  static constexpr int kElements = 2 * kLanes;
  static XV load_x(const X* p) { return V::load_pairs(p); }
  static XV load_x_partial(const X* p, int n) { return V::load_pairs_partial(p, n); }
  static WV load_w(const W* p) { return V::load_pairs(p); }
  static WV load_w_partial(const W* p, int n) { return V::load_pairs_partial(p, n); }
  static typename V::R mac(typename V::R acc, const XV& x, const WV& w) { return V::dot_pairs(acc, x, w); }
};

// One MR x NR tile of dot products over elements [k0, k1) of K, in S's
// canonical order. k0 is a multiple of the step. The lanes' partial sums
// enter from `carry` (MR x NR vectors of kLanes floats) unless k0 = 0, and
// leave to it unless k1 = K, where the zero-padded tail step and the
// reduce tree finish y. Carrying a sum through memory changes no bit, so a
// tile computed in K blocks equals the tile computed whole.
template <class V, class S, int MR, int NR>
inline void dot_tile(const typename S::X* x, int64_t ldx, const typename S::W* w, int64_t ldw, int64_t k0,
                     int64_t k1, int64_t K, float* carry, float* y, int64_t ldy) {
  using R = typename V::R;
  constexpr int kStep = S::kElements;
  R acc[MR][NR];
#pragma GCC unroll 16
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) acc[m][n] = k0 == 0 ? V::zero() : V::load(carry + (m * NR + n) * kLanes);
  int64_t k = k0;
  for (; k + kStep <= k1; k += kStep) {
    typename S::XV xv[MR];
#pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) xv[m] = S::load_x(x + m * ldx + k);
#pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) {
      // The same columns of the next tile's rows, into L2: the weight stream
      // stays ahead of the arithmetic instead of stalling at each new tile
      // (batched decode on Zen 4: +20-45% at 16 rows). One per cache line.
      if (k * int64_t(sizeof(typename S::W)) % 64 == 0) __builtin_prefetch(w + (n + NR) * ldw + k, 0, 2);
      const typename S::WV wv = S::load_w(w + n * ldw + k);
#pragma GCC unroll 16
      for (int m = 0; m < MR; ++m) acc[m][n] = S::mac(acc[m][n], xv[m], wv);
    }
  }
  if (k1 < K) {
#pragma GCC unroll 16
    for (int m = 0; m < MR; ++m)
#pragma GCC unroll 16
      for (int n = 0; n < NR; ++n) V::store(carry + (m * NR + n) * kLanes, acc[m][n]);
    return;
  }
  if (k < K) {  // the zero-padded tail block: every lane still gets its step
    const int rest = int(K - k);
    typename S::XV xv[MR];
#pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) xv[m] = S::load_x_partial(x + m * ldx + k, rest);
#pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) {
      const typename S::WV wv = S::load_w_partial(w + n * ldw + k, rest);
#pragma GCC unroll 16
      for (int m = 0; m < MR; ++m) acc[m][n] = S::mac(acc[m][n], xv[m], wv);
    }
  }
#pragma GCC unroll 16
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) y[m * ldy + n] = V::reduce(acc[m][n]);
}

// Tile policies for the shared tiling below.
template <class V, class S>
struct Tiles {
  using X = typename S::X;
  using W = typename S::W;
  static constexpr int kStep = S::kElements;
  template <int MR, int NR>
  static void run(const X* x, int64_t ldx, const W* w, int64_t ldw, int64_t k0, int64_t k1, int64_t K, float* carry,
                  float* y, int64_t ldy) {
    dot_tile<V, S, MR, NR>(x, ldx, w, ldw, k0, k1, K, carry, y, ldy);
  }
};

// ---------------------------------------------------------------- tiling --

// Weight rows per tile for MR rows of x: as many as the accumulator
// registers allow, up to 12. Weight tiles are converted from bf16/f16 in
// registers as they are read; more rows per tile means more concurrent row
// streams when they come from DRAM (on Zen 4, 12 rows of 3 KB stream 1.3x
// faster than 6) and fewer re-reads of x.
template <class V, int MR>
constexpr int tile_rows() {
  constexpr int fit = V::kAccumulators / MR;
  return fit < 1 ? 1 : fit > 12 ? 12 : fit;
}

// Runs the tile of m rows of x by n rows of w, for 1 <= m <= kM, 1 <= n <= kN.
template <class T, int kM, int kN>
inline void dot_tile_any(int m, int n, const typename T::X* x, int64_t ldx, const typename T::W* w, int64_t ldw,
                         int64_t k0, int64_t k1, int64_t K, float* carry, float* y, int64_t ldy) {
  if constexpr (kM > 0 && kN > 0) {
    if (m < kM)
      dot_tile_any<T, kM - 1, kN>(m, n, x, ldx, w, ldw, k0, k1, K, carry, y, ldy);
    else if (n < kN)
      dot_tile_any<T, kM, kN - 1>(m, n, x, ldx, w, ldw, k0, k1, K, carry, y, ldy);
    else
      T::template run<kM, kN>(x, ldx, w, ldw, k0, k1, K, carry, y, ldy);
  }
}

// Bytes of x and w slices that a K block keeps in L1 (of 32-48 KB): a block
// of a row group's x is met by every weight tile, and a block of a weight
// tile by every row group, from L1 instead of L2. Unblocked, a group of
// rows of x against a 6,144-wide down projection (96 KB for 4 rows) came
// from L2 for every tile, beside the weights.
constexpr int64_t kBlockL1Bytes = int64_t(24) << 10;

// Elements of K per block for full groups of MR rows of x and tiles of NR
// rows of w: K whole when its slices fit kBlockL1Bytes, else the fewest
// equal blocks (rounded up to whole steps) that do.
template <class T, int MR, int NR>
int64_t k_block(int64_t K) {
  constexpr int64_t kBytesPerK = MR * int64_t(sizeof(typename T::X)) + NR * int64_t(sizeof(typename T::W));
  const int64_t blocks = (K * kBytesPerK + kBlockL1Bytes - 1) / kBlockL1Bytes;
  if (blocks <= 1) return K;
  const int64_t kc = (K + blocks - 1) / blocks;
  return (kc + T::kStep - 1) / T::kStep * T::kStep;
}

// The tiles' partial sums between K blocks live on the stack (the header
// allocates nothing): 48 KB, at least one tile of any shape.
constexpr int64_t kCarryFloats = int64_t(12) << 10;

// All M rows of x against all N rows of w in groups of MR rows of x and
// tiles of NR rows of w. Within a K block (k_block), weight tiles outer and
// row groups inner: a tile read from memory is reused from L1 by every
// group, the weight stream advances at the pace of the arithmetic, and the
// block of x is reused by every tile. Blocked, N goes in slabs whose tiles'
// sums fit the carry, and M in parts where its groups alone do not. (The
// driver hands over at most one group at a time when x is too large to
// stay in cache.) Fewer rows than a group (decode) run K whole: their x is
// small.
template <class V, class T, int MR>
inline void dot_panel(const typename T::X* x, int64_t ldx, int64_t M, const typename T::W* w, int64_t ldw,
                      int64_t N, int64_t K, float* y, int64_t ldy) {
  constexpr int NR = tile_rows<V, MR>();
  constexpr int64_t kTileFloats = int64_t(MR) * NR * kLanes;
  static_assert(kTileFloats <= kCarryFloats, "the carry holds at least one tile");
  const int64_t kc = M >= MR ? k_block<T, MR, NR>(K) : K;
  const int64_t groups = (M + MR - 1) / MR;
  // More row groups than the carry holds for one tile: in parts of M.
  constexpr int64_t kMaxGroups = kCarryFloats / kTileFloats;
  if (kc < K && groups > kMaxGroups) {
    for (int64_t m = 0; m < M; m += kMaxGroups * MR)
      dot_panel<V, T, MR>(x + m * ldx, ldx, M - m < kMaxGroups * MR ? M - m : kMaxGroups * MR, w, ldw, N, K,
                          y + m * ldy, ldy);
    return;
  }
  alignas(64) float carry[kCarryFloats];
  // At least one tile: groups <= kMaxGroups here.
  const int64_t slab_tiles = kc < K ? kCarryFloats / kTileFloats / groups : (N + NR - 1) / NR;
  for (int64_t slab = 0; slab < N; slab += slab_tiles * NR) {
    const int64_t slab_end = N - slab < slab_tiles * NR ? N : slab + slab_tiles * NR;
    for (int64_t k0 = 0;; k0 += kc) {
      const int64_t k1 = K - k0 <= kc ? K : k0 + kc;
      for (int64_t n = slab; n < slab_end; n += NR) {
        const int nr = int(slab_end - n < NR ? slab_end - n : NR);
        for (int64_t m = 0; m < M; m += MR) {
          const int mr = int(M - m < MR ? M - m : MR);
          const auto* xm = x + m * ldx;
          const auto* wn = w + n * ldw;
          float* ymn = y + m * ldy + n;
          float* tile_carry = carry + (kc < K ? ((n - slab) / NR * groups + m / MR) * kTileFloats : 0);
          if (mr == MR && nr == NR)
            T::template run<MR, NR>(xm, ldx, wn, ldw, k0, k1, K, tile_carry, ymn, ldy);
          else
            dot_tile_any<T, MR, NR>(mr, nr, xm, ldx, wn, ldw, k0, k1, K, tile_carry, ymn, ldy);
        }
      }
      if (k1 == K) break;
    }
  }
}

// Fewer rows than a group: the tile shape made for that many rows.
template <class V, class T, int kMax>
inline void dot_panel_rows(int rows, const typename T::X* x, int64_t ldx, const typename T::W* w, int64_t ldw,
                           int64_t N, int64_t K, float* y, int64_t ldy) {
  if constexpr (kMax > 0) {
    if (rows == kMax)
      dot_panel<V, T, kMax>(x, ldx, kMax, w, ldw, N, K, y, ldy);
    else
      dot_panel_rows<V, T, kMax - 1>(rows, x, ldx, w, ldw, N, K, y, ldy);
  }
}

template <class V, class T>
void dot_rows(const typename T::X* x, int64_t ldx, int64_t M, const typename T::W* w, int64_t ldw, int64_t N,
              int64_t K, float* y, int64_t ldy) {
  constexpr int MR = V::kMR;
  if (M >= MR)
    dot_panel<V, T, MR>(x, ldx, M, w, ldw, N, K, y, ldy);
  else if (M > 0)
    dot_panel_rows<V, T, MR - 1>(int(M), x, ldx, w, ldw, N, K, y, ldy);
}

template <class V, class L>
void dot_block_typed(const float* x, int64_t ldx, int64_t M, const WeightRows& w, int64_t N, int64_t K,
                     float* y, int64_t ldy) {
  dot_rows<V, Tiles<V, WidenStep<V, L>>>(x, ldx, M, static_cast<const typename L::T*>(w.data), w.ld, N, K, y, ldy);
}

template <class V>
void dot_block(const float* x, int64_t ldx, int64_t M, const WeightRows& w, int64_t N, int64_t K,
               float* y, int64_t ldy) {
  switch (w.dtype) {
    case DType::BF16: dot_block_typed<V, LoadBF16<V>>(x, ldx, M, w, N, K, y, ldy); return;
    case DType::F16: dot_block_typed<V, LoadF16<V>>(x, ldx, M, w, N, K, y, ldy); return;
    default: dot_block_typed<V, LoadF32<V>>(x, ldx, M, w, N, K, y, ldy); return;
  }
}

template <class V>
void dot_block_bf16(const uint16_t* x, int64_t ldx, int64_t M, const uint16_t* w, int64_t ldw, int64_t N,
                    int64_t K, float* y, int64_t ldy) {
  dot_rows<V, Tiles<V, PairStep<V>>>(x, ldx, M, w, ldw, N, K, y, ldy);
}

// Independent dot_pairs chains, for the bf16 compute ceiling; returns the
// flop count (2 per multiply-add).
template <class V>
double bf16_dot_chains(int64_t iters, float* sink) {
  constexpr int kChains = 12;
  typename V::R acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = V::set1(float(j));
  constexpr int kPairElements = PairStep<V>::kElements;
  alignas(64) uint16_t a_bits[kPairElements], b_bits[kPairElements];
  for (int i = 0; i < kPairElements; ++i) {
    a_bits[i] = 0x3f80;  // 1.0
    b_bits[i] = 0x3380;  // 2^-24: the chains stay finite
  }
  const typename V::P a = V::load_pairs(a_bits), b = V::load_pairs(b_bits);
  for (int64_t i = 0; i < iters; ++i)
#pragma GCC unroll 12
    for (int j = 0; j < kChains; ++j) acc[j] = V::dot_pairs(acc[j], a, b);
  auto s = acc[0];
  for (int j = 1; j < kChains; ++j) s = V::add(s, acc[j]);
  *sink = V::reduce(s);
  return double(iters) * kChains * kPairElements * 2;
}

// --------------------------------------------------------- affine matmul --

// Affine weights (quant/affine.h): each 16-element step of a weight row is
// dequantized in registers as w = scale·code + bias (V::mul then V::add, the
// two roundings of quant::dequantize) and then meets x exactly as a dense
// f32 weight would, in the canonical order of kernels.h. An affine matmul is
// therefore bitwise the dense f32 matmul of the dequantized matrix, on every
// ISA and for every M; so is the batched path, which dequantizes a tile into
// f32 once (dequantize_affine) and runs dot_block over it.

// Where lane j of 16 codes of `bits` bits (1-8), packed little-end first
// from a byte p, finds its code: the code starts `shift` bits into byte
// `byte`, and may run into byte + 1. As VPSHUFB control for the lane's
// 32 bits: bytes byte and byte + 1, then two zero bytes. The vector V's
// unpack(bits) loads these once per tile.
struct CodeLanes {
  int32_t shuffle[kLanes];
  int32_t shift[kLanes];
};
inline CodeLanes code_lanes(int bits) {
  CodeLanes c{};
  for (int j = 0; j < kLanes; ++j) {
    const int bit = j * bits, byte = bit / 8;
    c.shuffle[j] = int32_t(uint32_t(byte) | uint32_t(byte + 1) << 8 | 0x80800000u);
    c.shift[j] = bit % 8;
  }
  return c;
}

// 16 codes of a row from code index k (a multiple of 16), as floats. B is
// the bit width when known at compile time (8: whole words per step), else
// 0 and u.bits says it: the bit-stream layout of quant/affine.h, where a 3-,
// 5- or 6-bit code may straddle two words. K: the row's codes, so that no
// load reads past the row's last byte. (4-bit codes: GroupDequant<V, 4>.)
template <class V, int B>
inline typename V::R affine_codes(const uint32_t* row, int64_t k, const typename V::Unpack& u, int64_t K) {
  static_assert(B != 4, "4-bit codes are dequantized by GroupDequant<V, 4>");
  if constexpr (B == 8) {
    return V::codes8(row + k / 4);
  } else {
    const auto* bytes = reinterpret_cast<const uint8_t*>(row) + k * u.bits / 8;
    return V::codes(u, bytes, (K - k) * u.bits / 8);
  }
}

// A row's per-group dequantization state: its scale and bias broadcast, or
// for 4-bit codes V's Table4 (each code's value scale·code + bias, computed
// by the same two roundings). at(row, k, unpack, K): the 16 values from code
// k (a multiple of 16) of a row of K codes.
template <class V, int B>
struct GroupDequant {
  typename V::R s, b;
  void set(float scale, float bias) {
    s = V::set1(scale);
    b = V::set1(bias);
  }
  typename V::R at(const uint32_t* row, int64_t k, const typename V::Unpack& u, int64_t K) const {
    return V::add(V::mul(affine_codes<V, B>(row, k, u, K), s), b);
  }
};
// 4-bit codes in Halves32 order: the block of codes k - k % 32 .. starts at
// word k / 32 · 4, where the stream's code k - k % 32 would; past the last
// whole block the row's 16 remaining codes are in stream order.
template <class V>
struct GroupDequant<V, 4> {
  typename V::Table4 t;
  void set(float scale, float bias) { t = V::table4(V::set1(scale), V::set1(bias)); }
  static const uint32_t* block_of(const uint32_t* row, int64_t k) { return row + k / 32 * 4; }
  typename V::R at(const uint32_t* row, int64_t k, const typename V::Unpack&, int64_t K) const {
    if (k >= K / 32 * 32) return V::dequant4(t, row + k / 8);
    const typename V::Block4 c = V::block4(block_of(row, k));
    return k % 32 == 0 ? V::dequant4_lo(t, c) : V::dequant4_hi(t, c);
  }
  // Codes k .. k + 31 of a whole block (k a multiple of 32) from one load.
  void pair(const uint32_t* row, int64_t k, typename V::R& lo, typename V::R& hi) const {
    const typename V::Block4 c = V::block4(block_of(row, k));
    lo = V::dequant4_lo(t, c);
    hi = V::dequant4_hi(t, c);
  }
};

// What the affine tiles share: each weight row's codes and parameter
// offset, the rows' group parameters widened ahead (AffineTileParams),
// zeroed accumulators, and the reduced results.
template <int NR>
struct AffineTileRows {
  const uint32_t* rows[NR];
  int64_t params[NR];
  AffineTileRows(const AffineRows& w, int64_t n0) {
#pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) {
      rows[n] = w.codes + (n0 + n) * w.code_ld;
      params[n] = (n0 + n) * w.param_ld;
    }
  }
};

// Up to kLanes consecutive stored scales or biases from entry i as f32 (f16
// and bf16 widen exactly), c of them (the rest 0).
template <class V>
__attribute__((always_inline)) inline typename V::R affine_params(const void* p, DType t, int64_t i, int c) {
  if (t == DType::F32) {
    const float* f = static_cast<const float*>(p) + i;
    return c == kLanes ? V::load(f) : V::load_partial(f, c);
  }
  const uint16_t* h = static_cast<const uint16_t*>(p) + i;
  if (t == DType::F16) return c == kLanes ? V::load_f16(h) : V::load_f16_partial(h, c);
  return c == kLanes ? V::load_bf16(h) : V::load_bf16_partial(h, c);
}

// A tile's group parameters, widened to f32 kGroups groups at a time, so
// that a group's step in the tile loop reads each row's scale and bias from
// here (a broadcast from L1) instead of widening one stored value per row
// and group there: per 32 4-bit codes that widening cost about as many
// vector operations as the codes' own lookups and FMAs (docs/perf.md). The
// values are exact widenings of the stored ones, and an implied bias is
// scale · bias_per_scale (exact: −2^(bits−1)), so the bits do not depend on
// where they are widened.
template <int NR>
struct AffineTileParams {
  static constexpr int kGroups = 64;  // a multiple of kLanes
  alignas(64) float scale[NR][kGroups];
  alignas(64) float bias[NR][kGroups];
  // Groups g0 .. g0 + count (count ≤ kGroups) of the tile's rows.
  template <class V>
  __attribute__((always_inline)) void widen(const AffineRows& w, const int64_t (&params)[NR], int64_t g0, int count) {
    for (int n = 0; n < NR; ++n)
      for (int i = 0; i < count; i += kLanes) {
        const int c = count - i < kLanes ? count - i : kLanes;
        const typename V::R sv = affine_params<V>(w.scales, w.param_dtype, params[n] + g0 + i, c);
        V::store(&scale[n][i], sv);
        V::store(&bias[n][i], w.biases ? affine_params<V>(w.biases, w.param_dtype, params[n] + g0 + i, c)
                                       : V::mul(sv, V::set1(w.bias_per_scale)));
      }
  }
  // Group g's dequantization state per row (of `groups`), widening the
  // next kGroups groups first where g starts them.
  template <class V, class Dq>
  __attribute__((always_inline)) void set_group(Dq* dq, const AffineRows& w, const int64_t (&params)[NR], int64_t g,
                                                int64_t groups) {
    const int64_t gi = g % kGroups;
    if (gi == 0) widen<V>(w, params, g, int(groups - g < kGroups ? groups - g : kGroups));
#pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) dq[n].set(scale[n][gi], bias[n][gi]);
  }
};

template <class V, int MR, int NR>
inline void zero_tile(typename V::R (&acc)[MR][NR]) {
#pragma GCC unroll 16
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) acc[m][n] = V::zero();
}
template <class V, int MR, int NR>
inline void store_tile(const typename V::R (&acc)[MR][NR], float* y, int64_t ldy) {
#pragma GCC unroll 16
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 16
    for (int n = 0; n < NR; ++n) y[m * ldy + n] = V::reduce(acc[m][n]);
}

// affine_tile for 4-bit codes in groups of whole 32-code blocks: both halves
// of a block from one load, each accumulator still taking codes k .. k + 15,
// then k + 16 .. k + 31. A function of its own (not inlined), so that its
// accumulators get registers to themselves.
template <class V, int MR, int NR>
__attribute__((noinline)) void affine_tile_blocks(const float* x, int64_t ldx, const AffineRows& w, int64_t n0,
                                                  int64_t K, float* y, int64_t ldy) {
  using R = typename V::R;
  R acc[MR][NR];
  const AffineTileRows<NR> t(w, n0);
  AffineTileParams<NR> p;
  zero_tile<V, MR, NR>(acc);
  const int64_t G = w.group_size, groups = K / G;
  for (int64_t g = 0; g < groups; ++g) {
    GroupDequant<V, 4> dq[NR];
    p.template set_group<V>(dq, w, t.params, g, groups);
    for (int64_t k = g * G; k < (g + 1) * G; k += 2 * kLanes) {
      R xlo[MR], xhi[MR];
#pragma GCC unroll 16
      for (int m = 0; m < MR; ++m) {
        xlo[m] = V::load(x + m * ldx + k);
        xhi[m] = V::load(x + m * ldx + k + kLanes);
      }
#pragma GCC unroll 16
      for (int n = 0; n < NR; ++n) {
        // As dot_tile: the next tile's rows into L2, one per cache line.
        if (k % 128 == 0) __builtin_prefetch(t.rows[n] + NR * w.code_ld + k / 8, 0, 2);
        R lo, hi;
        dq[n].pair(t.rows[n], k, lo, hi);
#pragma GCC unroll 16
        for (int m = 0; m < MR; ++m) acc[m][n] = V::fma(xlo[m], lo, acc[m][n]);
#pragma GCC unroll 16
        for (int m = 0; m < MR; ++m) acc[m][n] = V::fma(xhi[m], hi, acc[m][n]);
      }
    }
  }
  store_tile<V, MR, NR>(acc, y, ldy);
}

// One MR x NR tile: rows [0, MR) of x against weight rows [n0, n0 + NR).
template <class V, int B, int MR, int NR>
inline void affine_tile(const float* x, int64_t ldx, const AffineRows& w, int64_t n0, int64_t K, float* y,
                        int64_t ldy) {
  if constexpr (B == 4) {
    if (w.group_size % 32 == 0) return affine_tile_blocks<V, MR, NR>(x, ldx, w, n0, K, y, ldy);
  }
  using R = typename V::R;
  R acc[MR][NR];
  const AffineTileRows<NR> t(w, n0);
  AffineTileParams<NR> p;
  zero_tile<V, MR, NR>(acc);
  const int64_t G = w.group_size, groups = K / G;
  const typename V::Unpack u = V::unpack(w.bits);
  const int bits = B != 0 ? B : w.bits;
  for (int64_t g = 0; g < groups; ++g) {
    GroupDequant<V, B> dq[NR];
    p.template set_group<V>(dq, w, t.params, g, groups);
    for (int64_t k = g * G; k < (g + 1) * G; k += kLanes) {
      R xv[MR];
#pragma GCC unroll 16
      for (int m = 0; m < MR; ++m) xv[m] = V::load(x + m * ldx + k);
#pragma GCC unroll 16
      for (int n = 0; n < NR; ++n) {
        // As dot_tile: the next tile's rows into L2, one per cache line.
        // (Once per 64-byte line: the step whose first code starts in the line's first 16 codes' bits.)
        if ((k * bits) % 512 < 16 * bits)
          __builtin_prefetch(reinterpret_cast<const uint8_t*>(t.rows[n] + NR * w.code_ld) + k * bits / 8, 0, 2);
        const R wv = dq[n].at(t.rows[n], k, u, K);
#pragma GCC unroll 16
        for (int m = 0; m < MR; ++m) acc[m][n] = V::fma(xv[m], wv, acc[m][n]);
      }
    }
  }
  store_tile<V, MR, NR>(acc, y, ldy);
}

// The tile for m <= kM rows of x and n <= kN weight rows.
template <class V, int B, int kM, int kN>
inline void affine_tile_any(int m, int n, const float* x, int64_t ldx, const AffineRows& w, int64_t n0, int64_t K,
                            float* y, int64_t ldy) {
  if constexpr (kM > 0 && kN > 0) {
    if (m < kM)
      affine_tile_any<V, B, kM - 1, kN>(m, n, x, ldx, w, n0, K, y, ldy);
    else if (n < kN)
      affine_tile_any<V, B, kM, kN - 1>(m, n, x, ldx, w, n0, K, y, ldy);
    else
      affine_tile<V, B, kM, kN>(x, ldx, w, n0, K, y, ldy);
  }
}

// Weight rows per affine tile for MR rows of x: as many as fit the
// registers with each row's scale and bias beside its MR accumulators (the
// MR x vectors and the dequantized step take what dot_tile's count leaves).
template <class V, int MR>
constexpr int affine_tile_rows() {
  constexpr int fit = (V::kAccumulators + 2) / (MR + 2);
  return fit < 1 ? 1 : fit > 8 ? 8 : fit;
}

template <class V, int B, int MR>
void affine_rows(const float* x, int64_t ldx, int64_t M, const AffineRows& w, int64_t N, int64_t K, float* y,
                 int64_t ldy) {
  constexpr int NR = affine_tile_rows<V, MR>();
  for (int64_t n = 0; n < N; n += NR) {
    const int nr = int(N - n < NR ? N - n : NR);
    for (int64_t m = 0; m < M; m += MR) {
      const int mr = int(M - m < MR ? M - m : MR);
      if (mr == MR && nr == NR)
        affine_tile<V, B, MR, NR>(x + m * ldx, ldx, w, n, K, y + m * ldy + n, ldy);
      else
        affine_tile_any<V, B, MR, NR>(mr, nr, x + m * ldx, ldx, w, n, K, y + m * ldy + n, ldy);
    }
  }
}

// Fewer rows of x than a group: the tile shape made for that many rows.
template <class V, int B, int kMax>
inline void affine_rows_for(int64_t M, const float* x, int64_t ldx, const AffineRows& w, int64_t N, int64_t K,
                            float* y, int64_t ldy) {
  if constexpr (kMax > 1) {
    if (M < kMax) return affine_rows_for<V, B, kMax - 1>(M, x, ldx, w, N, K, y, ldy);
  }
  affine_rows<V, B, kMax>(x, ldx, M, w, N, K, y, ldy);
}

template <class V>
void dot_block_affine(const float* x, int64_t ldx, int64_t M, const AffineRows& w, int64_t N, int64_t K, float* y,
                      int64_t ldy) {
  if (M <= 0) return;
  switch (w.bits) {
    case 4: affine_rows_for<V, 4, V::kMR>(M, x, ldx, w, N, K, y, ldy); return;
    case 8: affine_rows_for<V, 8, V::kMR>(M, x, ldx, w, N, K, y, ldy); return;
    default: affine_rows_for<V, 0, V::kMR>(M, x, ldx, w, N, K, y, ldy); return;
  }
}

template <class V, int B>
void dequantize_affine_typed(const AffineRows& w, int64_t rows, int64_t K, float* out, int64_t ldo) {
  const int64_t G = w.group_size, groups = K / G;
  const typename V::Unpack u = V::unpack(w.bits);
  AffineTileParams<1> p;
  for (int64_t r = 0; r < rows; ++r) {
    const uint32_t* codes = w.codes + r * w.code_ld;
    const int64_t params[1] = {r * w.param_ld};
    for (int64_t g = 0; g < groups; ++g) {
      GroupDequant<V, B> dq;
      p.template set_group<V>(&dq, w, params, g, groups);
      if constexpr (B == 4) {
        if (G % 32 == 0) {
          for (int64_t k = g * G; k < (g + 1) * G; k += 2 * kLanes) {
            typename V::R lo, hi;
            dq.pair(codes, k, lo, hi);
            V::store(out + r * ldo + k, lo);
            V::store(out + r * ldo + k + kLanes, hi);
          }
          continue;
        }
      }
      for (int64_t k = g * G; k < (g + 1) * G; k += kLanes) V::store(out + r * ldo + k, dq.at(codes, k, u, K));
    }
  }
}

template <class V>
void dequantize_affine(const AffineRows& w, int64_t rows, int64_t K, float* out, int64_t ldo) {
  switch (w.bits) {
    case 4: dequantize_affine_typed<V, 4>(w, rows, K, out, ldo); return;
    case 8: dequantize_affine_typed<V, 8>(w, rows, K, out, ldo); return;
    default: dequantize_affine_typed<V, 0>(w, rows, K, out, ldo); return;
  }
}

// ----------------------------------------------------------- elementwise --

template <class V>
inline typename V::R load_n(const float* p, int64_t i, int64_t n) {
  return i + kLanes <= n ? V::load(p + i) : V::load_partial(p + i, int(n - i));
}
template <class V>
inline void store_n(float* p, int64_t i, int64_t n, typename V::R v) {
  if (i + kLanes <= n)
    V::store(p + i, v);
  else
    V::store_partial(p + i, v, int(n - i));
}

template <class V, class L>
void convert_scale_typed(const void* src, int64_t n, float scale, float* out) {
  const auto* p = static_cast<const typename L::T*>(src);
  const auto s = V::set1(scale);
  for (int64_t i = 0; i < n; i += kLanes) {
    const auto v = i + kLanes <= n ? L::full(p + i) : L::partial(p + i, int(n - i));
    store_n<V>(out, i, n, V::mul(v, s));
  }
}

template <class V>
void convert_scale(DType dtype, const void* src, int64_t n, float scale, float* out) {
  switch (dtype) {
    case DType::BF16: convert_scale_typed<V, LoadBF16<V>>(src, n, scale, out); return;
    case DType::F16: convert_scale_typed<V, LoadF16<V>>(src, n, scale, out); return;
    default: convert_scale_typed<V, LoadF32<V>>(src, n, scale, out); return;
  }
}

template <class V>
float sum_squares(const float* x, int64_t n) {
  auto acc = V::zero();
  for (int64_t i = 0; i < n; i += kLanes) {
    const auto v = load_n<V>(x, i, n);
    acc = V::fma(v, v, acc);
  }
  return V::reduce(acc);
}

template <class V>
void norm_apply(const float* x, const float* w, bool w_plus_one, int64_t n, float inv, float* y) {
  const auto vinv = V::set1(inv);
  const auto one = V::set1(1.0f);
  for (int64_t i = 0; i < n; i += kLanes) {
    auto v = V::mul(load_n<V>(x, i, n), vinv);
    if (w != nullptr) {
      auto g = load_n<V>(w, i, n);
      if (w_plus_one) g = V::add(one, g);
      v = V::mul(v, g);
    }
    store_n<V>(y, i, n, v);
  }
}

template <class V>
void rope_head(float* x, const float* cos, const float* sin, int64_t half) {
  for (int64_t i = 0; i < half; i += kLanes) {
    const auto a = load_n<V>(x, i, half);
    const auto b = load_n<V>(x + half, i, half);
    const auto c = load_n<V>(cos, i, half);
    const auto s = load_n<V>(sin, i, half);
    store_n<V>(x, i, half, V::sub(V::mul(a, c), V::mul(b, s)));
    store_n<V>(x + half, i, half, V::add(V::mul(b, c), V::mul(a, s)));
  }
}

// exp(y) by range reduction: y = n·ln2 + r with |r| <= ln2/2, a degree-7
// Taylor polynomial for exp(r) (truncation < 1e-8 relative), then an exact
// scaling by 2^n. Callers keep y where 2^n stays normal (|n| < 127).
template <class V>
inline typename V::R exp_reduced(typename V::R y) {
  const auto n = V::round_even(V::mul(y, V::set1(1.44269504088896341f)));
  auto r = V::fma(n, V::set1(-0.693145751953125f), y);  // ln2 high part: n·hi is exact
  r = V::fma(n, V::set1(-1.42860682030941723212e-6f), r);
  auto p = V::set1(1.0f / 5040.0f);
  p = V::fma(p, r, V::set1(1.0f / 720.0f));
  p = V::fma(p, r, V::set1(1.0f / 120.0f));
  p = V::fma(p, r, V::set1(1.0f / 24.0f));
  p = V::fma(p, r, V::set1(1.0f / 6.0f));
  p = V::fma(p, r, V::set1(0.5f));
  p = V::fma(p, r, V::set1(1.0f));
  p = V::fma(p, r, V::set1(1.0f));
  return V::ldexp(p, n);
}

// exp(y) for y in [0, 20].
template <class V>
inline typename V::R exp_0_20(typename V::R y) {
  return exp_reduced<V>(y);
}

// tanh in f32, within a few ulp of the exact value. |x| < 0.5: odd Taylor
// series to x^17 (next term < 1e-9 relative); otherwise 1 − 2/(e^{2|x|} + 1)
// with |x| clamped to 10, where tanh already rounds to 1. Sign restored at
// the end; NaN passes through.
template <class V>
inline typename V::R tanh_v(typename V::R x) {
  const auto a = V::abs(x);
  const auto a2 = V::mul(a, a);
  auto p = V::set1(float(6404582.0 / 10854718875.0));
  p = V::fma(p, a2, V::set1(float(-929569.0 / 638512875.0)));
  p = V::fma(p, a2, V::set1(float(21844.0 / 6081075.0)));
  p = V::fma(p, a2, V::set1(float(-1382.0 / 155925.0)));
  p = V::fma(p, a2, V::set1(float(62.0 / 2835.0)));
  p = V::fma(p, a2, V::set1(float(-17.0 / 315.0)));
  p = V::fma(p, a2, V::set1(float(2.0 / 15.0)));
  p = V::fma(p, a2, V::set1(float(-1.0 / 3.0)));
  const auto small = V::fma(V::mul(a, a2), p, a);
  const auto ac = V::min(a, V::set1(10.0f));  // NaN becomes 10 here; restored below
  const auto e = exp_0_20<V>(V::add(ac, ac));
  const auto large = V::sub(V::set1(1.0f), V::div(V::set1(2.0f), V::add(e, V::set1(1.0f))));
  const auto t = V::copysign(V::select(V::less(a, V::set1(0.5f)), small, large), x);
  return V::select(V::is_nan(x), x, t);
}

template <class V>
void tanh_n(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; i += kLanes) store_n<V>(out, i, n, tanh_v<V>(load_n<V>(x, i, n)));
}

// PyTorch's gelu(approximate="tanh") in f32:
// (0.5·x)·(1 + tanh(β·(x + κ·x³))) with x³ = (x·x)·x, then · up.
template <class V>
void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out) {
  const auto beta = V::set1(float(1.41421356237309504880 * 1.12837916709551257390 * 0.5));
  const auto kappa = V::set1(0.044715f);
  const auto half = V::set1(0.5f);
  const auto one = V::set1(1.0f);
  for (int64_t i = 0; i < n; i += kLanes) {
    const auto x = load_n<V>(gate, i, n);
    const auto u = load_n<V>(up, i, n);
    const auto x3 = V::mul(V::mul(x, x), x);
    const auto inner = V::mul(beta, V::add(x, V::mul(kappa, x3)));
    const auto g = V::mul(V::mul(half, x), V::add(one, tanh_v<V>(inner)));
    store_n<V>(out, i, n, V::mul(g, u));
  }
}

// exp(y) for y in [-87, 0] (clamped there, where 2^n is still normal).
template <class V>
inline typename V::R exp_neg(typename V::R y) {
  return exp_reduced<V>(V::select(V::less(y, V::set1(-87.0f)), V::set1(-87.0f), y));
}

// silu(x)·up with silu(x) = x · sigmoid(x) and sigmoid from e = exp(-|x|):
// 1 / (1 + e) for x >= 0, e / (1 + e) below, so nothing overflows. NaN
// passes through.
template <class V>
void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  const auto one = V::set1(1.0f);
  for (int64_t i = 0; i < n; i += kLanes) {
    const auto x = load_n<V>(gate, i, n);
    const auto u = load_n<V>(up, i, n);
    const auto e = exp_neg<V>(V::sub(V::zero(), V::abs(x)));
    const auto d = V::add(one, e);
    const auto sig = V::select(V::less(x, V::zero()), V::div(e, d), V::div(one, d));
    const auto s = V::select(V::is_nan(x), x, V::mul(x, sig));
    store_n<V>(out, i, n, V::mul(s, u));
  }
}

template <class V>
void add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; i += kLanes)
    store_n<V>(y, i, n, V::add(load_n<V>(y, i, n), load_n<V>(x, i, n)));
}

template <class V>
void scale(float* y, float s, int64_t n) {
  const auto vs = V::set1(s);
  for (int64_t i = 0; i < n; i += kLanes) store_n<V>(y, i, n, V::mul(load_n<V>(y, i, n), vs));
}

// HF: logits / cap, tanh, · cap.
template <class V>
void softcap(float* y, float cap, int64_t n) {
  const auto c = V::set1(cap);
  for (int64_t i = 0; i < n; i += kLanes)
    store_n<V>(y, i, n, V::mul(tanh_v<V>(V::div(load_n<V>(y, i, n), c)), c));
}

template <class V>
void add_scaled(float* y, float a, const float* x, int64_t n) {
  const auto va = V::set1(a);
  for (int64_t i = 0; i < n; i += kLanes)
    store_n<V>(y, i, n, V::add(load_n<V>(y, i, n), V::mul(load_n<V>(x, i, n), va)));
}

// ------------------------------------------------------------ sampler rows --

// Lanes [rem, 16) of v replaced by `fill` (a row's last, partial vector).
template <class V>
inline typename V::R tail_fill(typename V::R v, int64_t rem, float fill) {
  if (rem >= kLanes) return v;
  alignas(64) static constexpr float kLaneIndex[kLanes] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  return V::select(V::less(V::load(kLaneIndex), V::set1(float(rem))), v, V::set1(fill));
}

// Four running maxima per block (a chain of compare-and-select per vector
// would wait on itself), combined at the block's end; flags as vectors.
template <class V>
void scan_blocks(const float* x, int64_t n, int64_t block, RowScan* out) {
  const float inf = __builtin_inff();
  const auto vinf = V::set1(inf), one = V::set1(1.0f);
  for (int64_t b0 = 0, bi = 0; b0 < n; b0 += block, ++bi) {
    const int64_t b1 = b0 + block < n ? b0 + block : n;
    typename V::R mx[4] = {V::set1(-inf), V::set1(-inf), V::set1(-inf), V::set1(-inf)};
    auto bad = V::zero(), finite = V::zero();  // 1 in a lane that saw one
    auto take = [&](typename V::R& m, typename V::R v) {
      bad = V::select(V::less(v, vinf), bad, one);  // NaN or +inf
      finite = V::select(V::less(V::abs(v), vinf), one, finite);
      m = V::select(V::less(m, v), v, m);           // NaN never compares larger
    };
    int64_t i = b0;
    for (; i + 4 * kLanes <= b1; i += 4 * kLanes)
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) take(mx[j], V::load(x + i + j * kLanes));
    for (; i < b1; i += kLanes) take(mx[0], tail_fill<V>(load_n<V>(x, i, b1), b1 - i, -inf));  // -inf changes nothing
    alignas(64) float m[4][kLanes], b[kLanes], f[kLanes];
    for (int j = 0; j < 4; ++j) V::store(m[j], mx[j]);
    V::store(b, bad);
    V::store(f, finite);
    RowScan r{-inf, false, false};
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < kLanes; ++l) r.max = r.max < m[j][l] ? m[j][l] : r.max;
    for (int l = 0; l < kLanes; ++l) {
      r.bad = r.bad || b[l] != 0.0f;
      r.any_finite = r.any_finite || f[l] != 0.0f;
    }
    out[bi] = r;
  }
}

template <class V>
int64_t first_above(const float* x, int64_t n, float t) {
  const auto vt = V::set1(t);
  for (int64_t i = 0; i < n; i += kLanes) {
    // Lanes past the end read 0 and are masked off.
    uint32_t above = V::bits(V::less(vt, load_n<V>(x, i, n)));
    if (n - i < kLanes) above &= (1u << (n - i)) - 1u;
    if (above) return i + __builtin_ctz(above);
  }
  return n;
}

template <class V>
void shift_divide(float* x, int64_t n, float shift, float divisor) {
  const auto s = V::set1(shift), d = V::set1(divisor);
  for (int64_t i = 0; i < n; i += kLanes) store_n<V>(x, i, n, V::div(V::sub(load_n<V>(x, i, n), s), d));
}

template <class V>
void remove_below(float* x, int64_t n, float t) {
  const auto vt = V::set1(t), neg_inf = V::set1(-__builtin_inff());
  for (int64_t i = 0; i < n; i += kLanes) {
    const auto v = load_n<V>(x, i, n);
    store_n<V>(x, i, n, V::select(V::less(v, vt), neg_inf, v));
  }
}

template <class V>
void exp_blocks(const float* x, int64_t n, float shift, int64_t block, float* out, float* block_sums) {
  const auto s = V::set1(shift), floor = V::set1(-87.0f), zero = V::zero();
  for (int64_t b0 = 0, bi = 0; b0 < n; b0 += block, ++bi) {
    const int64_t b1 = b0 + block < n ? b0 + block : n;
    auto acc = V::zero();
    for (int64_t i = b0; i < b1; i += kLanes) {
      const auto y = tail_fill<V>(V::sub(load_n<V>(x, i, b1), s), b1 - i, -__builtin_inff());
      const auto e = V::select(V::less(y, floor), zero, exp_neg<V>(y));
      if (out) store_n<V>(out, i, b1, e);
      acc = V::add(acc, e);
    }
    block_sums[bi] = V::reduce(acc);
  }
}

// The table every ISA file returns, filled from the algorithms above.
template <class V>
Kernels make_kernels(Isa isa, uint64_t (*stream_read)(const void*, std::size_t),
                     double (*fma_chains)(int64_t, float*), const AttentionKernels& attention) {
  Kernels k;
  k.isa = isa;
  k.mr = V::kMR;
  k.dot_block = &dot_block<V>;
  k.dot_block_bf16 = &dot_block_bf16<V>;
  k.dot_block_affine = &dot_block_affine<V>;
  k.dequantize_affine = &dequantize_affine<V>;
  k.quantize_int8 = &quantize_int8_portable;  // set_int8_vnni replaces both where it can
  k.dot_rows_int8 = &dot_rows_int8_portable;
  k.bf16_dot_chains = &bf16_dot_chains<V>;
  k.convert_scale = &convert_scale<V>;
  k.sum_squares = &sum_squares<V>;
  k.norm_apply = &norm_apply<V>;
  k.rope_head = &rope_head<V>;
  k.gelu_tanh_mul = &gelu_tanh_mul<V>;
  k.silu_mul = &silu_mul<V>;
  k.attention = attention;
  k.add = &add<V>;
  k.scale = &scale<V>;
  k.softcap = &softcap<V>;
  k.add_scaled = &add_scaled<V>;
  k.tanh = &tanh_n<V>;
  k.scan_blocks = &scan_blocks<V>;
  k.first_above = &first_above<V>;
  k.shift_divide = &shift_divide<V>;
  k.remove_below = &remove_below<V>;
  k.exp_blocks = &exp_blocks<V>;
  k.stream_read = stream_read;
  k.fma_chains = fma_chains;
  return k;
}

}  // namespace
}  // namespace rowlm::cpu
