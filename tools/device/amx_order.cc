// Which order AMX's TDPBF16PS sums in, read off the hardware: C = A·B for
// random bf16 A [16, K] and B [K, 16] (K = 32 per instruction, several
// instructions chained into one accumulator tile), each output compared
// bitwise with f32 emulations (FMA, under FTZ/DAZ as AMX-BF16 rounds):
//   serial_even_odd  acc += a[2i]·b[2i], then acc += a[2i+1]·b[2i+1], i in order
//   serial_odd_even  the pair's odd product first
//   pair_then_add    acc += (a[2i]·b[2i] + a[2i+1]·b[2i+1]), the pair rounded once
//   split_per_instr  the SDM's current pseudocode as read: per instruction (16
//                    pairs) the even and the odd products summed apart from zero,
//                    then acc += (even + odd)
//   split_acc_first  the same, then (acc + even) + odd
// A kernel that reproduces AMX's bits for one row of x (decode) has to be the
// emulation that matches every output. Prints one JSON object; exits 2 where
// the CPU or the kernel does not grant AMX tiles.
//   g++ -O2 -std=c++20 -mamx-tile -mamx-bf16 -mavx512f tools/device/amx_order.cc -o amx_order && ./amx_order
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace {

constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

float bf16_to_f32(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_bf16(float f) {  // round to nearest even; inputs here are finite
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace

int main() {
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
    std::printf("{\"amx\": false, \"why\": \"arch_prctl(ARCH_REQ_XCOMP_PERM) refused\"}\n");
    return 2;
  }
  constexpr int M = 16, N = 16, kPerTile = 32;
  std::mt19937 rng(7);
  // Magnitudes spread over 2^-8..2^8 so that the order of the adds shows.
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-8, 8);
  auto draw = [&] { return f32_to_bf16(std::ldexp(normal(rng), exponent(rng))); };
  long long outputs = 0, even_odd = 0, odd_even = 0, pair_add = 0, split = 0, split_acc = 0;
  for (int K : {32, 64, 256, 2048}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<uint16_t> a(std::size_t(M) * K), b(std::size_t(K) * N);
      for (auto& v : a) v = draw();
      for (auto& v : b) v = draw();
      // B in AMX's pair layout: row i holds (b[2i][n], b[2i+1][n]) for n in order.
      std::vector<uint16_t> packed(std::size_t(K) * N);
      for (int i = 0; i < K / 2; ++i)
        for (int n = 0; n < N; ++n) {
          packed[std::size_t(i) * 2 * N + 2 * n] = b[std::size_t(2 * i) * N + n];
          packed[std::size_t(i) * 2 * N + 2 * n + 1] = b[std::size_t(2 * i + 1) * N + n];
        }
      TileConfig cfg;
      cfg.rows[0] = M, cfg.colsb[0] = N * 4;             // C, f32
      cfg.rows[1] = M, cfg.colsb[1] = kPerTile * 2;      // A, 32 bf16 a row
      cfg.rows[2] = kPerTile / 2, cfg.colsb[2] = N * 4;  // B, 16 pairs of 16 columns
      _tile_loadconfig(&cfg);
      std::vector<float> c(std::size_t(M) * N, 0.0f);
      _tile_loadd(0, c.data(), N * 4);
      for (int k0 = 0; k0 < K; k0 += kPerTile) {
        _tile_loadd(1, a.data() + k0, K * 2);
        _tile_loadd(2, packed.data() + std::size_t(k0 / 2) * 2 * N, N * 4);
        _tile_dpbf16ps(0, 1, 2);
      }
      _tile_stored(0, c.data(), N * 4);
      _tile_release();
      const unsigned saved = _mm_getcsr();
      _mm_setcsr(saved | 0x8040);  // FTZ and DAZ
      for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n) {
          volatile float eo = 0.0f, oe = 0.0f, pa = 0.0f, sp = 0.0f, sa = 0.0f;
          for (int i0 = 0; i0 < K / 2; i0 += kPerTile / 2) {
            float even = 0.0f, odd = 0.0f;
            for (int i = i0; i < i0 + kPerTile / 2; ++i) {
              even = std::fma(bf16_to_f32(a[std::size_t(m) * K + 2 * i]), bf16_to_f32(b[std::size_t(2 * i) * N + n]), even);
              odd = std::fma(bf16_to_f32(a[std::size_t(m) * K + 2 * i + 1]),
                             bf16_to_f32(b[std::size_t(2 * i + 1) * N + n]), odd);
            }
            sp = sp + (even + odd);
            sa = (sa + even) + odd;
          }
          for (int i = 0; i < K / 2; ++i) {
            const float a0 = bf16_to_f32(a[std::size_t(m) * K + 2 * i]), a1 = bf16_to_f32(a[std::size_t(m) * K + 2 * i + 1]);
            const float b0 = bf16_to_f32(b[std::size_t(2 * i) * N + n]), b1 = bf16_to_f32(b[std::size_t(2 * i + 1) * N + n]);
            eo = std::fma(a1, b1, std::fma(a0, b0, eo));
            oe = std::fma(a0, b0, std::fma(a1, b1, oe));
            pa = pa + std::fma(a1, b1, a0 * b0);
          }
          const uint32_t got = bits(c[std::size_t(m) * N + n]);
          ++outputs;
          even_odd += bits(eo) == got;
          odd_even += bits(oe) == got;
          pair_add += bits(pa) == got;
          split += bits(sp) == got;
          split_acc += bits(sa) == got;
        }
      _mm_setcsr(saved);
    }
  }
  std::printf("{\"amx\": true, \"outputs\": %lld, \"equal\": {\"serial_even_odd\": %lld, \"serial_odd_even\": %lld, "
              "\"pair_then_add\": %lld, \"split_per_instr\": %lld, \"split_acc_first\": %lld}}\n",
              outputs, even_odd, odd_even, pair_add, split, split_acc);
  return 0;
}
