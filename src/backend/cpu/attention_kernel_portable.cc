// The attention kernel compiled for the portable instruction set (baseline x86-64, or any target GCC supports).
#include <math.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend/cpu/attention_kernel_types.h"

namespace rowlm::cpu {
namespace portable_kernel {
#include "backend/cpu/attention_kernel.inl"
}  // namespace portable_kernel

const AttentionKernels attention_portable = {&portable_kernel::run_kernel, &portable_kernel::run_tile, &portable_kernel::run_fold};

}  // namespace rowlm::cpu
