#pragma once
// How to build a compute backend: which device, how many host threads, and
// the matmul precision. Shared by the engine options, the CLI and the
// benchmarks; rowlm::make_backend (backend/factory) turns it into a backend.

#include <string>
#include <string_view>
#include <vector>

namespace rowlm {

// What a matmul does with activations that meet bf16 weights.
enum class MatmulPrecision {
  // Activations stay f32 (bf16/f16 weights are widened exactly): faithful to
  // an f32 reference. On the GPU, the CPU backend's bits exactly (slow).
  F32,
  // Activations are rounded to bf16 (nearest even) and multiplied with bf16
  // weights, accumulating in f32: on the CPU in pairs (VDPBF16PS), twice the
  // multiply-add rate of f32 where the hardware has it; on the GPU on tensor
  // cores (backend/cuda/gemm_bf16.h). f32 and f16 weights keep the F32 path.
  // Batch-invariant on both; the two backends' bits differ in this mode.
  Bf16,
  // The backend's own default, resolved when the backend is made: F32 on the
  // CPU, Bf16 on the GPU. Backend::matmul_precision() never returns Auto.
  Auto,
  // CPU only: activations are quantized to 8 bits per 32 elements where
  // they meet 4- and 8-bit affine weights (MLX q4/q8, GGUF Q4_0, Q4_1,
  // Q4_K, Q6_K, Q8_0), multiplied in exact integer sums (VPDPBUSD on CPUs
  // with AVX512-VNNI), as llama.cpp does: the fastest path for quantized
  // weights, at about 2^-8 of each block's range in x. Other weights keep
  // F32. Batch-invariant; bitwise the same on every CPU
  // (backend/cpu/int8_matmul.h).
  Int8,
};
std::string_view matmul_precision_name(MatmulPrecision p);  // "f32", "bf16", "auto", "int8"
// "f32", "bf16", "auto" or "int8"; anything else is an Error naming the value.
MatmulPrecision parse_matmul_precision(std::string_view name);

struct BackendOptions {
  // "auto" (the first GPU when built with CUDA and one is present, else the
  // CPU), "cpu", "cuda" or "cuda:N".
  std::string device = "auto";
  int threads = 0;  // host threads for the CPU backend; 0 = one per core
  MatmulPrecision matmul_precision = MatmulPrecision::Auto;
  // Tensor parallelism on GPUs (make_sharded_backends): the GPU index of
  // each shard, shard 0's being the model's device. Empty: the environment
  // variable ROWLM_TENSOR_PARALLEL_DEVICES (comma-separated, e.g. "0,0")
  // when set, else shard s on the model's GPU + s (an Error naming the count
  // when the machine has fewer). Naming a GPU more than once puts several
  // shards on it, each a backend of its own (stream, workspace, KV arenas):
  // how the multi-GPU path runs on one GPU; never chosen implicitly.
  std::vector<int> tensor_parallel_devices;
};

}  // namespace rowlm
