#pragma once
// The Hopper tiles of gemm_bf16 (gemm_bf16.h): wgmma on operands that TMA
// streams into shared memory, summing in gemm_bf16.h's canonical order (so
// their bits are every other tile's: gemm_bf16_test checks it), unsplit or
// split over K as the mma.sync tiles are. Internal to
// gemm_bf16.cu, which picks them by shape. Built where the CUDA
// architectures include 90a (sm_90 with its wgmma and TMA instructions);
// runs_here() says whether this process's image has them for the current
// device.

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/gemm_bf16.h"

namespace rowlm::cuda::hopper {

inline constexpr int64_t kTileCols = 128;  // columns of y (rows of w) per tile
int64_t tile_rows(int consumers);          // 64 rows of x per consumer warpgroup (1 or 2)
int64_t tiles(int consumers, int64_t M, const GemmOutputs& outs);

// The current device runs the wgmma kernels of this build (one synchronous
// probe launch; call it once, outside stream capture).
bool runs_here();
// The tiles' rules: bases 16-byte aligned (TMA), K a multiple of 64 (whole
// k-tiles: no wgmma under a branch), sizes below 2^31.
bool operands_fit(const uint16_t* x, const GemmOutputs& outs, int64_t M, int64_t K);
// Launches the tile of `consumers` warpgroups over every output, split over
// K or not (scratch and arrivals as gemm_bf16_with's); false (and nothing
// launched) where the operands do not fit or a descriptor could not be made.
bool gemm(int consumers, bool split, const uint16_t* x, const GemmOutputs& outs, int64_t M, int64_t K, float* scratch,
          int* arrivals, cudaStream_t stream);

}  // namespace rowlm::cuda::hopper
