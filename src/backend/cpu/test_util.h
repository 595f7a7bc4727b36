#pragma once
// Helpers shared by the backend's unit tests (not part of the library).

#include <cstdint>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace rowlm::testing {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// A backend for every ISA this machine runs, with 1 and 2 threads.
struct BackendCase {
  cpu::Isa isa;
  int threads;
  std::unique_ptr<Backend> backend;
  std::string label() const { return std::string(cpu::isa_name(isa)) + "/" + std::to_string(threads) + "t"; }
};

inline std::vector<BackendCase> all_backends() {
  std::vector<BackendCase> out;
  for (cpu::Isa isa : cpu::supported_isas())
    for (int threads : {1, 2}) out.push_back({isa, threads, make_cpu_backend(threads, isa)});
  return out;
}

inline Tensor random_f32(Shape shape, std::mt19937& rng, float scale = 1.0f) {
  Tensor t(DType::F32, std::move(shape));
  std::normal_distribution<float> dist(0.0f, scale);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

// The same values stored as bf16 or f16 (rounded to nearest even).
inline Tensor narrowed(const Tensor& f, DType dtype) {
  Tensor t(dtype, f.shape());
  const float* src = f.data<float>();
  auto* dst = t.data<uint16_t>();
  for (int64_t i = 0; i < f.numel(); ++i) dst[i] = dtype == DType::BF16 ? f32_to_bf16(src[i]) : f32_to_f16(src[i]);
  return t;
}

// f32 values of a f32/bf16/f16 tensor.
inline std::vector<float> widened(const Tensor& t) {
  std::vector<float> out(std::size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype()) {
      case DType::BF16: out[i] = bf16_to_f32(t.data<uint16_t>()[i]); break;
      case DType::F16: out[i] = f16_to_f32(t.data<uint16_t>()[i]); break;
      default: out[i] = t.data<float>()[i]; break;
    }
  }
  return out;
}

// Host tensors of indices and values (the CPU backend's device is the host).
inline Tensor copy_of(const Tensor& t) {
  Tensor c(t.dtype(), t.shape());
  std::memcpy(c.raw(), t.raw(), t.nbytes());
  return c;
}
inline Tensor i32_tensor(const std::vector<int32_t>& v) {
  Tensor t(DType::I32, {int64_t(v.size())});
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}
inline Tensor f32_tensor(const std::vector<float>& v) {
  Tensor t(DType::F32, {int64_t(v.size())});
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

// Number of representable floats between a and b (0 when equal).
inline int64_t ulp_distance(float a, float b) {
  auto key = [](float f) {
    const int64_t u = float_bits(f);
    return u & 0x80000000 ? -(u & 0x7fffffff) : u;
  };
  const int64_t d = key(a) - key(b);
  return d < 0 ? -d : d;
}

// The canonical order, written as plainly as possible: lane j = k mod 16
// accumulates x·w with FMA in increasing k over a zero-padded K; then lanes
// j and j+8, j and j+4, j and j+2, j and j+1 are added.
inline float canonical_dot(const float* x, const float* w, int64_t K) {
  float lane[16] = {};
  const int64_t padded = (K + 15) / 16 * 16;
  for (int64_t k = 0; k < padded; ++k) {
    const float xv = k < K ? x[k] : 0.0f, wv = k < K ? w[k] : 0.0f;
    lane[k % 16] = std::fma(xv, wv, lane[k % 16]);
  }
  for (int width = 8; width >= 1; width /= 2)
    for (int j = 0; j < width; ++j) lane[j] = lane[j] + lane[j + width];
  return lane[0];
}

inline std::vector<float> oracle_matmul(const Tensor& x, const std::vector<float>& w, int64_t N) {
  const int64_t M = x.dim(0), K = x.dim(1);
  std::vector<float> y(std::size_t(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) y[m * N + n] = canonical_dot(x.data<float>() + m * K, w.data() + n * K, K);
  return y;
}

inline void expect_bitwise(const Tensor& y, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(y.numel(), int64_t(want.size())) << what;
  int64_t mismatches = 0;
  for (int64_t i = 0; i < y.numel(); ++i) {
    if (float_bits(y.data<float>()[i]) != float_bits(want[i])) {
      if (++mismatches <= 3)
        ADD_FAILURE() << what << ": element " << i << " is " << y.data<float>()[i] << ", canonical " << want[i];
    }
  }
  EXPECT_EQ(mismatches, 0) << what;
}

}  // namespace rowlm::testing
