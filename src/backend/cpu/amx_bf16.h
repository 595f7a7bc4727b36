#pragma once
// The bf16-dot matmul on AMX tiles (TDPBF16PS), for --matmul-precision bf16
// on CPUs that have AMX-BF16 (Sapphire Rapids and later).
//
// AMX's order, which this path computes and which differs from the pair
// order of the other paths (kernel_algorithms.h, PairStep): K goes in blocks
// of 32 elements, zero-padded at the end; within a block the 16 even
// elements' products are summed from zero in increasing k, one rounding
// each (FMA), the 16 odd elements' likewise, and the output becomes
// acc + (even + odd); denormal inputs and results read and are written as
// zero. tools/device/amx_order.cc found this order in every one of 20,480
// outputs on an Emerald Rapids host, and cpu_matmul_amx_test.cc holds the
// kernel to it. Each output is computed whole by one tile's column, so a
// row's result does not depend on M, on the other rows or on the thread
// count: the path is batch invariant. It is not bitwise the other paths:
// under bf16 precision an AMX host and a host without AMX give different
// (each deterministic) bits.

#include <cstdint>

namespace rowlm::cpu {

// Whether this CPU has AMX-TILE and AMX-BF16 and the kernel lets this
// process use the tile state (asked once, on the first call, for the whole
// process).
bool amx_bf16_usable();

// Rows of x per tile and elements of K per block.
inline constexpr int64_t kAmxRows = 16;
inline constexpr int64_t kAmxBlock = 32;

// x rounded to bf16 in the layout of AMX's second operand: for tile t of 16
// rows and block b of 32 columns, 512 elements at (t · blocks + b) · 512,
// pair row i holding (x[m][32b + 2i], x[m][32b + 2i + 1]) for the tile's 16
// rows m in order; zero past M and K.
int64_t amx_blocks(int64_t K);
int64_t amx_packed_elements(int64_t M, int64_t K);
// Tiles [t0, t1) of the packing of x (M rows of K f32, rounded to nearest
// even as f32_to_bf16 does).
void amx_pack_x(const float* x, int64_t M, int64_t K, int64_t t0, int64_t t1, uint16_t* packed);

// y[m · ldy + n] for the rows m of x in tiles [t0, t1) (m < M) and n < N:
// packed x against N bf16 rows of w (row n at w + n · ldw), in AMX's order.
// `scratch` holds 16 · 32 · amx_blocks(K) elements (the last partial tile
// of w, zero-padded). Runs on AMX: only where amx_bf16_usable().
void amx_matmul_bf16(const uint16_t* packed, int64_t M, int64_t K, int64_t t0, int64_t t1, const uint16_t* w,
                     int64_t ldw, int64_t N, float* y, int64_t ldy, uint16_t* scratch);

// The tiles' ceiling: `iters` rounds of four independent TDPBF16PS;
// returns their flop count (2 per multiply-add). Only where usable.
double amx_bf16_chains(int64_t iters, float* sink);

}  // namespace rowlm::cpu
