#include "backend/cuda/gemm_hopper.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <mutex>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/gemm_outputs.cuh"
#include "backend/cuda/mma_sync.cuh"
#include "backend/cuda/launch_dependent.h"

namespace rowlm::cuda::hopper {
namespace {

constexpr int kBK = 64;  // k per stage: one 128-byte swizzle row of bf16
[[maybe_unused]] constexpr int kTilesPerChunk = int(kGemmChunk / kBK);  // used on sm_90a only
static_assert(kGemmChunk % kBK == 0, "chunks are whole k tiles");

// The operands' TMA descriptors: x, and each output's w.
struct Maps {
  CUtensorMap x;
  CUtensorMap w[GemmOutputs::kMax];
};

template <int kConsumers>
struct Shape {
  static constexpr int BM = 64 * kConsumers;  // one warpgroup per 64 rows
  static constexpr int kThreads = 128 * (kConsumers + 1);  // and one producer warpgroup
  static constexpr int kABytes = BM * kBK * 2, kBBytes = int(kTileCols) * kBK * 2;
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kStages = (kConsumers == 2 ? 4 : 6);
  // +1024: the dynamic buffer is aligned up to the swizzle's 1024 bytes.
  static constexpr int kSmemBytes = kStages * kStageBytes + 1024;
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_address(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_address(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_address(bar)) : "memory");
}
// Until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity) {
  unsigned done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_address(bar)), "r"(parity)
        : "memory");
  } while (!done);
}

// A box of the tensor at (c0 = k, c1 = row) into shared memory, counted on `bar`.
__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::
          "r"(smem_address(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_address(bar))
      : "memory");
}

