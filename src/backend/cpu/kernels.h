#pragma once
// The per-ISA kernel table. Each ISA translation unit (kernels_scalar.cc,
// kernels_avx2.cc, kernels_avx512.cc) instantiates the same algorithms from
// kernel_algorithms.h with its own 16-lane vector type, so every entry
// computes bitwise the same result on every ISA. The backend (cpu_backend.cc)
// validates arguments and splits work across threads; these functions trust
// their arguments.
//
// Canonical reduction order (matmul, sum of squares): 16 lanes; lane j
// accumulates with FMA the products for k ≡ j (mod 16) in increasing k, the
// K tail zero-padded; then lanes j and j+8 are added, then j and j+4, j+2,
// j+1.

#include <cstddef>
#include <cstdint>

#include "backend/cpu/attention_kernel_types.h"
#include "core/dtype.h"
#include "core/isa.h"

namespace rowlm::cpu {

// Rows of a weight matrix: row r starts at element r * ld of `data`.
struct WeightRows {
  DType dtype = DType::F32;  // F32, BF16 or F16
  const void* data = nullptr;
  int64_t ld = 0;
};

// Rows of an affine-quantized weight (quant/affine.h, backend/weight.h):
// row r's codes start at word r * code_ld of `codes`, its scales and biases
// at entry r * param_ld of `scales` and `biases` (param_dtype F32, BF16 or
// F16). bits 2, 3, 4, 5, 6 or 8; group_size a multiple of 16 dividing K.
// 4-bit codes are in the backend's Halves32 order (backend/weight.h), the
// others in stream order.
struct AffineRows {
  const uint32_t* codes = nullptr;
  int64_t code_ld = 0;
  const void* scales = nullptr;
  const void* biases = nullptr;
  int64_t param_ld = 0;
  DType param_dtype = DType::BF16;
  int bits = 4;
  int group_size = 64;
  // With biases == nullptr each group's bias is scale · bias_per_scale
  // (Weight::implied_zero: −2^(bits−1), so the product is exact).
  float bias_per_scale = 0.0f;
};

// What scan_blocks finds in a block of a row: its largest value (NaN aside;
// −inf for a block of NaN and −inf only), whether it holds NaN or +inf, and
// whether any entry is finite.
struct RowScan {
  float max;
  bool bad;
  bool any_finite;
};

struct Kernels {
  Isa isa = Isa::Scalar;
  int mr = 1;  // rows of x per matmul tile

  // y[m*ldy + n] = Σ_k x[m*ldx + k] · w[n][k] for m < M, n < N, in the
  // canonical order. Row groups of mr rows of x run one after another, each
  // against all N rows of w in tiles of up to 12 rows, bf16/f16 widened in
  // registers as they are read.
  void (*dot_block)(const float* x, int64_t ldx, int64_t M, const WeightRows& w, int64_t N,
                    int64_t K, float* y, int64_t ldy);

  // The bf16-dot matmul: the same as dot_block with x and w both bf16 rows,
  // in the canonical pair order (kernel_algorithms.h, PairStep).
  void (*dot_block_bf16)(const uint16_t* x, int64_t ldx, int64_t M, const uint16_t* w, int64_t ldw,
                         int64_t N, int64_t K, float* y, int64_t ldy);
  // Whether dot_block_bf16 runs VDPBF16PS natively rather than emulating it
  // (bitwise the same either way; only the speed differs).
  bool native_bf16 = false;

  // The affine matmul for few rows of x (M <= mr is what the driver sends):
  // y as dot_block would compute it against the dequantized rows of w, each
  // 16-element step of a weight row dequantized in registers as
  // scale·code + bias (two roundings, as quant::dequantize) and used by all
  // M rows of x. Bitwise dot_block on dequantize_affine's output.
  void (*dot_block_affine)(const float* x, int64_t ldx, int64_t M, const AffineRows& w, int64_t N, int64_t K,
                           float* y, int64_t ldy);
  // out[r·ldo + k] = scale·code + bias of rows [0, rows) of w, K columns:
  // quant::dequantize's values, for the batched matmul (dequantized once per
  // tile, then met by every row of x) and the embedding lookup.
  void (*dequantize_affine)(const AffineRows& w, int64_t rows, int64_t K, float* out, int64_t ldo);

