#pragma once
// Launching a kernel as a programmatic dependent of the kernel before it on
// its stream (Hopper and later; an ordinary launch before): it may start
// while that kernel runs, load what no earlier kernel writes (weights), and
// must call wait_for_producers() (device_math.cuh) before it reads anything
// an earlier kernel wrote or writes anything at all. Host code, for the .cu
// files that launch such kernels.

#include <cuda_runtime.h>

#include <cstddef>

namespace rowlm::cuda {

// Whether the current device takes programmatic dependent launches (compute
// capability 9.0 or later; asked at each launch: the runtime caches it).
inline bool programmatic_launch_supported() {
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return false;
  return major >= 9;
}

template <class... Params, class... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem, cudaStream_t stream,
                      Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute pdl[1];
  pdl[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = pdl;
  config.numAttrs = programmatic_launch_supported() ? 1 : 0;
  cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
}

// The same, the grid in thread block clusters of cluster_z blocks along z
// (Hopper on; the caller checks programmatic_launch_supported()).
template <class... Params, class... Args>
void launch_dependent_cluster(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem,
                              cudaStream_t stream, unsigned cluster_z, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attrs[2];
  attrs[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[0].val.programmaticStreamSerializationAllowed = 1;
  attrs[1].id = cudaLaunchAttributeClusterDimension;
  attrs[1].val.clusterDim.x = 1;
  attrs[1].val.clusterDim.y = 1;
  attrs[1].val.clusterDim.z = cluster_z;
  config.attrs = attrs;
  config.numAttrs = 2;
  cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
}

}  // namespace rowlm::cuda
