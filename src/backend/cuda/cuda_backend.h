#pragma once
// The CUDA backend (built with -DROWLM_CUDA=ON): backend.h on one NVIDIA GPU,
// with activations (a device workspace), weights (uploaded once) and the KV
// arenas in its memory.
//
// Numerics: every kernel performs the CPU backend's sequence of IEEE
// operations (the canonical 16-lane matmul and sum-of-squares order, the
// bf16 pair step, the same exp/tanh polynomials, RoPE cos/sin from the
// host's std::cos/std::sin, the attention kernel's block-by-block online
// softmax), built with --fmad=false so that no multiply and add fuse unless
// written as fmaf. A tensor computed here equals the CPU's bit for bit; in
// particular a row's output does not depend on the batch, and KV blocks hold
// the same bytes as on the CPU (the layout of backend/kv_block_layout.h).
// MoE routing and grouping run on the host with the CPU's code.
//
// Status: correctness first. Kernels are simple (one half-warp per dot
// product). Host data is staged in pinned memory and copied asynchronously;
// kernels check the indices they read and raise an error flag reported at
// the next synchronisation (a copy to the host, or the next step's workspace
// reset). Speed (tensor cores, CUDA graphs) is the GPU performance work's.
//
// Threads: one caller at a time; every call selects the backend's device.

#include <memory>

#include "backend/backend.h"

namespace rowlm {

// GPUs the CUDA runtime sees (0 without a driver or device).
int cuda_device_count();

// The backend on GPU `index`; an Error naming what is missing otherwise (no
// device, an architecture this build has no code for).
std::unique_ptr<Backend> make_cuda_backend(int index, const BackendOptions& options);

}  // namespace rowlm
