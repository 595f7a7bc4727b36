// Paged attention on tensor cores (mma.sync m16n8k16) for bf16 KV, in the
// split/merge contract of attention_merge.cuh: see attention_mma in
// kv_kernels.h and docs/design/attention-tensor-cores.md.
//
// Rows. For one KV head, query head row ρ = t·G + h (token t, its h-th query
// head of that KV head, G = heads / kv_heads). A thread block takes a tile of
// 16 consecutive rows: in split mode the G heads of one token (more tiles when
// G > 16) and one split; in inline mode any 16 rows, whose tokens may belong
// to different block tables. Inline mode walks the tile's rows in runs of
// equal block table (one staging of K and V serves a run) and each run's
// splits in increasing order; the tiles go from the last tokens to the first
// (the last tokens of a prompt have the most splits).
//
// Per split of kSplitPositions (64) positions, for every row r of the tile:
//   staging  the split's K ([d][position]) and V ([position][d]) by cp.async;
//            V at positions no row of the run reads is zeros, K there is zeros
//            or (in an 8-position chunk that holds a read position) whatever
//            the block holds: it reaches only its own, masked, score column;
//   scores   s = q_r · k_p by mma over d in 16-wide steps of increasing d, q
//            split into three bf16 terms (hi = bf16(q), mid = bf16(q − hi),
//            lo = bf16(q − hi − mid): all 24 bits of q), per step the terms
//            hi, mid, lo into one f32 accumulator from 0; then s · scale, and
//            −inf where p is outside the row's range. Warp w scores positions
//            16w..16w+15;
//   softmax  m = the row's max (each thread's 4 columns in order, lanes xor 1
//            then 2, then warps 0..3 in order); e = attention_exp(s − m) (0
//            where masked); l = Σ e in the same tree;
//   values   o = Σ_p e_p · v_p by mma over positions in 16-wide steps of
//            increasing position, e split in three bf16 terms as q, per step
//            hi, mid, lo. Warp w takes the 16-column groups w, w + 4, …;
// then (m, l, o) is merged into the row's running state in split order
// (merge_split): in registers (inline mode) or by the last split block of the
// token (split mode). Every step above reads only row r's own values and the
// positions' keys and values: mma's rows are independent, its reduction runs
// in a fixed order, and rows of other tokens in the tile, or a run's other
// rows, change nothing but what is staged at positions a row does not read,
// which never reaches it (its score is replaced by −inf whatever the key
// held, its e is 0 exactly, and staged values are zeros or stored values,
// finite).

#include <algorithm>
#include <cstdint>

#include "backend/cuda/attention_merge.cuh"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kv_device.cuh"
#include "backend/cuda/kv_kernels.h"
#include "backend/cuda/mma_sync.cuh"

