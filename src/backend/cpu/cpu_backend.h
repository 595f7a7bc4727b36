#pragma once
// The CPU backend: the reference implementation of backend.h, on host
// memory. Host tensors are its device tensors, so upload and the host copies
// are plain copies and checkpoint views serve as weights unchanged.
//
// Instruction set: one choice for the whole backend (matmul, elementwise,
// attention kernels all come from one cpu::Kernels table). make_cpu_backend
// without an ISA uses cpu::isa_from_env(): ROWLM_CPU_ISA=scalar|avx2|avx512
// forces a path, otherwise the best one runs. All paths give bitwise
// identical results; tests and benchmarks compare them.
//
// Threads: operations run on the backend's own thread pool (`threads`
// including the caller; 0 = one per core), which is not reentrant: one
// caller at a time.

#include <memory>

#include "backend/backend.h"
#include "core/isa.h"

namespace rowlm {

std::unique_ptr<Backend> make_cpu_backend(int threads = 0, MatmulPrecision precision = MatmulPrecision::F32);
// An Error if this CPU cannot run `isa`.
std::unique_ptr<Backend> make_cpu_backend(int threads, cpu::Isa isa,
                                          MatmulPrecision precision = MatmulPrecision::F32);

}  // namespace rowlm
