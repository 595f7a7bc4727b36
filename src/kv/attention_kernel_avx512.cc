// The attention kernel compiled for the avx512 instruction set.
#include <math.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kv/attention_kernel_types.h"

namespace rowlm::kv::detail {
namespace avx512_kernel {
#include "kv/attention_kernel.inl"
}  // namespace avx512_kernel

void attend_avx512(const KernelLayer& layer, const KernelWork& work, float* scratch) {
  avx512_kernel::run_kernel(layer, work, scratch);
}

}  // namespace rowlm::kv::detail
