#pragma once
// Host memory that starts on a 2 MiB boundary and asks the kernel for
// transparent huge pages (madvise MADV_HUGEPAGE; ignored where the system
// has none). For memory the CPU kernels sweep every step: weights (whole
// cache lines, few TLB entries) and the forward's workspace, whose first
// touch then faults once per 2 MiB instead of once per 4 KiB. Measured on
// the 16-core accelerator host: the first prefill of a fresh workspace paid
// its page faults in every thread at once (docs/perf.md).

#include <cstddef>
#include <memory>

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace rowlm::cpu {

// `bytes` of uninitialised memory (zero pages until first written), freed
// when the last copy of the pointer goes. Throws OutOfMemory (naming `what`)
// when the memory cannot be had.
std::shared_ptr<std::byte> allocate_huge_pages(std::size_t bytes, const char* what);

// A host tensor copied into such memory, the copy spread over `pool`.
Tensor copy_to_huge_pages(const Tensor& src, ThreadPool& pool);

}  // namespace rowlm::cpu
