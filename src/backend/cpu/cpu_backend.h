#pragma once
// The CPU backend (make_cpu_backend in backend.h) on an explicit instruction
// set, for tests and benchmarks that compare ISA paths. make_cpu_backend(t)
// is make_cpu_backend(t, cpu::isa_from_env()): ROWLM_CPU_ISA=scalar|avx2|
// avx512 forces a path, otherwise the best one runs. All paths give bitwise
// identical results. One caller at a time: operations run on the backend's
// own thread pool, which is not reentrant.

#include <memory>

#include "backend/backend.h"
#include "core/isa.h"

namespace rowlm {

// An Error if this CPU cannot run `isa`.
std::unique_ptr<Backend> make_cpu_backend(int threads, cpu::Isa isa,
                                          MatmulPrecision precision = MatmulPrecision::F32);

}  // namespace rowlm
