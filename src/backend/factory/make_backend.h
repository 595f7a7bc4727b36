#pragma once
// The one way to build a backend from options: the engine, the CLI and the
// benchmarks all come here (tests that compare the CPU backend's ISA paths
// use make_cpu_backend directly).
//
// Devices: "cpu"; "cuda" / "cuda:N" where rowlm was built with ROWLM_CUDA;
// "auto": the first GPU when the build has CUDA and the machine a GPU, else
// the CPU. Anything else, or a device this build or machine lacks (no
// driver, an architecture the build has no code for), is an Error naming it.

#include <memory>

#include "backend/backend.h"

namespace rowlm {

std::unique_ptr<Backend> make_backend(const BackendOptions& options);

// Whether this build includes the CUDA backend.
bool built_with_cuda();

}  // namespace rowlm
