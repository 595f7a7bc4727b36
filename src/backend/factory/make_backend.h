#pragma once
// The one way to build a backend from options: the engine, the CLI and the
// benchmarks all come here (tests that compare the CPU backend's ISA paths
// use make_cpu_backend directly).
//
// Devices: "cpu"; "auto" (the best this build and machine offer: the CPU
// until the CUDA backend computes); "cuda" / "cuda:N" where rowlm was built
// with ROWLM_CUDA. Anything else, or a device this build or machine lacks,
// is an Error naming it.

#include <memory>

#include "backend/backend.h"

namespace rowlm {

std::unique_ptr<Backend> make_backend(const BackendOptions& options);

// Whether this build includes the CUDA backend.
bool built_with_cuda();

}  // namespace rowlm
