#pragma once
// Launching a kernel as a programmatic dependent of the kernel before it on
// its stream (Hopper and later; an ordinary launch before): it may start
// while that kernel runs, load what no earlier kernel writes (weights), and
// must call wait_for_producers() (device_math.cuh) before it reads anything
// an earlier kernel wrote or writes anything at all. Host code, for the .cu
// files that launch such kernels.

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

namespace rowlm::cuda {

// Whether the current device takes programmatic dependent launches (compute
// capability 9.0 or later; asked at each launch: the runtime caches it).
inline bool programmatic_launch_supported() {
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return false;
  return major >= 9;
}

// cluster_z > 0: the grid in thread block clusters of cluster_z blocks
// along z (Hopper on: the caller checks programmatic_launch_supported()).
template <class... Params, class... Args>
void launch_dependent_clusters(unsigned cluster_z, void (*kernel)(Params...), dim3 grid, dim3 block,
                               std::size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attrs[2];
  unsigned count = 0;
  if (programmatic_launch_supported()) {
    attrs[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[count++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster_z > 0) {
    attrs[count].id = cudaLaunchAttributeClusterDimension;
    attrs[count].val.clusterDim.x = 1;
    attrs[count].val.clusterDim.y = 1;
    attrs[count++].val.clusterDim.z = cluster_z;
  }
  config.attrs = attrs;
  config.numAttrs = count;
  cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
}

template <class... Params, class... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem, cudaStream_t stream,
                      Args&&... args) {
  launch_dependent_clusters(0, kernel, grid, block, smem, stream, std::forward<Args>(args)...);
}

}  // namespace rowlm::cuda
