#pragma once
// Device side of GemmOutputs (gemm_bf16.h), shared by the mma.sync tiles
// (gemm_bf16.cu) and the Hopper tiles (gemm_hopper.cu): the outputs' column
// tiles are numbered one after another, a tile never straddling two outputs.

#include <cstdint>

#include "backend/cuda/gemm_bf16.h"

namespace rowlm::cuda {

// Which output column tile `tile` (of kCols columns) belongs to, and the
// offset of that output's partials: chunks × M × (the columns of the outputs
// before it).
struct TileOutput {
  const uint16_t* w;
  float* y;
  int64_t N, col0, partials_offset;
  int index;
};
template <int kCols>
__device__ __forceinline__ TileOutput tile_output(const GemmOutputs& outs, int64_t tile, int64_t M, int64_t chunks) {
  int64_t cols_before = 0;
  int s = 0;
  for (; s + 1 < outs.count; ++s) {
    const int64_t tiles = (outs.n[s] + kCols - 1) / kCols;
    if (tile < tiles) break;
    tile -= tiles;
    cols_before += outs.n[s];
  }
  return {outs.w[s], outs.y[s], outs.n[s], tile * kCols, chunks * M * cols_before, s};
}

// Column tiles of kCols over every output (host or device).
template <int kCols>
__host__ __device__ inline int64_t column_tiles(const GemmOutputs& outs) {
  int64_t tiles = 0;
  for (int s = 0; s < outs.count; ++s) tiles += (outs.n[s] + kCols - 1) / kCols;
  return tiles;
}

}  // namespace rowlm::cuda
