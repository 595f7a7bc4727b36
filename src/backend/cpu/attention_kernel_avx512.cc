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

const AttentionKernels attention_avx512 = {&avx512_kernel::run_kernel, &avx512_kernel::run_tile, &avx512_kernel::run_fold};

}  // namespace rowlm::cpu
