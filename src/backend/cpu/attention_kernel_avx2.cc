// The attention kernel compiled for the avx2 instruction set.
#include <math.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend/cpu/attention_kernel_types.h"

namespace rowlm::cpu {
namespace avx2_kernel {
#include "backend/cpu/attention_kernel.inl"
}  // namespace avx2_kernel

void attend_avx2(const AttentionLayer& layer, const AttentionWork& work, float* scratch) {
  avx2_kernel::run_kernel(layer, work, scratch);
}

}  // namespace rowlm::cpu
