#pragma once
// The CUDA backend's bf16 matmul on tensor cores: y[m, n] = Σ_k x[m, k] · w[n, k]
// with x and w bf16 (row-major, k contiguous: w is a checkpoint's [out, in]
// Linear weight as stored) and f32 accumulation.
//
// Batch invariance. Every output element is summed in one canonical order,
// whatever M is and whichever tile configuration runs:
//   1. K is cut into chunks of kGemmChunk elements at fixed offsets (0, 512, …).
//   2. Within a chunk, mma.m16n8k16 accumulates the products 16 k at a time,
//      from 0.0f, in increasing k; a chunk's last step is the last 16-wide
//      step that starts below K (elements past K are zeros).
//   3. The chunks' sums are added to 0.0f in increasing chunk order.
// Element (m, n) depends only on row m of x and row n of w. The launcher picks
// tile sizes and whether chunks run in separate blocks (split over K: the
// chunk sums are added in chunk order by block 0 of a tile's thread block
// cluster through distributed shared memory (small tiles on Hopper, up to 8
// chunks), by the last block of a tile to finish, or for large tiles by a
// second kernel) from M, N, K and the SM count: that
// choice changes the speed, never the bits. So a row's result is the same
// alone, in a batch of 1,000 rows, in prefill or in decode.
//
// All pointers are device pointers; launches are asynchronous on `stream`.
// The caller validates shapes.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace rowlm::cuda {

inline constexpr int64_t kGemmChunk = 512;

// Device bytes of f32 scratch gemm_bf16 needs for this shape (0 when it will
// not split over K); pass at least that much as `scratch`. `arrivals`: a
// device array of at least kGemmArrivals ints, zero before the first launch;
// a split launch counts its blocks' arrivals there and leaves it zero again,
// so one array serves every launch on a stream.
inline constexpr int64_t kGemmArrivals = 1 << 16;

// What the dispatcher weighs of the GPU: its SMs, and whether the Hopper
// tiles (wgmma fed by TMA) run there. 32-bit fields, no padding (the launch
// queue keys launches by their arguments' bytes).
struct GemmGpu {
  int32_t sms = 1;
  int32_t hopper = 0;
};
// The current device's (one synchronous probe launch: call it once, outside
// stream capture).
GemmGpu gemm_gpu();

std::size_t gemm_bf16_scratch_bytes(int64_t M, int64_t N, int64_t K, GemmGpu gpu);

void gemm_bf16(const uint16_t* x, const uint16_t* w, float* y, int64_t M, int64_t N, int64_t K, float* scratch,
               int* arrivals, GemmGpu gpu, cudaStream_t stream);

// Several products of one x in one launch: y_s = x · w_sᵀ for each output s
// (w_s [n_s, K], y_s [M, n_s]). Each output's elements are summed exactly as
// a gemm_bf16 of that output alone sums them (the tile and the split are
// picked from M and all outputs' columns; neither changes a bit).
struct GemmOutputs {
  static constexpr int kMax = 4;
  const uint16_t* w[kMax] = {};
  float* y[kMax] = {};
  int64_t n[kMax] = {};
  int64_t count = 0;  // 64 bits: no padding bytes (the launch queue keys launches by their arguments' bytes)
};
std::size_t gemm_bf16_scratch_bytes(int64_t M, const GemmOutputs& outs, int64_t K, GemmGpu gpu);
void gemm_bf16(const uint16_t* x, const GemmOutputs& outs, int64_t M, int64_t K, float* scratch, int* arrivals,
               GemmGpu gpu, cudaStream_t stream);

// Ceiling probe: chains of mma.m16n8k16 on registers (no memory traffic) on
// every SM; returns the flops it issues (time it on the stream).
double mma_chains(int64_t iters, float* sink, int sms, cudaStream_t stream);

// The configurations, exposed so the tests can run each one on the same
// inputs and check the bits agree (gemm_bf16 picks among them by shape).
// Small is the decode tile (M ≤ 16), Medium M ≤ 128, Large prefill; the
// others are tiles of other shapes (narrower or wider columns, fewer rows,
// deeper k-tiles, more stages) that the benchmark weighs on cold weights,
// and that the dispatcher picks where they measured faster. Hopper (128
// rows) and HopperShort (64) are the wgmma tiles (gemm_hopper.h): they run
// only where gemm_tile_runs says so (elsewhere, and on
// operands TMA cannot read, gemm_bf16_with runs LargeDeep in their place).
enum class GemmTile : int {
  Small,
  Medium,
  Large,
  SmallNarrow,
  SmallDeep,
  SmallNarrowDeep,
  SmallStaged,
  MediumWide,
  MediumShort,
  MediumSums,
  MediumStaged,
  MediumDeep,
  LargeDeep,
  LargeStaged,
  LargeNarrow,
  Hopper,
  HopperShort,
};
inline constexpr GemmTile kGemmTiles[] = {
    GemmTile::Small,      GemmTile::Medium,      GemmTile::Large,     GemmTile::SmallNarrow,
    GemmTile::SmallDeep,  GemmTile::SmallNarrowDeep, GemmTile::SmallStaged, GemmTile::MediumWide,
    GemmTile::MediumShort, GemmTile::MediumSums, GemmTile::MediumStaged, GemmTile::MediumDeep, GemmTile::LargeDeep,  GemmTile::LargeStaged, GemmTile::LargeNarrow,
    GemmTile::Hopper,     GemmTile::HopperShort};
int64_t gemm_tile_rows(GemmTile tile);  // the tile's M extent
const char* gemm_tile_name(GemmTile tile);
bool gemm_tile_runs(GemmTile tile, GemmGpu gpu);
void gemm_bf16_with(GemmTile tile, bool split, const uint16_t* x, const uint16_t* w, float* y, int64_t M, int64_t N,
                    int64_t K, float* scratch, int* arrivals, cudaStream_t stream);
void gemm_bf16_with(GemmTile tile, bool split, const uint16_t* x, const GemmOutputs& outs, int64_t M, int64_t K,
                    float* scratch, int* arrivals, cudaStream_t stream);
// Output tiles of a configuration (one output): a split launch counts
// arrivals in that many ints (gemm_bf16 splits only below 4 × SMs tiles).
int64_t gemm_bf16_tiles(GemmTile tile, int64_t M, int64_t N);
// Scratch for gemm_bf16_with(…, split = true, …).
std::size_t gemm_bf16_split_scratch_bytes(int64_t M, int64_t N, int64_t K);

}  // namespace rowlm::cuda