// A wgmma shared-memory descriptor of a K-major tile in the 128-byte swizzle
// TMA writes: rows of 128 bytes, 8-row groups 1024 bytes apart. Adding 2
// moves it 16 k (32 bytes) along the rows.
__device__ __forceinline__ uint64_t smem_descriptor(const void* tile) {
  const uint64_t address = smem_address(tile);
  return ((address & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving reads or writes of an accumulator across
// the asynchronous wgmma that owns it.
__device__ __forceinline__ void fence_registers(float (&d)[64]) {
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// d += a · b for a 64 × 128 tile over 16 k: a and b K-major in shared
// memory (128-byte swizzle), f32 accumulators in the layout of
// mma.m16n8k16's, warp w of the group holding rows 16w … 16w + 15.
__device__ __forceinline__ void wgmma_64x128(float (&d)[64], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(a), "l"(b), "r"(1));
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// One block: a BM × 128 tile of one output, over all of K (unsplit,
// partials_base == nullptr) or over chunk blockIdx.z alone (split: the
// chunk's sum goes to the output's partials[chunk][m][n], and the last of
// the tile's blocks to arrive adds them up). A producer thread
// streams (x, w) k-tiles of 64 into a ring of stages by TMA; each consumer
// warpgroup multiplies its 64 rows by the stage's 128 columns with wgmma.
// The order is gemm_bf16.h's: within a chunk of 512 k the accumulators start
// at 0.0f and take 16 k a step in increasing k (K a multiple of 64: no step
// is partial); each chunk's sum is added to a total that starts at
// 0.0f, in chunk order.
template <int kConsumers>
__global__ void __launch_bounds__(Shape<kConsumers>::kThreads, 1)
    gemm_kernel(const __grid_constant__ Maps maps, const GemmOutputs outs, float* __restrict__ partials_base,
                int* __restrict__ arrivals, int64_t M, int64_t K) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = Shape<kConsumers>;
  extern __shared__ uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t full[S::kStages], empty[S::kStages];
  uint8_t* smem = smem_raw + ((1024 - smem_address(smem_raw) % 1024) % 1024);
  auto a_stage = [&](int s) { return smem + s * S::kStageBytes; };
  auto b_stage = [&](int s) { return smem + s * S::kStageBytes + S::kABytes; };

  const bool split = partials_base != nullptr;
  const TileOutput to = tile_output<int(kTileCols)>(outs, blockIdx.x, M, split ? int64_t(gridDim.z) : 0);
  const int64_t row0 = int64_t(blockIdx.y) * S::BM, col0 = to.col0;
  // This block's k-tiles: [t_begin, t_end).
  const int k_tiles = int((K + kBK - 1) / kBK);
  const int t_begin = split ? int(blockIdx.z) * kTilesPerChunk : 0;
  const int t_end = split ? min(k_tiles, t_begin + kTilesPerChunk) : k_tiles;
  const int group = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    for (int s = 0; s < S::kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kConsumers * 128);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  wait_for_producers();  // x is written by the kernel before

  if (group == 0) {
    if (threadIdx.x == 0) {
      for (int t = t_begin; t < t_end; ++t) {
        const int u = t - t_begin, s = u % S::kStages;  // u: the ring's count
        if (u >= S::kStages) mbar_wait(&empty[s], unsigned(u / S::kStages - 1) & 1);
        mbar_expect_tx(&full[s], S::kStageBytes);
        tma_load(a_stage(s), &maps.x, t * kBK, int(row0), &full[s]);
        tma_load(b_stage(s), &maps.w[to.index], t * kBK, int(col0), &full[s]);
      }
    }
    return;
  }

  const int consumer = group - 1;
  float acc[64], total[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) total[i] = 0.0f;
  for (int chunk0 = t_begin; chunk0 < t_end; chunk0 += kTilesPerChunk) {
    const int chunk_tiles = min(kTilesPerChunk, t_end - chunk0);
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
    for (int i = 0; i < chunk_tiles; ++i) {
      const int u = chunk0 + i - t_begin, s = u % S::kStages;
      mbar_wait(&full[s], unsigned(u / S::kStages) & 1);
      fence_registers(acc);
      wgmma_fence();
      const uint64_t a = smem_descriptor(a_stage(s) + consumer * 64 * kBK * 2), b = smem_descriptor(b_stage(s));
      // K is a multiple of 64 (operands_fit): every 16-wide step of a k-tile
      // starts below K, and none is skipped (a wgmma under a branch would be
      // serialized).
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) wgmma_64x128(acc, a + 2 * kk, b + 2 * kk);
      wgmma_commit();
      // The k-tile before this one is done with its stage: hand it back.
      wgmma_wait<1>();
      fence_registers(acc);
      if (i > 0) mbar_arrive(&empty[(u - 1) % S::kStages]);
    }
    wgmma_wait<0>();
    fence_registers(acc);
    mbar_arrive(&empty[(chunk0 + chunk_tiles - 1 - t_begin) % S::kStages]);
#pragma unroll
    for (int i = 0; i < 64; ++i) total[i] = total[i] + acc[i];
  }
  allow_dependents();

  const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  float* __restrict__ y = to.y;
  const int64_t N = to.N;
  float* __restrict__ partials = split ? partials_base + to.partials_offset : nullptr;
  float* out = split ? partials + int64_t(blockIdx.z) * M * N : y;
  // Each thread holds column pairs (n, n + 1): one 8-byte store where both
  // are in the output and 8-byte aligned (N even, the output's base too).
  const bool pairs = N % 2 == 0 && reinterpret_cast<uintptr_t>(out) % 8 == 0;
#pragma unroll
  for (int j = 0; j < int(kTileCols) / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t m = row0 + consumer * 64 + warp * 16 + lane / 4 + h * 8;
      const int64_t n = col0 + j * 8 + (lane % 4) * 2;
      if (m >= M) continue;
      const float v0 = total[j * 4 + h * 2], v1 = total[j * 4 + h * 2 + 1];
      if (pairs && n + 1 < N) {
        *reinterpret_cast<float2*>(out + m * N + n) = make_float2(v0, v1);
      } else {
        if (n < N) out[m * N + n] = v0;
        if (n + 1 < N) out[m * N + n + 1] = v1;
      }
    }
  if (!split) return;
  // The last of the tile's chunk blocks to finish adds the chunk sums into
  // y, to 0.0f in increasing chunk order (the unsplit order), and leaves the
  // tile's arrival count at zero for the next launch. The consumers alone
  // meet at named barrier 1 (the producer warpgroup has left).
  __shared__ int last;
  constexpr unsigned kConsumerThreads = kConsumers * 128;
  __threadfence();
  asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumerThreads) : "memory");
  if (threadIdx.x == 128) {
    int& count = arrivals[blockIdx.y * gridDim.x + blockIdx.x];
    last = atomicAdd(&count, 1) == int(gridDim.z) - 1;
    if (last) count = 0;
  }
  asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumerThreads) : "memory");
  if (!last) return;
  __threadfence();
  const int64_t MN = M * N;
  for (int e = int(threadIdx.x) - 128; e < S::BM * int(kTileCols); e += int(kConsumerThreads)) {
    const int64_t m = row0 + e / int(kTileCols), n = col0 + e % int(kTileCols);
    if (m >= M || n >= N) continue;
    float sum = 0.0f;
    for (unsigned c = 0; c < gridDim.z; ++c) sum = sum + __ldcg(partials + int64_t(c) * MN + m * N + n);
    y[m * N + n] = sum;
  }
