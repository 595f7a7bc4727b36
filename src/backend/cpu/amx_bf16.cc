#include "backend/cpu/amx_bf16.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "core/dtype.h"

namespace rowlm::cpu {
namespace {

bool ask_for_amx() {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool amx_bf16 = (d >> 22) & 1u, amx_tile = (d >> 24) & 1u;
  if (!amx_bf16 || !amx_tile) return false;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1u)) return false;  // OSXSAVE
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if (((lo >> 17) & 3u) != 3u) return false;  // the OS saves XTILECFG and XTILEDATA
  // Linux hands out the 8 KB tile state on request (ARCH_REQ_XCOMP_PERM for
  // XFEATURE_XTILEDATA), for every thread of the process.
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

}  // namespace

bool amx_bf16_usable() {
  static const bool usable = ask_for_amx();
  return usable;
}

int64_t amx_blocks(int64_t K) { return (K + kAmxBlock - 1) / kAmxBlock; }

int64_t amx_packed_elements(int64_t M, int64_t K) {
  return (M + kAmxRows - 1) / kAmxRows * amx_blocks(K) * kAmxRows * kAmxBlock;
}

void amx_pack_x(const float* x, int64_t M, int64_t K, int64_t t0, int64_t t1, uint16_t* packed) {
  const int64_t blocks = amx_blocks(K), padded_k = blocks * kAmxBlock;
  // Row by row, so that x is read in order; element k of row r of a tile
  // goes to pair row (k mod 32) / 2 of block k / 32, slot 2r + k mod 2.
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t r = 0; r < kAmxRows; ++r) {
      const int64_t m = t * kAmxRows + r;
      uint16_t* tile = packed + t * blocks * kAmxRows * kAmxBlock + 2 * r;
      for (int64_t k = 0; k < padded_k; ++k) {
        const int64_t b = k / kAmxBlock, i = k % kAmxBlock / 2, e = k % 2;
        tile[b * kAmxRows * kAmxBlock + i * 2 * kAmxRows + e] =
            m < M && k < K ? f32_to_bf16(x[m * K + k]) : uint16_t(0);
      }
    }
}

}  // namespace rowlm::cpu
