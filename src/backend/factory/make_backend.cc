#include "backend/factory/make_backend.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "sampling/planned_row.h"
#ifdef ROWLM_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace rowlm {
namespace {

// "cuda" -> 0, "cuda:3" -> 3; -1 if `device` names no CUDA device.
int cuda_index(const std::string& device) {
  if (device == "cuda") return 0;
  if (!device.starts_with("cuda:")) return -1;
  int index = -1;
  const char* begin = device.data() + 5;
  const char* end = device.data() + device.size();
  const auto [stop, ec] = std::from_chars(begin, end, index);
  return ec == std::errc() && stop == end && begin != end && index >= 0 ? index : -1;
}

#ifdef ROWLM_HAVE_CUDA
// ROWLM_TENSOR_PARALLEL_DEVICES ("0,0,1": a GPU index per shard); empty
// when unset or empty, an Error when it is not such a list.
std::vector<int> devices_from_environment() {
  const char* value = std::getenv("ROWLM_TENSOR_PARALLEL_DEVICES");
  if (value == nullptr || *value == '\0') return {};
  const std::string text = value;
  std::vector<int> out;
  for (std::size_t at = 0;;) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    int index = -1;
    const char* begin = text.data() + at;
    const char* end = text.data() + comma;
    const auto [stop, ec] = std::from_chars(begin, end, index);
    if (ec != std::errc() || stop != end || begin == end || index < 0)
      throw Error("ROWLM_TENSOR_PARALLEL_DEVICES='" + text +
                  "': expected GPU indices separated by commas, one per shard (e.g. 0,0)");
    out.push_back(index);
    if (comma == text.size()) return out;
    at = comma + 1;
  }
}

// The GPU of each shard: named (options, else the environment) or
// consecutive from the model's GPU `first`; `count` GPUs are present.
std::vector<int> shard_gpus(const BackendOptions& options, int shards, int first, int count) {
  const std::string what = "tensor parallel " + std::to_string(shards) + " on cuda:" + std::to_string(first);
  const std::string gpus = std::to_string(count) + " GPU" + (count == 1 ? "" : "s");
  std::vector<int> devices = options.tensor_parallel_devices;
  std::string source = "BackendOptions::tensor_parallel_devices";
  if (devices.empty()) {
    devices = devices_from_environment();
    source = "ROWLM_TENSOR_PARALLEL_DEVICES";
  }
  if (devices.empty()) {
    if (first + shards > count) {
      std::string example = std::to_string(first);  // every shard on the model's GPU
      for (int s = 1; s < shards; ++s) example += "," + std::to_string(first);
      throw Error(what + " needs " + std::to_string(shards) + " GPUs (cuda:" + std::to_string(first) + " to cuda:" +
                  std::to_string(first + shards - 1) + "), and this machine has " + gpus +
                  "; to run several shards on one GPU, name each shard's GPU: ROWLM_TENSOR_PARALLEL_DEVICES=" +
                  example);
    }
    for (int s = 0; s < shards; ++s) devices.push_back(first + s);
    return devices;
  }
  if (int(devices.size()) != shards)
    throw Error(what + ": " + source + " names " + std::to_string(devices.size()) + " GPUs, one per shard is needed");
  if (devices[0] != first)
    throw Error(what + ": " + source + " puts shard 0 on cuda:" + std::to_string(devices[0]) +
                "; shard 0 runs on the model's device");
  for (int d : devices)
    if (d >= count)
      throw Error(what + ": " + source + " names cuda:" + std::to_string(d) + ", and this machine has " + gpus);
  return devices;
}
#endif

}  // namespace

bool built_with_cuda() {
#ifdef ROWLM_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

std::unique_ptr<Backend> make_backend(const BackendOptions& options) {
  if (options.threads < 0 || options.threads > 1024)
    throw Error("backend: threads must be between 0 and 1024, not " + std::to_string(options.threads));
  const std::string& device = options.device;
#ifdef ROWLM_HAVE_CUDA
  if (device == "auto" && cuda_device_count() > 0) return make_cuda_backend(0, options);
#endif
  // The CPU backend samples (and verifies) rows with the host sampler's own code.
  if (device == "cpu" || device == "auto")
    return make_cpu_backend(options.threads, options.matmul_precision, &sampling::sample_planned_row);
  if (const int index = cuda_index(device); index >= 0) {
#ifdef ROWLM_HAVE_CUDA
    return make_cuda_backend(index, options);
#else
    throw Error("device '" + device + "': this rowlm was built without CUDA (configure with -DROWLM_CUDA=ON)");
#endif
  }
  throw Error("unknown device '" + device + "' (expected auto, cpu, cuda or cuda:N)");
}

ShardedBackends make_sharded_backends(const BackendOptions& options, int shards) {
  ShardedBackends out;
  out.model = make_backend(options);
  if (shards <= 1) return out;
  if (!out.model->device().is_host()) {
#ifdef ROWLM_HAVE_CUDA
    // A CUDA backend per shard, each with its own stream and memory (shard
    // 0's is the model's): the decoder copies between them on the GPUs.
    const std::vector<int> gpus = shard_gpus(options, shards, out.model->device().index, cuda_device_count());
    for (int s = 1; s < shards; ++s) out.others.push_back(make_cuda_backend(gpus[std::size_t(s)], options));
    return out;
#else
    throw Error("tensor parallel: " + out.model->name() + " is neither the CPU nor a CUDA device");
#endif
  }
  BackendOptions each = options;
  each.device = "cpu";
  each.threads = std::max(1, out.model->host_threads() / shards);
  out.model = make_backend(each);
  for (int s = 1; s < shards; ++s) out.others.push_back(make_backend(each));
  return out;
}

}  // namespace rowlm