namespace rowlm::cuda {
namespace {

constexpr int kMmaWarps = 4, kMmaThreads = 32 * kMmaWarps, kTileRows = 16;
constexpr int kTerms = 3;                        // bf16 terms of an f32 operand
constexpr int kPosStride = kSplitPositions + 8;  // a staged K row or an e row: 16 bytes of padding
static_assert(kSplitPositions == 16 * kMmaWarps, "each warp scores 16 positions of a split");

// Shared memory, in this order (every array starts on 16 bytes):
//   row_lo, row_hi, row_tab  int64 [16] each: the tile's rows' ranges and tables
//   q_src                    pointer [16]: the rows' q
//   red_max, red_sum         f32 [4 warps][16]
//   flag                     int (split mode: whether this block merges), padded to 16 bytes
//   q                        bf16 [3 terms][16][hd + 8]
//   k                        bf16 [hd][kPosStride]
//   v                        bf16 [64][W + 8]: the block's W value columns
//   e                        bf16 [3 terms][16][kPosStride]
struct MmaSmem {
  int64_t *row_lo, *row_hi, *row_tab;
  const float** q_src;  // the rows' q (null past the tile's rows)
  float *red_max, *red_sum;
  int* flag;
  uint16_t *q, *k, *v, *e;
};
constexpr int64_t kHeaderBytes = 4 * kTileRows * 8 + 2 * kMmaWarps * kTileRows * 4 + 16;
__host__ __device__ __forceinline__ int64_t row_stride(int hd) { return hd + 8; }
__host__ __device__ __forceinline__ int64_t mma_smem_bytes(int hd, int W) {
  return kHeaderBytes + 2 * (kTerms * kTileRows * row_stride(hd) + int64_t(hd) * kPosStride +
                             kSplitPositions * row_stride(W) + kTerms * kTileRows * kPosStride);
}
__device__ __forceinline__ MmaSmem carve(uint8_t* base, int hd, int W) {
  MmaSmem s;
  s.row_lo = reinterpret_cast<int64_t*>(base);
  s.row_hi = s.row_lo + kTileRows;
  s.row_tab = s.row_hi + kTileRows;
  s.q_src = reinterpret_cast<const float**>(s.row_tab + kTileRows);
  s.red_max = reinterpret_cast<float*>(s.q_src + kTileRows);
  s.red_sum = s.red_max + kMmaWarps * kTileRows;
  s.flag = reinterpret_cast<int*>(s.red_sum + kMmaWarps * kTileRows);
  s.q = reinterpret_cast<uint16_t*>(base + kHeaderBytes);
  s.k = s.q + kTerms * kTileRows * row_stride(hd);
  s.v = s.k + int64_t(hd) * kPosStride;
  s.e = s.v + kSplitPositions * row_stride(W);
  return s;
}

// x as hi + mid + lo, each a bf16 (round to nearest even): 24 significant bits.
struct Bf16Terms {
  uint16_t t[kTerms];
};
__device__ __forceinline__ Bf16Terms split_terms(float x) {
  Bf16Terms r;
  r.t[0] = f32_to_bf16(x);
  const float rest = __fsub_rn(x, bf16_to_f32(r.t[0]));
  r.t[1] = f32_to_bf16(rest);
  r.t[2] = f32_to_bf16(__fsub_rn(rest, bf16_to_f32(r.t[1])));
  return r;
}

// Reduces each of a thread's two tile rows (g and g + 8) over the 64
// positions the block scores, in one fixed tree: the quad's four threads
// (lanes xor 1, then xor 2), then the four warps in order, ((w0 ∘ w1) ∘ w2) ∘ w3.
// Every thread gets its rows' results. `red`: [4 warps][16] floats; the
// caller's barrier before the next write to `red` keeps its readers safe.
template <class Op>
__device__ __forceinline__ void tile_rows_reduce(float (&v)[2], float* red, int warp, int g, int tq, Op op) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    v[half] = op(v[half], __shfl_xor_sync(0xffffffffu, v[half], 1));
    v[half] = op(v[half], __shfl_xor_sync(0xffffffffu, v[half], 2));
    if (tq == 0) red[warp * kTileRows + g + 8 * half] = v[half];
  }
  __syncthreads();
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float* r = red + g + 8 * half;
    v[half] = op(op(op(r[0], r[kTileRows]), r[2 * kTileRows]), r[3 * kTileRows]);
  }
}

struct MmaArgs {
  SplitPartials part;        // split mode; part.groups: column groups of the head's values
  int* arrivals = nullptr;   // split mode: a count per block column (grid.x), zero before and after
  int tiles_per_token = 1;   // split mode: tiles of one token's G rows
  int64_t tiles = 0;         // inline mode: tiles of the T·G rows
};

