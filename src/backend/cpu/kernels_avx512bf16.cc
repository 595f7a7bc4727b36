// The AVX-512 table's bf16-dot pieces on VDPBF16PS (AVX512-BF16): the
// instruction is the canonical pair step itself, so results equal the
// emulating paths bitwise while each instruction does 32 multiply-adds.

#include "backend/cpu/kernels_avx512.h"

namespace rowlm::cpu {
namespace {

struct VAvx512Bf16 : VAvx512 {
  static R dot_pairs(R acc, P a, P b) {
    return {_mm512_dpbf16_ps(acc.v, (__m512bh)a.v, (__m512bh)b.v)};
  }
};

}  // namespace

void set_native_bf16(Kernels& k) {
  k.dot_block_bf16 = &dot_block_bf16<VAvx512Bf16>;
  k.bf16_dot_chains = &bf16_dot_chains<VAvx512Bf16>;
  k.native_bf16 = true;
}

}  // namespace rowlm::cpu
