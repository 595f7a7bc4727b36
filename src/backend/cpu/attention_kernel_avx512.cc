// The attention kernel compiled for the avx512 instruction set.
#include <math.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend/cpu/attention_kernel_types.h"

namespace rowlm::cpu {
namespace avx512_kernel {
#include "backend/cpu/attention_kernel.inl"
}  // namespace avx512_kernel

void attend_avx512(const AttentionLayer& layer, const AttentionWork& work, float* scratch) {
  avx512_kernel::run_kernel(layer, work, scratch);
}

}  // namespace rowlm::cpu