// kPairs: the most 16-column pairs of the block's W value columns one warp
// takes in the values step (at least ceil(W / 64)). Inline mode: W = hd.
// Split mode: W = hd / groups, and block column x % groups takes the columns
// [W·(x % groups), W·(x % groups + 1)); every group's blocks score the same
// keys the same way (the scores never depend on the value columns), and the
// mma of a 16-column pair reads only its own columns, so the grouping, a
// choice of how many blocks run, never changes a bit.
template <int kPairs, bool kInline>
__global__ void __launch_bounds__(kMmaThreads) attention_mma_kernel(KvLayout L, KvBlocks blocks, AttentionArgs a,
                                                                    MmaArgs ma) {
  allow_dependents();
  extern __shared__ __align__(16) uint8_t mma_smem[];
  const int hd = L.head_dim, bs = L.block_size, tid = int(threadIdx.x);
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
  const int G = a.heads / L.kv_heads;
  const int groups = kInline ? 1 : ma.part.groups, W = hd / groups;
  const int cg = kInline ? 0 : int(blockIdx.x % groups), c0 = cg * W;  // the block's value columns
  const int64_t qs = row_stride(hd), vs = row_stride(W);
  const MmaSmem sm = carve(mma_smem, hd, W);

  // The tile's rows [row0, row0 + nrows) of KV head kvh.
  int kvh;
  int64_t row0, row_end;
  if constexpr (kInline) {
    kvh = int(blockIdx.x % L.kv_heads);
    const int64_t tile = ma.tiles - 1 - int64_t(blockIdx.x / L.kv_heads);
    row0 = tile * kTileRows;
    row_end = min(row0 + kTileRows, a.T * G);
  } else {
    int64_t x = blockIdx.x / groups;
    const int group = int(x % ma.tiles_per_token);
    x /= ma.tiles_per_token;
    kvh = int(x % L.kv_heads);
    const int64_t t = x / L.kv_heads;
    row0 = t * G + int64_t(group) * kTileRows;
    row_end = min(row0 + kTileRows, (t + 1) * G);
  }
  const int nrows = int(row_end - row0);
  // Output row of tile row r: token ρ / G, query head kvh·G + ρ % G.
  auto out_row = [&](int r) {
    const int64_t rho = row0 + r;
    return (rho / G) * a.heads + int64_t(kvh) * G + rho % G;
  };

  int64_t n_splits = 0;  // split mode: the token's
  if constexpr (!kInline) {
    // Split mode: every row is one token's; blocks past its splits do nothing.
    n_splits = split_count(a.lo[row0 / G], a.hi[row0 / G]);
    if (n_splits == 0) {
      if (blockIdx.y == 0)
        for (int i = tid; i < nrows * W; i += kMmaThreads) a.out[out_row(i / W) * hd + c0 + i % W] = 0.0f;
      return;
    }
    if (int64_t(blockIdx.y) >= n_splits) return;
  }
  if (tid < kTileRows) {
    int64_t lo = 0, hi = -1, tab = -1;
    if (tid < nrows) {
      const int64_t t = (row0 + tid) / G;
      lo = a.lo[t];
      hi = a.hi[t];
      tab = a.table_offset[t];
    }
    sm.row_lo[tid] = lo;
    sm.row_hi[tid] = hi;
    sm.row_tab[tid] = tab;
    sm.q_src[tid] = tid < nrows ? a.q + out_row(tid) * hd : nullptr;
  }
  __syncthreads();
  // q's three terms, four features a load (hd is a multiple of 16), the
  // loads of kQBatch steps issued before their stores: one load and its
  // stores at a time waited a memory latency per value (the compiler keeps
  // a global load below a shared store it cannot tell apart from it), which
  // was most of a launch's instructions and stalls.
  {
    constexpr int kQBatch = 4;
    const int quads = hd / 4, real = nrows * quads;  // a row's float4s; the tile's rows come first
    for (int i0 = tid; i0 < kTileRows * quads; i0 += kQBatch * kMmaThreads) {
      float4 x[kQBatch];
#pragma unroll
      for (int j = 0; j < kQBatch; ++j) {
        const int i = i0 + j * kMmaThreads;
        x[j] = i < real ? reinterpret_cast<const float4*>(sm.q_src[i / quads])[i % quads] : make_float4(0, 0, 0, 0);
      }
#pragma unroll
      for (int j = 0; j < kQBatch; ++j) {
        const int i = i0 + j * kMmaThreads;
        if (i >= kTileRows * quads) break;
        const int r = i / quads, d = 4 * (i % quads);
        const Bf16Terms t[4] = {split_terms(x[j].x), split_terms(x[j].y), split_terms(x[j].z), split_terms(x[j].w)};
#pragma unroll
        for (int term = 0; term < kTerms; ++term)
          *reinterpret_cast<uint2*>(sm.q + (term * kTileRows + r) * qs + d) =
              make_uint2(uint32_t(t[0].t[term]) | (uint32_t(t[1].t[term]) << 16),
                         uint32_t(t[2].t[term]) | (uint32_t(t[3].t[term]) << 16));
      }
    }
  }
  __syncthreads();

  // ldmatrix row addresses: lanes 8i..8i+7 address matrix i, matrices
  // (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15).
  const int lm_row = (lane & 7) + 8 * ((lane >> 3) & 1), lm_col = 8 * (lane >> 4);

  // The running state of this thread's rows g and g + 8 (inline mode).
  float run_m[2], run_l[2], run_o[kPairs][2][4];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    run_m[half] = neg_inf();
    run_l[half] = 0.0f;
  }
