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

const AttentionKernels attention_avx2 = {&avx2_kernel::run_kernel, &avx2_kernel::run_tile, &avx2_kernel::run_fold};

}  // namespace rowlm::cpu