#endif
}

__global__ void probe_kernel(int* built) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  *built = 1;
#else
  *built = 0;
#endif
}

PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  // The driver's entry point, asked once (the runtime links no libcuda).
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      fn = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// A [rows, K] bf16 row-major matrix in boxes of 64 k × box_rows rows.
bool encode(CUtensorMap& map, const uint16_t* base, int64_t rows, int64_t K, int box_rows) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = encoder();
  if (!encode) return false;
  const cuuint64_t dims[2] = {cuuint64_t(K), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(K) * 2};
  const cuuint32_t box[2] = {cuuint32_t(kBK), cuuint32_t(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  return encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<uint16_t*>(base), dims, strides, box,
                element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <int kConsumers>
bool launch(bool split, const uint16_t* x, const GemmOutputs& outs, int64_t M, int64_t K, float* scratch,
            int* arrivals, cudaStream_t stream) {
  using S = Shape<kConsumers>;
  Maps maps{};
  if (!encode(maps.x, x, M, K, S::BM)) return false;
  for (int s = 0; s < outs.count; ++s)
    if (!encode(maps.w[s], outs.w[s], outs.n[s], K, int(kTileCols))) return false;
  auto kernel = gemm_kernel<kConsumers>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, S::kSmemBytes);
  const int64_t chunks = (K + kGemmChunk - 1) / kGemmChunk;
  split = split && chunks > 1;
  const dim3 grid(unsigned(column_tiles<int(kTileCols)>(outs)), unsigned((M + S::BM - 1) / S::BM),
                  unsigned(split ? chunks : 1));
  launch_dependent(kernel, grid, dim3(S::kThreads), S::kSmemBytes, stream, maps, outs, split ? scratch : nullptr,
                   arrivals, M, K);
  return true;
}

}  // namespace

int64_t tile_rows(int consumers) { return 64 * int64_t(consumers); }

int64_t tiles(int consumers, int64_t M, const GemmOutputs& outs) {
  return ((M + tile_rows(consumers) - 1) / tile_rows(consumers)) * column_tiles<int(kTileCols)>(outs);
}

bool runs_here() {
  int* built = nullptr;
  if (cudaMalloc(&built, sizeof(int)) != cudaSuccess) return false;
  int host = 0;
  probe_kernel<<<1, 1>>>(built);
  const bool ok = cudaMemcpy(&host, built, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess;
  cudaFree(built);
  // A device without an image of the probe (not sm_90) leaves an error.
  if (!ok) cudaGetLastError();
  return ok && host == 1 && encoder() != nullptr;
}

bool operands_fit(const uint16_t* x, const GemmOutputs& outs, int64_t M, int64_t K) {
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  bool fit = K % kBK == 0 && K > 0 && M > 0 && M < (int64_t(1) << 31) && K < (int64_t(1) << 31) && aligned(x);
  for (int s = 0; s < outs.count; ++s) fit = fit && aligned(outs.w[s]) && outs.n[s] > 0 && outs.n[s] < (int64_t(1) << 31);
  return fit;
}

bool gemm(int consumers, bool split, const uint16_t* x, const GemmOutputs& outs, int64_t M, int64_t K, float* scratch,
          int* arrivals, cudaStream_t stream) {
  if (!operands_fit(x, outs, M, K)) return false;
  return consumers == 2 ? launch<2>(split, x, outs, M, K, scratch, arrivals, stream)
                        : launch<1>(split, x, outs, M, K, scratch, arrivals, stream);
}

}  // namespace rowlm::cuda::hopper
