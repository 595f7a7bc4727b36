// The vector statement of AMX's order (amx_bf16_rows.h), compiled with the
// AVX-512 flags (cmake: files named *_avx512.cc). Like the other ISA files
// it calls no std:: template that could be emitted out of line.

// GCC 12 reports its own _mm512_undefined_* placeholders inside the
// intrinsic headers as uninitialized (GCC PR 105593, fixed in GCC 13), as
// kernels_avx512.h says.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backend/cpu/amx_bf16.h"
#include "backend/cpu/amx_bf16_rows.h"

namespace rowlm::cpu {
namespace {

// MXCSR's flush-to-zero and denormals-are-zero for the scope: the tiles read
// subnormal inputs and write subnormal results as zero whatever MXCSR says,
// the vector FMAs only under these bits. MXCSR belongs to the thread, so
// every call sets and restores its own, leaving the pool's threads as found.
class FlushDenormals {
 public:
  FlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | _MM_FLUSH_ZERO_ON | _MM_DENORMALS_ZERO_ON); }
  ~FlushDenormals() { _mm_setcsr(saved_); }
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
  unsigned saved_;
};

constexpr int kLanes = 16;       // weight rows per group: one output per lane
constexpr int kBlockBytes = 64;  // one row's 32 bf16 of a block
constexpr __mmask16 kEvenLanes = 0x5555, kOddLanes = 0xaaaa;

// t[r] holds the 16 bf16 pairs of row r; afterwards t[i] holds pair i of
// the 16 rows, row r in lane r. Four rounds of 16 shuffles: pairs
// interleaved within 128-bit lanes (32-bit, then 64-bit unpacks), then the
// 128-bit lanes gathered (two rounds of VSHUFI32X4).
inline void transpose_pairs(__m512i t[kLanes]) {
  __m512i a[kLanes], b[kLanes];
  // a[2j], lane L: rows 2j, 2j+1 of pairs 4L, 4L+1; a[2j+1]: of 4L+2, 4L+3.
  for (int j = 0; j < kLanes; j += 2) {
    a[j] = _mm512_unpacklo_epi32(t[j], t[j + 1]);
    a[j + 1] = _mm512_unpackhi_epi32(t[j], t[j + 1]);
  }
  // b[4q + c], lane L: rows 4q to 4q+3 of pair 4L + c.
  for (int q = 0; q < kLanes; q += 4) {
    b[q] = _mm512_unpacklo_epi64(a[q], a[q + 2]);
    b[q + 1] = _mm512_unpackhi_epi64(a[q], a[q + 2]);
    b[q + 2] = _mm512_unpacklo_epi64(a[q + 1], a[q + 3]);
    b[q + 3] = _mm512_unpackhi_epi64(a[q + 1], a[q + 3]);
  }
  // The 128-bit lanes: VSHUFI32X4 0x88 takes each source's lanes 0 and 2,
  // 0xdd its lanes 1 and 3, so two rounds gather lane L of b[c], b[4 + c],
  // b[8 + c] and b[12 + c]: pair 4L + c of rows 0 to 15.
  for (int c = 0; c < 4; ++c) {
    const __m512i low_02 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0x88);  // rows 0-7 of pairs 0 and 8 (+ c)
    const __m512i low_13 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0xdd);  // rows 0-7 of pairs 4 and 12
    const __m512i high_02 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0x88);  // rows 8-15
    const __m512i high_13 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0xdd);
    t[c] = _mm512_shuffle_i32x4(low_02, high_02, 0x88);
    t[8 + c] = _mm512_shuffle_i32x4(low_02, high_02, 0xdd);
    t[4 + c] = _mm512_shuffle_i32x4(low_13, high_13, 0x88);
    t[12 + c] = _mm512_shuffle_i32x4(low_13, high_13, 0xdd);
  }
}

// An element's pair of a step of packed x (amx_rows_pack_x) in every lane:
// the even lanes get its value in the even rows' block, the odd lanes in
// the odd rows' block (VPBROADCASTQ from memory: a load, no shuffle).
inline __m512 x_pair(const float* p) {
  int64_t pair;
  std::memcpy(&pair, p, sizeof pair);
  return _mm512_castsi512_ps(_mm512_set1_epi64(pair));
}

