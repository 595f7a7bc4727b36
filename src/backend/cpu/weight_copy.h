#pragma once
// A host tensor copied into fresh memory that starts on a 2 MiB boundary
// and asks the kernel for transparent huge pages (madvise MADV_HUGEPAGE;
// ignored where the system has none), the copy spread over `pool`. For
// weights the CPU kernels stream every step: whole cache lines, and few
// TLB entries. Throws OutOfMemory when the memory cannot be had.

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace rowlm::cpu {

Tensor copy_to_huge_pages(const Tensor& src, ThreadPool& pool);

}  // namespace rowlm::cpu
