// The attention kernel compiled for the portable instruction set (baseline x86-64, or any target GCC supports).
#include <math.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kv/attention_kernel_types.h"

namespace rowlm::kv::detail {
namespace portable_kernel {
#include "kv/attention_kernel.inl"
}  // namespace portable_kernel

void attend_portable(const KernelLayer& layer, const KernelWork& work, float* scratch) {
  portable_kernel::run_kernel(layer, work, scratch);
}

}  // namespace rowlm::kv::detail