#pragma unroll
  for (int j = 0; j < kPairs; ++j)
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int c = 0; c < 4; ++c) run_o[j][n][c] = 0.0f;

  for (int r_begin = 0; r_begin < nrows;) {
    // A run: rows [r_begin, r_end) of one block table (split mode: all).
    const int64_t tab = sm.row_tab[r_begin];
    int r_end = r_begin + 1;
    if constexpr (kInline) {
      while (r_end < nrows && sm.row_tab[r_end] == tab) ++r_end;
    } else {
      r_end = nrows;
    }
    int64_t lo_u = INT64_MAX, hi_u = -1;
    for (int r = r_begin; r < r_end; ++r)
      if (sm.row_hi[r] >= sm.row_lo[r]) {
        lo_u = min(lo_u, sm.row_lo[r]);
        hi_u = max(hi_u, sm.row_hi[r]);
      }
    int64_t s_first = hi_u >= lo_u ? lo_u / kSplitPositions : 0, s_last = hi_u >= lo_u ? hi_u / kSplitPositions : -1;
    if constexpr (!kInline) s_first = s_last = lo_u / kSplitPositions + blockIdx.y;
    const int32_t* table = a.tables + (tab < 0 ? 0 : tab);
    // This thread's rows: in the run, with a range, and the range's bounds.
    int64_t my_lo[2], my_hi[2];
    bool in_run[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = g + 8 * half;
      my_lo[half] = sm.row_lo[r];
      my_hi[half] = sm.row_hi[r];
      in_run[half] = r >= r_begin && r < r_end && my_hi[half] >= my_lo[half];
    }

    for (int64_t split = s_first; split <= s_last; ++split) {
      const int64_t base = split * kSplitPositions;
      const int64_t st_lo = max(lo_u, base), st_hi = min(hi_u, base + kSplitPositions - 1);
      __syncthreads();  // the previous split's readers of k, v, e and red are done
      // K: [d][8 chunks of 8 positions]. A thread's chunk is the same for
      // every d it stages (tid % 8): its source is found once per split. A
      // chunk lies in one KV block (blocks hold whole chunks); one that holds
      // a position the run reads is copied whole, its other positions' keys
      // being whatever the block holds there: a score column depends only on
      // its own position's key (mma's columns are independent), and those
      // columns are masked to −inf before any use. (Copying such a chunk
      // element by element, one dependent global load each, took most of a
      // decode launch: every decode step has one.)
      {
        const int c = tid % (kSplitPositions / 8);
        const int64_t p0 = base + 8 * c;
        const bool none = p0 + 7 < st_lo || p0 > st_hi;
        const uint8_t* chunk = nullptr;  // the chunk's keys at d = 0
        if (!none) chunk = block_at(blocks, table[p0 / bs]) + int64_t(kvh) * L.k_head_bytes + (p0 % bs) * 2;
        const int64_t d_stride = int64_t(bs) * 2;
        for (int d = tid / (kSplitPositions / 8); d < hd; d += kMmaThreads / (kSplitPositions / 8)) {
          uint16_t* dst = sm.k + int64_t(d) * kPosStride + 8 * c;
          if (none) {
            *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
          } else {
            cp_async_16(dst, chunk + d * d_stride);
          }
        }
      }
      cp_async_commit();
      // V: [position][W / 8 pieces of 16 bytes]; warp w stages positions w,
      // w + 4, …, lane l < 16 finding the record of position w + 4l once.
      {
        const int pieces = W / 8;
        const uint8_t* rec = nullptr;
        if (lane < kSplitPositions / kMmaWarps) {
          const int64_t p = base + warp + kMmaWarps * lane;
          if (p >= st_lo && p <= st_hi)
            rec = block_at(blocks, table[p / bs]) + L.k_bytes + int64_t(kvh) * L.v_head_bytes + (p % bs) * L.head_bytes +
                  2 * c0;
        }
        for (int x = 0; x < kSplitPositions / kMmaWarps; ++x) {
          const int pos = warp + kMmaWarps * x;
          const uint8_t* src = reinterpret_cast<const uint8_t*>(
              __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(rec), x));
          for (int j = lane; j < pieces; j += 32) {
            uint16_t* dst = sm.v + pos * vs + 8 * j;
            if (src) {
              cp_async_16(dst, src + 16 * j);
            } else {
              *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
            }
          }
        }
      }
      cp_async_commit();
      cp_async_wait<1>();  // the keys; the values may still be landing
      __syncthreads();

      // Scores of positions 16·warp .. 16·warp + 15.
      float acc[2][4];
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[n][c] = 0.0f;
      for (int d0 = 0; d0 < hd; d0 += 16) {
        unsigned b[4];
        ldmatrix_x4_trans(sm.k + int64_t(d0 + lm_row) * kPosStride + warp * 16 + lm_col, b[0], b[1], b[2], b[3]);
#pragma unroll
        for (int term = 0; term < kTerms; ++term) {
          unsigned aq[4];
          ldmatrix_x4(sm.q + (term * kTileRows + lm_row) * qs + d0 + lm_col, aq[0], aq[1], aq[2], aq[3]);
          mma_bf16(acc[0], aq, b[0], b[1]);
          mma_bf16(acc[1], aq, b[2], b[3]);
        }
      }
      // Scale, mask, and the row maxima.
      bool active[2];
#pragma unroll
      for (int half = 0; half < 2; ++half)
        active[half] = in_run[half] && my_lo[half] / kSplitPositions <= split && split <= my_hi[half] / kSplitPositions;
      bool valid[2][4];
      float mx[2] = {neg_inf(), neg_inf()};
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int half = c >> 1;
          const int64_t p = base + warp * 16 + 8 * n + 2 * tq + (c & 1);
          valid[n][c] = active[half] && p >= my_lo[half] && p <= my_hi[half];
          acc[n][c] = valid[n][c] ? __fmul_rn(acc[n][c], a.scale) : neg_inf();
          mx[half] = fmaxf(mx[half], acc[n][c]);
        }
      tile_rows_reduce(mx, sm.red_max, warp, g, tq, [](float x, float y) { return fmaxf(x, y); });
      const float(&m)[2] = mx;
      float l[2] = {0.0f, 0.0f};
      // e, its three terms into shared memory, and the partial sums.
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          Bf16Terms te[2];
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const int c = 2 * half + j;
            const float e = valid[n][c] ? attention_exp(__fsub_rn(acc[n][c], m[half])) : 0.0f;
            l[half] = __fadd_rn(l[half], e);
            te[j] = split_terms(e);
          }
          const int col = warp * 16 + 8 * n + 2 * tq;
