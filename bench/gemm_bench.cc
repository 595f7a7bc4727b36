// rowlm's batch-invariant tensor-core GEMM (backend/cuda/gemm_bf16.h)
// against cuBLAS's own choice (cublasGemmEx, default algorithm: whatever
// kernel its heuristics pick for each shape, not batch-invariant) on the
// Linear shapes of a model, for M = 1, 8, 64, 512, 4096. Prints one JSON
// object per line: the shape, both times (best of `reps`) for one timed
// launch and per launch in a CUDA graph over cold weights (as a decode step
// runs them), the ratios, the achieved TFLOP/s and weight GB/s, and every
// tile configuration's time in the graph, split over K and not. Usage: gemm_bench [e2b|e4b] [reps]

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/gemm_bf16.h"

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "gemm_bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}
void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "gemm_bench: %s: cuBLAS status %d\n", what, int(s));
    std::exit(1);
  }
}

struct DeviceFree {
  void operator()(void* p) const { cudaFree(p); }
};
using DeviceBuffer = std::unique_ptr<void, DeviceFree>;

DeviceBuffer device_buffer(std::size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, std::max<std::size_t>(bytes, 16)), "cudaMalloc");
  return DeviceBuffer(p);
}

// Random bf16 values (the bits of N(0, scale) rounded toward zero: enough for timing).
DeviceBuffer random_bf16(int64_t n, float scale, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<uint16_t> host(static_cast<std::size_t>(n));
  for (auto& v : host) {
    const float f = dist(rng);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    v = uint16_t(u >> 16);
  }
  auto d = device_buffer(host.size() * 2);
  check(cudaMemcpy(d.get(), host.data(), host.size() * 2, cudaMemcpyHostToDevice), "upload");
  return d;
}

template <class F>
double best_seconds(int reps, cudaStream_t stream, F&& run) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  run();  // warm-up
  float best = 1e30f;
  for (int r = 0; r < reps; ++r) {
    check(cudaEventRecord(a, stream), "event");
    run();
    check(cudaEventRecord(b, stream), "event");
    check(cudaEventSynchronize(b), "event");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a, b), "event");
    best = std::min(best, ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return double(best) / 1e3;
}

// Seconds per launch of a CUDA graph of `copies` launches, run(c) for c in
// 0 .. copies - 1 (each on its own weights, so none is in L2 from the one
// before), replayed `reps` times: the best replay over the launches. This is
// how a model's decode step runs them (one graph, back to back), without the
// launch latency a single timed launch carries.
template <class F>
double per_launch_in_graph(int reps, int copies, cudaStream_t stream, F&& run) {
  cudaGraph_t graph;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture");
  for (int c = 0; c < copies; ++c) run(c);
  check(cudaStreamEndCapture(stream, &graph), "end capture");
  cudaGraphExec_t exec;
  check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  const double best = best_seconds(reps, stream, [&] { check(cudaGraphLaunch(exec, stream), "graph launch"); });
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return best / copies;
}

struct Linear {
  const char* name;
  int64_t N, K;
};

}  // namespace