// One step for Rows rows of x: t is the transposed block of 16 weight rows,
// xj row 0's pairs of the step. `active`: the lanes whose block this step is
// (each lane adds its blocks in order and nothing else; an idle lane's
// acc + (0 + 0) could turn a -0 into +0).
template <int Rows, bool AllActive>
inline void step(const __m512i t[kLanes], const float* xj, int64_t ldx, __m512 acc[Rows], __mmask16 active) {
  const __m512i high = _mm512_set1_epi32(int(0xffff0000u));
  __m512 even[Rows], odd[Rows];
  for (int m = 0; m < Rows; ++m) even[m] = odd[m] = _mm512_setzero_ps();
  for (int i = 0; i < kLanes; ++i) {
    // A pair's element 2i is its low half, 2i + 1 its high half.
    const __m512 w_even = _mm512_castsi512_ps(_mm512_slli_epi32(t[i], 16));
    const __m512 w_odd = _mm512_castsi512_ps(_mm512_and_si512(t[i], high));
    for (int m = 0; m < Rows; ++m) {
      even[m] = _mm512_fmadd_ps(x_pair(xj + m * ldx + 4 * i), w_even, even[m]);
      odd[m] = _mm512_fmadd_ps(x_pair(xj + m * ldx + 4 * i + 2), w_odd, odd[m]);
    }
  }
  for (int m = 0; m < Rows; ++m) {
    const __m512 block = _mm512_add_ps(even[m], odd[m]);
    acc[m] = AllActive ? _mm512_add_ps(acc[m], block) : _mm512_mask_add_ps(acc[m], active, acc[m], block);
  }
}

// Sixteen rows of w at step j: row r at block j - (r & 1) · Lag. x86
// addressing reaches rows 4q + 1, 4q + 2 and 4q + 3 from row 4q's pointer
// as p + ld, p + 2·ld and p + ld3 (the odd rows' lag as a displacement), so
// the loop holds four pointers and two strides instead of an address per
// row (which spilled to the stack).
template <int Lag>
class RowGroup {
 public:
  RowGroup(const uint16_t* first, int64_t ldw) : ld_(ldw * 2), ld3_(ldw * 6) {
    for (int q = 0; q < 4; ++q) p_[q] = reinterpret_cast<const char*>(first) + q * 4 * ld_;
  }
  const void* row(int r) const { return p_[r / 4] + (r % 4 == 3 ? ld3_ : r % 4 * ld_) - (r & 1) * Lag * kBlockBytes; }
  void next_step() {
    for (int q = 0; q < 4; ++q) p_[q] += kBlockBytes;
  }

 private:
  const char* p_[4];
  int64_t ld_, ld3_;
};

// Where the steps begin and end (the first Lag and last Lag steps, and the
// K tail), some of a step's loads are cut: rows past N (r >= count) and
// blocks outside the row read as zero, the last block is cut to K, and
// only the lanes with a block of their own add their sums.
template <int Rows, int Lag>
inline void edge_step(const float* x, int64_t ldx, const uint16_t* rows, int64_t ldw, int count, int64_t j,
                      int64_t full_blocks, int rest, __m512 acc[Rows]) {
  const __mmask32 columns = __mmask32((1u << rest) - 1u);
  __m512i t[kLanes];
  for (int r = 0; r < kLanes; ++r) {
    const int64_t b = j - (r & 1) * Lag;
    if (r >= count || b < 0 || b > full_blocks || (b == full_blocks && rest == 0)) {
      t[r] = _mm512_setzero_si512();
      continue;
    }
    const uint16_t* p = rows + r * ldw + b * kAmxBlock;
    if (b < full_blocks) {
      __builtin_prefetch(p + kLanes * ldw, 0, 2);  // as the steady steps do (rows_kernel)
      t[r] = _mm512_loadu_si512(p);
    } else {
      t[r] = _mm512_maskz_loadu_epi16(columns, p);
    }
  }
  transpose_pairs(t);
  const int64_t blocks = full_blocks + (rest > 0);
  const __mmask16 active = __mmask16((j < blocks ? kEvenLanes : 0) | (j >= Lag ? kOddLanes : 0));
  step<Rows, false>(t, x + j * kAmxRowsStepFloats, ldx, acc, active);
}

