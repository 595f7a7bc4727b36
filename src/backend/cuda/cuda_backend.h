#pragma once
// The CUDA backend (built with -DROWLM_CUDA=ON): backend.h on one NVIDIA GPU,
// with activations (a device workspace), weights (uploaded once) and the KV
// arenas in its memory.
//
// Numerics. Two matmul precisions (BackendOptions::matmul_precision):
//  - Bf16, the GPU's default (Auto): activations are rounded to bf16 where
//    they meet bf16 weights and multiplied on tensor cores with f32
//    accumulation (gemm_bf16.h), in one summation order for every batch
//    size and tile configuration; f32 and f16 weights keep the f32 path.
//  - F32: every kernel performs the CPU backend's sequence of IEEE
//    operations (the canonical 16-lane matmul and sum-of-squares order, the
//    same exp/tanh polynomials, RoPE cos/sin from the host's std::cos/sin),
//    built with --fmad=false so that no multiply and add fuse unless written
//    as fmaf: a tensor computed here equals the CPU's bit for bit.
// Attention: under F32 the CPU's block-by-block online softmax, bit for bit;
// under Bf16 the keys in fixed 64-position splits merged in order
// (kv_kernels.h attention_split), within rounding of the CPU and invariant
// to the batch. Every other kernel (norms, RoPE, the KV codecs) is the CPU's
// arithmetic in both precisions. In both, a row's
// output does not depend on the batch, and KV blocks have the CPU's layout
// (backend/kv_block_layout.h), so a row saved on one backend restores on
// the other. MoE routing and grouping run on the host with the CPU's code.
//
// Status: the matmul (several weights of one input in one launch, each a
// programmatic dependent launch), attention (split over the keys) and norms
// (fused with their neighbours where the decoder asks) are built for speed;
// a forward step's launches are held and issued together, a repeated step
// (decode at one batch shape) as one CUDA graph (launch_queue.h). Greedy
// rows bring back their argmax code (argmax_rows); other rows are sampled
// here (sample_rows: the host sampler's arithmetic in its order, grammar
// masks included, so its token and logprobs) and only the token and the
// logprobs' inputs come back; a speculative row of a deterministic
// drafter is verified here too (sample_rows' verifying rows: the verdicts
// come back), a draft model's brings its logits to the host. Host data is staged in pinned
// memory and copied asynchronously; kernels check the indices they read and
// raise an error flag reported at the next synchronisation (a copy to the
// host, or the next step's workspace reset).
//
// Several backends, on one GPU or several (tensor parallelism's shards):
// each has its own stream, workspace, staging and KV arenas; one reads
// another's tensors only through copy_from_backend (backend.h), a copy on
// its own stream after an event of the other's (mark_work): device to
// device on one GPU, cudaMemcpyPeerAsync between two (with peer access
// enabled where the GPUs allow). Only the one-GPU case has run.
//
// Threads: one caller at a time; every call selects the backend's device.
// copy_from_backend reads the other backend's memory and event without
// calling it, so the other's caller may run meanwhile.

#include <memory>

#include "backend/backend.h"

namespace rowlm {

// GPUs the CUDA runtime sees (0 without a driver or device).
int cuda_device_count();

// The backend on GPU `index`; an Error naming what is missing otherwise (no
// device, an architecture this build has no code for).
std::unique_ptr<Backend> make_cuda_backend(int index, const BackendOptions& options);

}  // namespace rowlm
