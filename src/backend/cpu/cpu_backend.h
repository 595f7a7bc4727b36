#pragma once
// The CPU backend: the reference implementation of backend.h, on host
// memory. Host tensors are its device tensors, so upload and the host copies
// are plain copies and checkpoint views serve as weights unchanged.
//
// Instruction set: one choice for the whole backend (matmul, elementwise,
// attention kernels all come from one cpu::Kernels table). make_cpu_backend
// without an ISA uses cpu::isa_from_env(): ROWLM_CPU_ISA=scalar|avx2|avx512
// forces a path, otherwise the best one runs. All paths give bitwise
// identical results; tests and benchmarks compare them. One exception, by
// choice: under MatmulPrecision::Bf16 on a CPU with AMX-BF16, the backend
// without an explicit ISA runs the bf16 matmuls on AMX tiles, in AMX's
// summation order (cpu/amx_bf16.h), unless ROWLM_CPU_AMX=0: as batch
// invariant and deterministic as the others, but not their bits.
// By default (ROWLM_CPU_AMX unset or rows) calls of up to 4 rows (decode)
// compute that order on the AVX-512 units instead (cpu/amx_bf16_rows.h):
// the same bits, faster there than the tiles; ROWLM_CPU_AMX=1 keeps every
// call on the tiles. Any other value than 0, 1 or rows is an Error.
//
// Threads: operations run on the backend's own thread pool (`threads`
// including the caller; 0 = one per core), which is not reentrant: one
// caller at a time.

#include <cstdint>
#include <memory>
#include <span>

#include "backend/backend.h"
#include "core/isa.h"

namespace rowlm {

// Backend::sample_rows for one row in host memory (the host sampler's own
// code, sampling/planned_row.h, which lies above this library: make_backend
// hands it over). A backend made without one leaves sample_rows an Error.
using HostRowSampler = int32_t (*)(std::span<float> row, const RowSampling& r, std::span<const RowSamplingEdit> edits,
                                   std::span<const uint64_t> masks, RowLogprobStats* stats);

std::unique_ptr<Backend> make_cpu_backend(int threads = 0, MatmulPrecision precision = MatmulPrecision::F32,
                                          HostRowSampler sample_row = nullptr);
// An Error if this CPU cannot run `isa`.
std::unique_ptr<Backend> make_cpu_backend(int threads, cpu::Isa isa,
                                          MatmulPrecision precision = MatmulPrecision::F32);
// AVX-512 with the bf16 matmuls on AMX tiles (MatmulPrecision::Bf16), and
// calls of up to vector_rows (0 to 4) rows in AMX's order on the vector
// units; an Error where cpu::amx_bf16_usable() is false.
std::unique_ptr<Backend> make_cpu_backend_amx(int threads, int64_t vector_rows = 0);

}  // namespace rowlm