// Not inlined into the caller that holds the MXCSR guard: GCC does not
// treat LDMXCSR as a barrier to floating-point arithmetic (it may move an
// operation across it), but it cannot move the callee's out of the call.
template <int Rows, int Lag>
[[gnu::noinline]] void rows_kernel(const float* x, int64_t K, const uint16_t* w, int64_t ldw, int64_t N, float* y,
                                   int64_t ldy) {
  const int64_t ldx = amx_rows_x_stride(K, Lag);
  const int64_t full_blocks = K / kAmxBlock, blocks = amx_blocks(K);
  const int rest = int(K - full_blocks * kAmxBlock);
  for (int64_t n0 = 0; n0 < N; n0 += kLanes) {
    const uint16_t* rows = w + n0 * ldw;
    const int count = N - n0 < kLanes ? int(N - n0) : kLanes;
    __m512 acc[Rows];
    for (int m = 0; m < Rows; ++m) acc[m] = _mm512_setzero_ps();
    // Steps 0 to blocks + Lag - 1: the even lanes' blocks at steps 0 to
    // blocks - 1, the odd lanes' at Lag to blocks + Lag - 1. Steps Lag to
    // full_blocks - 1 read whole blocks of every row: there, for 16 rows,
    // plain loads and every lane adding.
    int64_t j = 0;
    for (; j < Lag; ++j) edge_step<Rows, Lag>(x, ldx, rows, ldw, count, j, full_blocks, rest, acc);
    if (count == kLanes) {
      RowGroup<Lag> group(rows + j * kAmxBlock, ldw), next(rows + kLanes * ldw + j * kAmxBlock, ldw);
      for (; j < full_blocks; ++j) {
        __m512i t[kLanes];
        for (int r = 0; r < kLanes; ++r) {
          // The same block of the next group's rows, into L2, as the pair
          // order's tiles do (kernel_algorithms.h): the stream stays ahead
          // of the arithmetic instead of stalling at each new group. One
          // Zen 4 core, a lone row, 6144 x 1536: 17-18 GB/s without, 22-28
          // with; the same rows 8 or 16 blocks ahead instead reached 77% of
          // the pair order's rate there. Past the last group it touches
          // what may not be w: a prefetch never faults.
          __builtin_prefetch(next.row(r), 0, 2);
          t[r] = _mm512_loadu_si512(group.row(r));
        }
        group.next_step();
        next.next_step();
        transpose_pairs(t);
        step<Rows, true>(t, x + j * kAmxRowsStepFloats, ldx, acc, 0xffff);
      }
    }
    for (; j < blocks + Lag; ++j) edge_step<Rows, Lag>(x, ldx, rows, ldw, count, j, full_blocks, rest, acc);
    const __mmask16 lanes = __mmask16((1u << count) - 1u);
    for (int m = 0; m < Rows; ++m) _mm512_mask_storeu_ps(y + m * ldy + n0, lanes, acc[m]);
  }
}

template <int Lag>
void rows_kernel_for(const float* x, int64_t M, int64_t K, const uint16_t* w, int64_t ldw, int64_t N, float* y,
                     int64_t ldy) {
  static_assert(kAmxRowsMax == 4, "one case per row count");
  switch (M) {
    case 1: rows_kernel<1, Lag>(x, K, w, ldw, N, y, ldy); break;
    case 2: rows_kernel<2, Lag>(x, K, w, ldw, N, y, ldy); break;
    case 3: rows_kernel<3, Lag>(x, K, w, ldw, N, y, ldy); break;
    default: rows_kernel<4, Lag>(x, K, w, ldw, N, y, ldy); break;
  }
}

}  // namespace

void amx_bf16_rows(const float* x, int64_t M, int64_t K, int64_t lag, const uint16_t* w, int64_t ldw, int64_t N,
                   float* y, int64_t ldy) {
  if (N <= 0 || M <= 0) return;
  const FlushDenormals flush;
  if (lag == kAmxRowsLag)
    rows_kernel_for<kAmxRowsLag>(x, M, K, w, ldw, N, y, ldy);
  else
    rows_kernel_for<0>(x, M, K, w, ldw, N, y, ldy);
}

}  // namespace rowlm::cpu