  // MatmulPrecision::Int8 (int8_matmul.h, which states the order): one row
  // of K values of x quantized into out (int8_x_row_bytes(K, unit) bytes),
  // and y[m·ldy + n] for M such rows (ldxq bytes apart) against N rows of
  // an int8_supported w, with `scratch` int8_scratch_floats(K, unit, M) floats
  // of the caller's. Bitwise the same on every ISA; the scalar and AVX2
  // tables run the portable statement, the AVX-512 table VPDPBUSD where the
  // CPU has AVX512-VNNI (native_int8).
  void (*quantize_int8)(const float* x, int64_t K, int unit, uint8_t* out);
  void (*dot_rows_int8)(const uint8_t* xq, int64_t ldxq, int64_t M, const AffineRows& w, int64_t N, int64_t K,
                        float* y, int64_t ldy, float* scratch);
  bool native_int8 = false;
  // The int8 ceiling probe (independent VPDPBUSD chains; returns their
  // multiply-adds times 2): only where native_int8.
  double (*int8_dot_chains)(int64_t iters, float* sink) = nullptr;

  // out[i] = float(src[i]) · scale.
  void (*convert_scale)(DType dtype, const void* src, int64_t n, float scale, float* out);
  // Σ x[i]² in the canonical order (each term an FMA).
  float (*sum_squares)(const float* x, int64_t n);
  // y[i] = (x[i] · inv) · g[i], g = w (w_plus_one false), 1 + w (true), or
  // y[i] = x[i] · inv when w is null.
  void (*norm_apply)(const float* x, const float* w, bool w_plus_one, int64_t n, float inv,
                     float* y);
  // Rotate-half RoPE of one head in place: for i < half,
  // (a, b) = (x[i], x[i + half]) → (a·c − b·s, b·c + a·s) with c = cos[i], s = sin[i].
  void (*rope_head)(float* x, const float* cos, const float* sin, int64_t half);
  // out[i] = gelu_tanh(gate[i]) · up[i] (PyTorch's approximate="tanh" formula).
  void (*gelu_tanh_mul)(const float* gate, const float* up, int64_t n, float* out);
  // out[i] = silu(gate[i]) · up[i], silu(x) = x · sigmoid(x) (PyTorch's
  // F.silu, within a few ulp).
  void (*silu_mul)(const float* gate, const float* up, int64_t n, float* out);
  void (*add)(float* y, const float* x, int64_t n);            // y += x
  void (*scale)(float* y, float s, int64_t n);                 // y *= s
  void (*softcap)(float* y, float cap, int64_t n);             // y = cap · tanh(y / cap)
  void (*add_scaled)(float* y, float a, const float* x, int64_t n);  // y += (a · x), two roundings
  void (*tanh)(const float* x, int64_t n, float* out);         // the tanh the others use

  // The sampler's passes over a logits row (sampling/logits_processor.cc),
  // here for the vector loads and the exp every ISA computes bitwise alike.
  //
  // scan_blocks: out[b] for each block of `block` entries (a multiple of 16;
  // the last may be short).
  void (*scan_blocks)(const float* x, int64_t n, int64_t block, RowScan* out);
  // The first i with x[i] > t, or n.
  int64_t (*first_above)(const float* x, int64_t n, float t);
  // x[i] = (x[i] − shift) / divisor (the two roundings).
  void (*shift_divide)(float* x, int64_t n, float shift, float divisor);
  // x[i] = −inf where x[i] < t.
  void (*remove_below)(float* x, int64_t n, float t);
  // exp_blocks: out[i] = exp(x[i] − shift) for x[i] <= shift, shift finite
  // (exp_neg's value; 0 where x[i] − shift < −87, −inf included), and for
  // each block of `block` entries (a multiple of 16; the last may be short)
  // the sum of its values in the canonical order: 16 lanes (entry i in lane
  // i mod 16), then the reduce tree. out may be null (the sums only).
  void (*exp_blocks)(const float* x, int64_t n, float shift, int64_t block, float* out, float* block_sums);

  // The attention kernel (attention_kernel.inl) compiled for this ISA: the
  // whole CPU backend picks its instruction set once, through this table.
  AttentionKernels attention;

  // Ceiling probes (ceilings.h): read `bytes` (a multiple of 64, 64-byte
  // aligned) with vector loads; run `iters` rounds of independent FMA
  // chains, returning their flop count. Both return values only to keep the
  // work observable.
  uint64_t (*stream_read)(const void* data, std::size_t bytes);
  double (*fma_chains)(int64_t iters, float* sink);
  // The bf16-dot ceiling: independent dot_pairs chains; returns their flops.
  double (*bf16_dot_chains)(int64_t iters, float* sink);
};

const Kernels& scalar_kernels();
const Kernels& avx2_kernels();
// With VDPBF16PS where the CPU has AVX512-BF16.
const Kernels& avx512_kernels();
// Always emulating VDPBF16PS: to test the emulation on CPUs that have it.
const Kernels& avx512_kernels_emulating_bf16();
// The native bf16 pieces of the AVX-512 table (kernels_avx512bf16.cc); run
// them only where the CPU has AVX512-BF16.
void set_native_bf16(Kernels& k);
// The table for `isa`; an Error if this CPU cannot run it.
const Kernels& kernels_for(Isa isa);

}  // namespace rowlm::cpu
