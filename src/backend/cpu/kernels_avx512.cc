// AVX-512 kernels (the vector type is in kernels_avx512.h).

#include "backend/cpu/int8_matmul.h"
#include "backend/cpu/kernels_avx512.h"

namespace rowlm::cpu {
namespace {

uint64_t stream_read(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  std::size_t i = 0;
  for (; i + 256 <= bytes; i += 256) {
    a0 = _mm512_xor_si512(a0, _mm512_load_si512(p + i));
    a1 = _mm512_xor_si512(a1, _mm512_load_si512(p + i + 64));
    a2 = _mm512_xor_si512(a2, _mm512_load_si512(p + i + 128));
    a3 = _mm512_xor_si512(a3, _mm512_load_si512(p + i + 192));
  }
  for (; i < bytes; i += 64) a0 = _mm512_xor_si512(a0, _mm512_load_si512(p + i));
  const __m512i a = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, a);
  uint64_t out = 0;
  for (uint64_t v : lanes) out ^= v;
  return out;
}

double fma_chains(int64_t iters, float* sink) {
  // 16 independent chains: more than FMA latency x throughput on current cores.
  __m512 acc[16];
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_set1_ps(float(j));
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(0.5f);
  for (int64_t i = 0; i < iters; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) acc[j] = _mm512_fmadd_ps(acc[j], m, c);
  __m512 s = acc[0];
  for (int j = 1; j < 16; ++j) s = _mm512_add_ps(s, acc[j]);
  *sink = _mm512_reduce_add_ps(s);
  return double(iters) * 16 * 16 * 2;
}

}  // namespace

const Kernels& avx512_kernels_emulating_bf16() {
  static const Kernels k = make_kernels<VAvx512>(Isa::Avx512, &stream_read, &fma_chains, attention_avx512);
  return k;
}

const Kernels& avx512_kernels() {
  static const Kernels k = [] {
    Kernels t = avx512_kernels_emulating_bf16();
    if (__builtin_cpu_supports("avx512bf16")) set_native_bf16(t);
    if (__builtin_cpu_supports("avx512vnni")) set_int8_vnni(t);
    return t;
  }();
  return k;
}

}  // namespace rowlm::cpu
