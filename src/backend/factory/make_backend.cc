#include "backend/factory/make_backend.h"

#include <algorithm>
#include <charconv>
#include <string>

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
  if (shards <= 1 || !out.model->device().is_host()) return out;
  BackendOptions each = options;
  each.device = "cpu";
  each.threads = std::max(1, out.model->host_threads() / shards);
  out.model = make_backend(each);
  for (int s = 1; s < shards; ++s) out.others.push_back(make_backend(each));
  return out;
}

}  // namespace rowlm
