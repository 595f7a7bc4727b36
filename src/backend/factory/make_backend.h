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
#include <vector>

#include "backend/backend.h"

namespace rowlm {

std::unique_ptr<Backend> make_backend(const BackendOptions& options);

// The backends of a model split over `shards` (tensor parallelism, issue
// 17): `model` for the model (shard 0, the KV cache, the unsplit parts) and
// `shards` - 1 more in `others` for ModelOptions::shard_backends. On the
// CPU (device "cpu", or "auto" without a GPU) the shards are CPU "devices":
// `options.threads` (0: one per core) divided among them, at least one
// each. On a GPU, a CUDA backend per shard: shard s on the GPU
// options.tensor_parallel_devices (or ROWLM_TENSOR_PARALLEL_DEVICES) names,
// else on the model's GPU + s; an Error naming the GPU count when there are
// fewer (several shards share a GPU only when named so), or when the list
// does not fit (its length, shard 0 not on the model's GPU, a GPU that is
// not there, an unparsable variable). At one shard, only `model`.
struct ShardedBackends {
  std::unique_ptr<Backend> model;
  std::vector<std::shared_ptr<Backend>> others;
};
ShardedBackends make_sharded_backends(const BackendOptions& options, int shards);

// Whether this build includes the CUDA backend.
bool built_with_cuda();

}  // namespace rowlm