#pragma unroll
          for (int term = 0; term < kTerms; ++term)
            *reinterpret_cast<uint32_t*>(sm.e + (term * kTileRows + g + 8 * half) * kPosStride + col) =
                uint32_t(te[0].t[term]) | (uint32_t(te[1].t[term]) << 16);
        }
      tile_rows_reduce(l, sm.red_sum, warp, g, tq, [](float x, float y) { return __fadd_rn(x, y); });

      cp_async_wait<0>();  // the values
      __syncthreads();
      // Values of the block's column pairs warp, warp + 4, …
      float o[kPairs][2][4];
#pragma unroll
      for (int j = 0; j < kPairs; ++j)
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
          for (int c = 0; c < 4; ++c) o[j][n][c] = 0.0f;
#pragma unroll
      for (int k0 = 0; k0 < kSplitPositions; k0 += 16) {
        unsigned ae[kTerms][4];
#pragma unroll
        for (int term = 0; term < kTerms; ++term)
          ldmatrix_x4(sm.e + (term * kTileRows + lm_row) * kPosStride + k0 + lm_col, ae[term][0], ae[term][1],
                      ae[term][2], ae[term][3]);
#pragma unroll
        for (int j = 0; j < kPairs; ++j) {
          const int pair = warp + kMmaWarps * j;
          if (pair * 16 < W) {
            unsigned b[4];
            ldmatrix_x4_trans(sm.v + (k0 + lm_row) * vs + pair * 16 + lm_col, b[0], b[1], b[2], b[3]);
#pragma unroll
            for (int term = 0; term < kTerms; ++term) {
              mma_bf16(o[j][0], ae[term], b[0], b[1]);
              mma_bf16(o[j][1], ae[term], b[2], b[3]);
            }
          }
        }
      }

      if constexpr (kInline) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          if (!active[half]) continue;
          const MergeStep step = merge_split(run_m[half], run_l[half], m[half], l[half]);
