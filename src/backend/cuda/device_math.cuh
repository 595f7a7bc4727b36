#pragma once
// Scalar arithmetic the CUDA kernels share with the CPU backend, written out
// operation by operation so that both compute the same bits: the bf16/f16
// conversions of core/dtype.h, the exp/tanh/gelu/silu of
// backend/cpu/kernel_algorithms.h, the attention kernel's exp
// (backend/cpu/attention_kernel.inl) and MLX's affine group quantization
// (quant/affine.cc). The CUDA backend is compiled with --fmad=false, so a
// multiply followed by an add stays two roundings, as on the CPU
// (-ffp-contract=off); a fused multiply-add is written as fmaf where the CPU
// writes V::fma.

#include <cuda_runtime.h>

#include <cstdint>

namespace rowlm::cuda {

// Programmatic dependent launch (Hopper and later; no-ops before). A kernel
// launched with it (the GEMM) may start while the kernel before it runs:
// what it reads that no earlier kernel writes (weights) it may load at once;
// wait_for_producers() then waits until every earlier kernel has finished
// and its writes are visible, before anything else is read or written.
// allow_dependents() lets such a kernel launch now rather than when this one
// ends; every kernel may call it at any point, since the dependent waits
// anyway.
__device__ __forceinline__ void wait_for_producers() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::);
#endif
}

__device__ __forceinline__ float bits_to_float(uint32_t u) { return __uint_as_float(u); }

// The canonical 16-lane tree of a half-warp's accumulators (lane 0 gets it):
// (j, j+8), then (j, j+4), (j, j+2), (j, j+1), each an IEEE add (the CPU
// kernels' V::reduce).
__device__ __forceinline__ float half_warp_tree(float acc, unsigned mask) {
  acc = acc + __shfl_down_sync(mask, acc, 8, 16);
  acc = acc + __shfl_down_sync(mask, acc, 4, 16);
  acc = acc + __shfl_down_sync(mask, acc, 2, 16);
  acc = acc + __shfl_down_sync(mask, acc, 1, 16);
  return acc;
}

__device__ __forceinline__ unsigned half_warp_mask() { return 0xffffu << (threadIdx.x & 16); }
__device__ __forceinline__ uint32_t float_to_bits(float f) { return __float_as_uint(f); }

__device__ __forceinline__ float bf16_to_f32(uint16_t h) { return bits_to_float(uint32_t(h) << 16); }

// Round to nearest even; NaN stays a quiet NaN (core/dtype.h).
__device__ __forceinline__ uint16_t f32_to_bf16(float f) {
  uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// Exact binary16 -> binary32.
__device__ __forceinline__ float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;
  uint32_t normal = (em << 13) + ((127u - 15u) << 23);
  if (em >= 0x7c00u) normal += (128u - 16u) << 23;
  const float sub = float(int(em)) * 5.9604644775390625e-08f;  // em · 2^-24, exact
  const uint32_t mag = em < 0x0400u ? float_to_bits(sub) : normal;
  return bits_to_float(mag | sign);
}

// Round to nearest even, as rowlm::f32_to_f16.
__device__ __forceinline__ uint16_t f32_to_f16(float f) {
  const uint32_t u = float_to_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);
  if (abs < 0x38800000u) {
    const int shift = 126 - int(abs >> 23);
    if (shift > 24) return uint16_t(sign);
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return uint16_t(sign | q);
  }
  uint32_t r = abs - 0x38000000u;
  r += 0xfffu + ((r >> 13) & 1u);
  return uint16_t(sign | (r >> 13));
}

// VDPBF16PS's reads and writes (backend/cpu/kernels_scalar.cc): denormal
// inputs as signed zero, results below the normal range flushed.
__device__ __forceinline__ float bf16_daz(uint16_t h) {
  return (h & 0x7f80u) == 0 ? copysignf(0.0f, bf16_to_f32(h)) : bf16_to_f32(h);
}
__device__ __forceinline__ float ftz(float f) { return fabsf(f) < 0x1p-126f ? copysignf(0.0f, f) : f; }

