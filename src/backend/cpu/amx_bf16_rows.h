#pragma once
// AMX's order (amx_bf16.h) on the AVX-512 vector units, for a few rows of x:
// what decode runs on AMX hosts under --matmul-precision bf16. The tiles take
// 16 rows of x per pass whatever M is, and stream a lone row's weights at
// 77% of the read bandwidth (docs/perf.md); this kernel streams them with
// ordinary loads and gives the tiles' bits, so M alone picks the unit.
//
// The order, as the tiles run it: K in blocks of 32 elements, zero-padded
// at the end; within a block the 16 even elements' products are summed from
// zero in increasing k with one rounding each (FMA), the 16 odd elements'
// likewise, and the output becomes acc + (even + odd); denormal inputs and
// results read and are written as zero.
//
// How: 16 rows of w go together, one output per lane. At each step the
// rows' 64-byte blocks are loaded and their 16 x 16 bf16 pairs transposed,
// so that vector i holds pair i of the 16 rows (row r in lane r); lane r
// then runs output r's two chains with x's element broadcast, and adds
// their sum to its own. MXCSR's FTZ and DAZ are set for the call and
// restored after it, so the FMAs flush as the tiles do (which flush
// whatever MXCSR says).
//
// Where the rows' stride is a multiple of 4 KB (K = 2048, 6144, 12288,
// ...), a step's 16 blocks would fall in one L1 set and overflow its ways:
// one Zen 4 core read such weights from L2 at 41-42 GB/s against 54-57
// with what follows. There the odd rows run kAmxRowsLag blocks behind the
// even ones (step j: even rows block j, odd rows block j - lag), which
// puts them in sets farther apart than the hardware prefetches ahead (a
// lag of 1 block still lost 8% from DRAM at K = 12288); x's pairs carry
// the two blocks' elements to the two kinds of lane.
//
// Each output is one lane's chains in one call, each block added once and
// in order: its bits do not depend on M, on the other rows of x or w, on
// the lag, or on how a caller splits N or M among threads.
// cpu_matmul_amx_test.cc holds it to the scalar oracle the tiles are held to.

#include <cstdint>

namespace rowlm::cpu {

// Rows of x per call at most: the transposed block takes 16 of the 32 zmm
// registers and each row three more (its sum and its even and odd chains).
inline constexpr int64_t kAmxRowsMax = 4;

// The odd rows' lag, in blocks, for w of row stride ldw: kAmxRowsLag where
// 2·ldw bytes is a multiple of 4 KB, else 0. (The lag costs 2·lag steps
// per 16 rows with half the lanes idle: at K = 1024, whose 2 KB rows fill
// two sets' ways but not more, it lost 18% in L2.)
inline constexpr int64_t kAmxRowsLag = 4;
int64_t amx_rows_lag(int64_t ldw);

// x for the kernel, one row of K f32 values at a time: rounded to bf16 as
// amx_pack_x rounds it and widened back to f32, in steps of 32 pairs of
// floats, step j (0 to amx_blocks(K) + lag - 1) holding
// (x[32j + e], x[32(j - lag) + e]) for e < 32 (the even rows' block and the
// odd rows'), zero outside [0, K).
inline constexpr int64_t kAmxRowsStepFloats = 64;
int64_t amx_rows_x_stride(int64_t K, int64_t lag);  // floats per packed row
void amx_rows_pack_x(const float* x, int64_t K, int64_t lag, float* packed);

// y[m · ldy + n] for m < M (1 to kAmxRowsMax) and n < N, in AMX's order:
// x M rows packed with `lag` = amx_rows_lag(ldw), of stride
// amx_rows_x_stride(K, lag); w N bf16 rows of stride ldw, of which K
// elements are read. Runs on AVX-512 (isa_supported(Isa::Avx512)) on the
// calling thread only.
void amx_bf16_rows(const float* x, int64_t M, int64_t K, int64_t lag, const uint16_t* w, int64_t ldw, int64_t N,
                   float* y, int64_t ldy);

}  // namespace rowlm::cpu