#pragma unroll
          for (int j = 0; j < kPairs; ++j)
#pragma unroll
            for (int n = 0; n < 2; ++n)
#pragma unroll
              for (int c = 2 * half; c < 2 * half + 2; ++c) run_o[j][n][c] = merge_output(run_o[j][n][c], o[j][n][c], step);
        }
      } else {
        // Split mode: this split's partials (the block's rows all read it).
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          if (!active[half]) continue;
          const int r = g + 8 * half;
          const int64_t at = out_row(r) * ma.part.splits + blockIdx.y;
#pragma unroll
          for (int j = 0; j < kPairs; ++j) {
            const int pair = warp + kMmaWarps * j;
            if (pair * 16 >= W) continue;
#pragma unroll
            for (int n = 0; n < 2; ++n) {
              const int d = c0 + pair * 16 + 8 * n + 2 * tq;
              *reinterpret_cast<float2*>(ma.part.o + at * hd + d) = make_float2(o[j][n][2 * half], o[j][n][2 * half + 1]);
            }
          }
          if (warp == 0 && tq == 0) {
            float* ml = ma.part.ml + ma.part.ml_at(out_row(r), blockIdx.y, cg);
            ml[0] = m[half];
            ml[1] = l[half];
          }
        }
      }
    }
    r_begin = r_end;
  }

  if constexpr (kInline) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = g + 8 * half;
      if (r >= nrows) continue;
      const bool empty = sm.row_hi[r] < sm.row_lo[r];
      float* out = a.out + out_row(r) * hd;
#pragma unroll
      for (int j = 0; j < kPairs; ++j) {
        const int pair = warp + kMmaWarps * j;
        if (pair * 16 >= hd) continue;
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          const int d = pair * 16 + 8 * n + 2 * tq;
          const float x0 = empty ? 0.0f : __fdiv_rn(run_o[j][n][2 * half], run_l[half]);
          const float x1 = empty ? 0.0f : __fdiv_rn(run_o[j][n][2 * half + 1], run_l[half]);
          *reinterpret_cast<float2*>(out + d) = make_float2(x0, x1);
        }
      }
    }
  } else {
    // The last block of the token's tile and column group merges the
    // group's columns of its rows, unless the merge runs apart.
    if (ma.arrivals == nullptr) return;
    if (!last_split_block(ma.arrivals, blockIdx.x, n_splits, sm.flag)) return;
    if (tid < nrows) sm.red_sum[tid] = merge_steps_in_place(ma.part, out_row(tid), n_splits, cg);
    __syncthreads();
    for (int i = tid; i < nrows * W; i += kMmaThreads) {
      const int r = i / W, d = c0 + i % W;
      a.out[out_row(r) * hd + d] = merged_output_by_steps(ma.part, out_row(r), n_splits, hd, d, cg, sm.red_sum[r]);
    }
  }
}

template <int kPairs, bool kInline>
void launch_mma(const KvLayout& L, KvBlocks blocks, const AttentionArgs& args, const MmaArgs& ma, dim3 grid,
                cudaStream_t stream) {
  const std::size_t smem = std::size_t(mma_smem_bytes(L.head_dim, L.head_dim / (kInline ? 1 : ma.part.groups)));
  auto kernel = attention_mma_kernel<kPairs, kInline>;
  if (smem > 48 * 1024) cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  kernel<<<grid, kMmaThreads, smem, stream>>>(L, blocks, args, ma);
}