int main(int argc, char** argv) {
  const std::string shape = argc > 1 ? argv[1] : "e4b";
  const int reps = argc > 2 ? std::atoi(argv[2]) : 20;
  // Gemma 4 shapes (../shared/docs/gemma4-spec.md): hidden, attention
  // projections, the MLP and the tied head.
  std::vector<Linear> linears;
  if (shape == "e2b")
    linears = {{"q_proj", 2048, 1536}, {"o_proj", 1536, 2048}, {"gate_up", 6144, 1536},
               {"down_proj", 1536, 6144}, {"lm_head", 262144, 1536}};
  else if (shape == "e4b")
    linears = {{"q_proj", 2048, 2560}, {"o_proj", 2560, 2048}, {"gate_up", 10240, 2560},
               {"down_proj", 2560, 10240}, {"lm_head", 262144, 2560}};
  else {
    std::fprintf(stderr, "gemm_bench: unknown shape '%s' (expected e2b or e4b)\n", shape.c_str());
    return 2;
  }
  int device = 0, sms = 0;
  check(cudaGetDevice(&device), "device");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "SM count");
  const rowlm::cuda::GemmGpu gpu = rowlm::cuda::gemm_gpu();
  std::fprintf(stderr, "gemm_bench: %d SMs, Hopper (wgmma) tiles %s\n", sms, gpu.hopper ? "run" : "do not run here");
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "stream");
  cublasHandle_t blas;
  check(cublasCreate(&blas), "cublasCreate");
  check(cublasSetStream(blas, stream), "cublasSetStream");
  // A workspace of its own, so that cuBLAS allocates nothing while a graph is captured.
  auto blas_workspace = device_buffer(std::size_t(32) << 20);
  check(cublasSetWorkspace(blas, blas_workspace.get(), std::size_t(32) << 20), "cublasSetWorkspace");
  std::mt19937 rng(5);
  for (const Linear& lin : linears) {
    // Copies of the weights at different addresses, together larger than
    // the L2 cache, so that a chain of launches reads them cold as a
    // model's step does (each matrix is read once a step).
    const std::size_t weight_bytes = std::size_t(lin.N * lin.K) * 2;
    const int copies = int(std::clamp<std::size_t>((std::size_t(256) << 20) / weight_bytes + 1, 2, 32));
    std::vector<DeviceBuffer> w;
    w.push_back(random_bf16(lin.N * lin.K, 0.02f, rng));
    for (int c = 1; c < copies; ++c) {
      w.push_back(device_buffer(weight_bytes));
      check(cudaMemcpy(w.back().get(), w[0].get(), weight_bytes, cudaMemcpyDeviceToDevice), "copy weights");
    }
    for (int64_t M : {1, 8, 64, 512, 4096}) {
      auto x = random_bf16(M * lin.K, 1.0f, rng);
      auto y = device_buffer(std::size_t(M * lin.N) * 4);
      // Split tiles need chunks · M · N floats; beyond 2 GiB they are left out.
      const std::size_t split_bytes = rowlm::cuda::gemm_bf16_split_scratch_bytes(M, lin.N, lin.K);
      const bool splits_fit = split_bytes <= (std::size_t(2) << 30);
      auto scratch = device_buffer(std::max(rowlm::cuda::gemm_bf16_scratch_bytes(M, lin.N, lin.K, gpu),
                                            splits_fit ? split_bytes : 0));
      auto arrivals = device_buffer(std::size_t(rowlm::cuda::kGemmArrivals) * sizeof(int));
      check(cudaMemset(arrivals.get(), 0, std::size_t(rowlm::cuda::kGemmArrivals) * sizeof(int)), "arrivals");
      const auto* xp = static_cast<const uint16_t*>(x.get());
      auto* yp = static_cast<float*>(y.get());
      auto weights = [&](int c) { return static_cast<const uint16_t*>(w[std::size_t(c)].get()); };
      auto ours = [&](int c) {
        rowlm::cuda::gemm_bf16(xp, weights(c), yp, M, lin.N, lin.K, static_cast<float*>(scratch.get()),
                               static_cast<int*>(arrivals.get()), gpu, stream);
      };
      // Row-major y[M, N] = x[M, K] · w[N, K]ᵀ is column-major yᵀ = w-as-[K, N]ᵀ · xᵀ.
      const float alpha = 1.0f, beta = 0.0f;
      auto theirs = [&](int c) {
        check(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, int(lin.N), int(M), int(lin.K), &alpha, weights(c),
                           CUDA_R_16BF, int(lin.K), xp, CUDA_R_16BF, int(lin.K), &beta, yp, CUDA_R_32F, int(lin.N),
                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              "cublasGemmEx");
      };
      const double ours_single = best_seconds(reps, stream, [&] { ours(0); });
      const double theirs_single = best_seconds(reps, stream, [&] { theirs(0); });
      const double ours_chain = per_launch_in_graph(reps, copies, stream, ours);
      const double theirs_chain = per_launch_in_graph(reps, copies, stream, theirs);
      const double flops = 2.0 * double(M) * double(lin.N) * double(lin.K);
      std::printf(
          "{\"shape\":\"%s\",\"linear\":\"%s\",\"M\":%lld,\"N\":%lld,\"K\":%lld,\"rowlm_us\":%.2f,"
          "\"cublas_us\":%.2f,\"rowlm_over_cublas_speed\":%.3f,\"rowlm_tflop_s\":%.1f,\"cublas_tflop_s\":%.1f,"
          "\"rowlm_graph_us\":%.2f,\"cublas_graph_us\":%.2f,\"graph_rowlm_over_cublas_speed\":%.3f,"
          "\"rowlm_graph_weight_gb_s\":%.0f,\"cublas_graph_weight_gb_s\":%.0f",
          shape.c_str(), lin.name, (long long)M, (long long)lin.N, (long long)lin.K, ours_single * 1e6,
          theirs_single * 1e6, theirs_single / ours_single, flops / ours_single / 1e12, flops / theirs_single / 1e12,
          ours_chain * 1e6, theirs_chain * 1e6, theirs_chain / ours_chain, double(weight_bytes) / ours_chain / 1e9,
          double(weight_bytes) / theirs_chain / 1e9);
      // Every tile, split over K and not, on the same chain (each gives the
      // same bits: gemm_bf16_test); tiles of fewer than 128 rows are left
      // out where they would take more than 8 row tiles.
      std::printf(",\"tiles_graph_us\":{");
      const char* sep = "";
      for (rowlm::cuda::GemmTile tile : rowlm::cuda::kGemmTiles) {
        const int64_t rows = rowlm::cuda::gemm_tile_rows(tile);
        if (!rowlm::cuda::gemm_tile_runs(tile, gpu)) continue;
        if (rows < 128 && (M + rows - 1) / rows > 8) continue;
        for (bool split : {false, true}) {
          if (split && !splits_fit) continue;
          const double t = per_launch_in_graph(reps, copies, stream, [&](int c) {
            rowlm::cuda::gemm_bf16_with(tile, split, xp, weights(c), yp, M, lin.N, lin.K,
                                        static_cast<float*>(scratch.get()), static_cast<int*>(arrivals.get()), stream);
          });
          std::printf("%s\"%s%s\":%.2f", sep, rowlm::cuda::gemm_tile_name(tile), split ? "_split" : "", t * 1e6);
          sep = ",";
        }
      }
      std::printf("}");
      std::printf("}\n");
      std::fflush(stdout);
    }
  }
  cublasDestroy(blas);
  cudaStreamDestroy(stream);
  return 0;
}