// kernel_algorithms.h exp_reduced: y = n·ln2 + r, degree-7 Taylor, exact 2^n.
__device__ __forceinline__ float exp_reduced(float y) {
  const float n = rintf(y * 1.44269504088896341f);
  float r = fmaf(n, -0.693145751953125f, y);
  r = fmaf(n, -1.42860682030941723212e-6f, r);
  float p = 1.0f / 5040.0f;
  p = fmaf(p, r, 1.0f / 720.0f);
  p = fmaf(p, r, 1.0f / 120.0f);
  p = fmaf(p, r, 1.0f / 24.0f);
  p = fmaf(p, r, 1.0f / 6.0f);
  p = fmaf(p, r, 0.5f);
  p = fmaf(p, r, 1.0f);
  p = fmaf(p, r, 1.0f);
  return ldexpf(p, int(n));
}

__device__ __forceinline__ float exp_neg(float y) { return exp_reduced(y < -87.0f ? -87.0f : y); }

// kernel_algorithms.h tanh_v.
__device__ __forceinline__ float tanh_poly(float x) {
  const float a = fabsf(x);
  const float a2 = a * a;
  float p = float(6404582.0 / 10854718875.0);
  p = fmaf(p, a2, float(-929569.0 / 638512875.0));
  p = fmaf(p, a2, float(21844.0 / 6081075.0));
  p = fmaf(p, a2, float(-1382.0 / 155925.0));
  p = fmaf(p, a2, float(62.0 / 2835.0));
  p = fmaf(p, a2, float(-17.0 / 315.0));
  p = fmaf(p, a2, float(2.0 / 15.0));
  p = fmaf(p, a2, float(-1.0 / 3.0));
  const float small = fmaf(a * a2, p, a);
  const float ac = a < 10.0f ? a : 10.0f;  // MINPS: NaN becomes 10; restored below
  const float e = exp_reduced(ac + ac);
  const float large = 1.0f - 2.0f / (e + 1.0f);
  const float t = copysignf(a < 0.5f ? small : large, x);
  return isnan(x) ? x : t;
}

__device__ __forceinline__ float gelu_tanh(float x) {
  const float beta = float(1.41421356237309504880 * 1.12837916709551257390 * 0.5);
  const float x3 = (x * x) * x;
  const float inner = beta * (x + 0.044715f * x3);
  return (0.5f * x) * (1.0f + tanh_poly(inner));
}

__device__ __forceinline__ float silu(float x) {
  const float e = exp_neg(0.0f - fabsf(x));
  const float d = 1.0f + e;
  const float sig = x < 0.0f ? e / d : 1.0f / d;
  return isnan(x) ? x : x * sig;
}

// attention_kernel.inl vexp: x <= 0, Cody-Waite reduction, Cephes' degree-6
// polynomial; 0 below -87.3.
__device__ __forceinline__ float attention_exp(float x) {
  const float lo = -87.3365447f, hi = 88.3762626f;
  float xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  const float magic = 12582912.0f;
  float n = xc * 1.44269504088896341f + magic;
  n = n - magic;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * (r * r) + r;
  y = y + 1.0f;
  const int e = int(n) + 127;
  y = y * bits_to_float(uint32_t(e) << 23);
  return x < lo ? 0.0f : y;
}

// quant/affine.cc quantize_group, one group: codes (0..2^bits-1) and the
// scale and bias (before their rounding to bf16).
__device__ __forceinline__ uint8_t to_code(float v, float n) {
  v = rintf(v);
  if (!(v > 0.0f)) return 0;
  return uint8_t(v < n ? v : n);
}

struct GroupParams {
  float scale, bias;
};

__device__ __forceinline__ GroupParams quantize_group(const float* x, int group_size, int bits, uint8_t* codes) {
  const float n = float((1 << bits) - 1);
  float w_min = __int_as_float(0x7f800000), w_max = -__int_as_float(0x7f800000);
  for (int j = 0; j < group_size; ++j) {
    w_max = w_max < x[j] ? x[j] : w_max;
    w_min = x[j] < w_min ? x[j] : w_min;
  }
  const bool negative_edge = fabsf(w_min) > fabsf(w_max);
  float scale = (w_max - w_min) / n;
  scale = scale < 1e-7f ? 1e-7f : scale;
  if (!negative_edge) scale = -scale;
  const float edge = negative_edge ? w_min : w_max;
  const float q0 = rintf(edge / scale);
  float bias = 0.0f;
  if (q0 != 0.0f) {
    scale = edge / q0;
    bias = edge;
  }
  for (int j = 0; j < group_size; ++j) codes[j] = to_code((x[j] - bias) / scale, n);
  return {scale, bias};
}

}  // namespace rowlm::cuda