template <bool kInline>
void launch_mma_for(const KvLayout& L, KvBlocks blocks, const AttentionArgs& args, const MmaArgs& ma, dim3 grid,
                    cudaStream_t stream) {
  const int W = L.head_dim / (kInline ? 1 : ma.part.groups);
  const int pairs = (W / 16 + kMmaWarps - 1) / kMmaWarps;
  if (pairs <= 1) launch_mma<1, kInline>(L, blocks, args, ma, grid, stream);
  else if (pairs <= 2) launch_mma<2, kInline>(L, blocks, args, ma, grid, stream);
  else if (pairs <= 4) launch_mma<4, kInline>(L, blocks, args, ma, grid, stream);
  else launch_mma<8, kInline>(L, blocks, args, ma, grid, stream);
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

bool attention_mma_supports(const KvLayout& L) {
  return L.codec == kBF16 && L.head_dim % 16 == 0 && L.head_dim <= 512 && L.block_size % 8 == 0 &&
         L.k_head_bytes % 16 == 0 && L.k_bytes % 16 == 0 && L.v_head_bytes % 16 == 0 && L.head_bytes % 16 == 0 &&
         L.block_bytes % 16 == 0;
}

std::size_t attention_mma_smem_bytes(const KvLayout& layout) {
  return std::size_t(mma_smem_bytes(layout.head_dim, layout.head_dim));
}

int64_t attention_mma_inline_blocks(const KvLayout& layout, int64_t T, int heads) {
  return layout.kv_heads * ceil_div(T * (heads / layout.kv_heads), kTileRows);
}

int64_t attention_mma_split_columns(const KvLayout& layout, int64_t T, int heads, int groups) {
  return T * layout.kv_heads * ceil_div(heads / layout.kv_heads, kTileRows) * groups;
}

int attention_mma_column_groups(const KvLayout& layout, int64_t T, int heads, int64_t most_splits, int64_t sms) {
  // More groups while the blocks still fit in one wave: each group stages
  // and scores the split's keys again, which costs nothing on SMs that would
  // idle but slows a launch that already fills the GPU (measured: batch 64
  // at 2 splits lost 50% with 4 groups). Each group keeps at least 64
  // columns (a pair for every warp) and a whole number of pairs.
  int groups = 1;
  while (attention_mma_split_columns(layout, T, heads, 2 * groups) * most_splits <= sms &&
         layout.head_dim % (2 * groups * 16) == 0 && layout.head_dim / (2 * groups) >= 16 * kMmaWarps)
    groups *= 2;
  return groups;
}

std::size_t attention_mma_scratch_floats(int64_t T, int heads, int head_dim, int splits, int groups) {
  return std::size_t(T) * heads * splits * (std::size_t(head_dim) + 2 * std::size_t(groups));
}

void attention_mma(const KvLayout& layout, KvBlocks blocks, const AttentionArgs& args, int splits, int groups,
                   float* scratch, int* arrivals, cudaStream_t stream) {
  if (args.T == 0) return;
  MmaArgs ma;
  const int G = args.heads / layout.kv_heads;
  if (scratch == nullptr) {
    ma.tiles = ceil_div(args.T * G, kTileRows);
    const dim3 grid(unsigned(attention_mma_inline_blocks(layout, args.T, args.heads)));
    launch_mma_for<true>(layout, blocks, args, ma, grid, stream);
    return;
  }
  ma.part.splits = splits;
  ma.part.groups = groups;
  ma.part.o = scratch;
  ma.part.ml = scratch + std::size_t(args.T) * args.heads * splits * layout.head_dim;
  const bool apart = merge_apart(splits);
  ma.arrivals = apart ? nullptr : arrivals;
  ma.tiles_per_token = int(ceil_div(G, kTileRows));
  const dim3 grid(unsigned(attention_mma_split_columns(layout, args.T, args.heads, groups)), unsigned(splits));
  launch_mma_for<false>(layout, blocks, args, ma, grid, stream);
  if (apart) attention_merge_partials(ma.part, args.lo, args.hi, args.T, args.heads, layout.head_dim, args.out, stream);
}

}  // namespace rowlm::cuda
