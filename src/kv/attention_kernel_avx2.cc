// The attention kernel compiled for the avx2 instruction set.
#include <math.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kv/attention_kernel_types.h"

namespace rowlm::kv::detail {
namespace avx2_kernel {
#include "kv/attention_kernel.inl"
}  // namespace avx2_kernel

void attend_avx2(const KernelLayer& layer, const KernelWork& work, float* scratch) {
  avx2_kernel::run_kernel(layer, work, scratch);
}

}  // namespace rowlm::kv::detail
