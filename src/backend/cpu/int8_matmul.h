#pragma once
// The affine matmul with 8-bit activations (MatmulPrecision::Int8): x is
// quantized to signed 8-bit codes per 32 elements and multiplied with the
// weight's 4- or 8-bit codes in exact integer sums, as llama.cpp multiplies
// its quantized weights with Q8 activations. Integer sums are exact in any
// order, so only the float epilogue below fixes the bits; every ISA path
// computes it the same way, and each output depends on its own row of x and
// row of w alone (not on M, N, the chunking or the threads).
//
// x, per row, in blocks of 32 elements (the row's last block may hold 16):
//   amax = max |x_k|; a block with a NaN or an infinity gets codes 0 and
//   dx = NaN (its outputs become NaN, as they would in f32); a block with
//   amax < 2^-96 gets codes 0 and dx = 0; otherwise
//   dx = amax / 127, id = 127 / amax, q_k = nearbyint(x_k · id) (to nearest
//   even; |q_k| <= 127).
// w: a unit is U consecutive elements, U = 32 for 4-bit codes (Halves32
// order, group sizes multiples of 32) and 16 for 8-bit codes (group sizes
// multiples of 16); a unit lies in one x block and one weight group, whose
// scale and bias (or scale · bias_per_scale) are S and B. Per unit u of
// row n of w and row m of x, with isum = Σ w_code · q_k (exact) and
// xs = Σ q_k (exact) over the unit:
//   v_u = fma(S, float(isum) · dx, B · (float(xs) · dx))
// (each product rounded once, then the fused multiply-add). The units are
// added in four lanes: lane L (0-3) starts at +0 and adds v_u for u = L,
// L + 4, L + 8, ... in increasing u, the units past the row's end (up to a
// multiple of 4) adding +0; y[m, n] = (lane0 + lane1) + (lane2 + lane3).
//
// This is a different result from the f32 matmul (x loses about 2^-8 of its
// block's range per element): a precision a user asks for by name, for
// quantized weights' speed on CPUs with integer dot products (AVX512-VNNI:
// one VPDPBUSD does 64 multiply-adds where an FMA does 16).

#include <cstdint>

#include "backend/cpu/kernels.h"

namespace rowlm::cpu {

// Whether w (AffineRows of K columns) runs in this precision: 4-bit codes
// in Halves32 order, or 8-bit codes; K and the group size multiples of U,
// and a group U, 2U, 4U, 8U or a multiple of 16U long (every format rowlm
// reads: groups of 16 to 128). Other affine weights keep the f32 path
// under the precision.
bool int8_supported(const AffineRows& w, int64_t K);

// Blocks of x whose amax is below this quantize to 0 (dx = 0): 127 / amax
// then stays finite and dx normal.
inline constexpr float kInt8TinyAmax = 0x1p-96f;

// U for w's code width: 32 for 4-bit codes, 16 for 8-bit.
int int8_unit(int bits);

// A quantized row of x, for weights of unit U, is steps = ceil(K / (4·U))
// steps of 4 units, each 4·U + 128 bytes. Step s holds, in this order:
//   codes, 4·U bytes: for U = 16 units 4s .. 4s + 3 in order; for U = 32
//     first the low halves (elements 0-15) of the four units, then their
//     high halves (16-31), matching the Halves32 codes' low and high
//     nibbles;
//   dx, 16 floats: lane 4L + j holds unit 4s + L's dx (each four times);
//   xs·dx, 16 floats: the same lanes, float(xs) · dx.
// Units past K hold codes 0 and 0 in both float fields.
inline constexpr int64_t kInt8StepFloatBytes = 128;
int64_t int8_steps(int64_t K, int unit);
int64_t int8_x_row_bytes(int64_t K, int unit);  // a multiple of 64
// Rows of x from which the VNNI kernels unpack w once per call.
inline constexpr int64_t kInt8WideMinRows = 32;
// Scratch below that: four steps' parameters.
inline constexpr int64_t kInt8SmallScratchFloats = 128;
// Floats of scratch a dot_rows_int8 call of M rows needs (at least M: a
// call of fewer rows needs no more).
int64_t int8_scratch_floats(int64_t K, int unit, int64_t M);

// Entry i of scales or biases stored as t, widened to f32 (exactly). Out of
// line, so that the ISA files call the one definition.
float widened_param(const void* p, DType t, int64_t i);

// The portable statement of both kernels (kernels.h: quantize_int8,
// dot_rows_int8), which the scalar and AVX2 tables run.
void quantize_int8_portable(const float* x, int64_t K, int unit, uint8_t* out);
void dot_rows_int8_portable(const uint8_t* xq, int64_t ldxq, int64_t M, const AffineRows& w, int64_t N, int64_t K,
                            float* y, int64_t ldy, float* scratch);

// The AVX512-VNNI kernels (int8_matmul_avx512vnni.cc): put them into an
// AVX-512 table where the CPU has AVX512-VNNI.
void set_int8_vnni(Kernels& k);

}  // namespace rowlm::cpu
