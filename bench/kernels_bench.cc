// CPU kernel throughput against the machine's ceilings, as JSON:
//   GEMV (M = 1) weight streaming in GB/s and % of the measured read bandwidth,
//   GEMM (prefill) in GFLOP/s and % of the measured f32 FMA peak,
// for bf16, f16 and f32 weights; and batched decode (M = 1, 4, 16 rows
// against bf16 weights) with f32 and bf16 matmul precision, against the FMA
// and bf16-dot peaks, bf16 also in AMX's order (on the AVX-512 vector units,
// and on the tiles where the CPU has AMX). Weight sets are cycled so that
// every matmul reads its weights from DRAM, never from the last-level cache,
// as in a forward pass.
//
//   kernels_bench [--threads N] [--isa scalar|avx2|avx512] [--only gemv|gemm|e2b|batch] [--quick]
//                 [--schedules KB:ITEMS:SPLIT,...]
// (--only e2b: the GEMMs of a 256-token prefill of Gemma 4 E2B, layer by layer.
// --schedules: the GEMMs run under each matmul schedule in turn, shape by
// shape: chunk KiB, items per thread and the rows from which M is split
// before chunks shrink (cpu::MatmulTuning; 0: never); default 1024:4:0.)

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/amx_bf16.h"
#include "backend/cpu/ceilings.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace rowlm {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Weights with ordinary values (no zeros, no subnormals) in the given dtype.
Tensor make_weights(DType dtype, int64_t N, int64_t K, uint32_t seed) {
  Tensor w(dtype, {N, K});
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-0.05f, 0.05f);
  float table[256];
  for (float& v : table) v = dist(rng);
  const int64_t n = w.numel();
  for (int64_t i = 0; i < n; ++i) {
    const float v = table[(i * 7 + seed) & 255];
    if (dtype == DType::F32) w.data<float>()[i] = v;
    else w.data<uint16_t>()[i] = dtype == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
  }
  return w;
}

Tensor make_activations(int64_t M, int64_t K) {
  Tensor x(DType::F32, {M, K});
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = dist(rng);
  return x;
}

// Which matmul runs: the kernel table's (cpu::matmul, in the precision
// asked for), or the bf16 matmul in AMX's order on the vector units
// (cpu::matmul_amx_bf16_rows) or on the tiles (cpu::matmul_amx_bf16, every M).
enum class Route { Table, AmxVector, AmxTiles };

const char* route_name(Route route) {
  switch (route) {
    case Route::Table: return "table";
    case Route::AmxVector: return "amx_order_vector";
    case Route::AmxTiles: return "amx_order_tiles";
  }
  return "";
}

struct Bench {
  const cpu::Kernels& kernels;
  ThreadPool& pool;

  // Best seconds per matmul over `passes` passes through enough copies of
  // the weights to exceed the last-level cache several times: a forward
  // pass reads each weight matrix from DRAM, never from cache.
  double seconds_per_matmul(DType dtype, int64_t M, int64_t N, int64_t K, int passes,
                            MatmulPrecision precision = MatmulPrecision::F32, Route route = Route::Table,
                            const cpu::MatmulTuning& tuning = {}) {
    const double bytes = double(N) * double(K) * double(dtype_size(dtype));
    const int copies = int(std::clamp(std::ceil(256e6 / bytes), 1.0, 16.0));  // 8x the L3
    std::vector<Tensor> ws;
    for (int c = 0; c < copies; ++c) ws.push_back(make_weights(dtype, N, K, uint32_t(c + 1)));
    const Tensor x = make_activations(M, K);
    Tensor y(DType::F32, {M, N});
    auto pass = [&] {
      for (const Tensor& w : ws) {
        if (route == Route::AmxVector)
          cpu::matmul_amx_bf16_rows(pool, x.data<float>(), M, K, w.data<uint16_t>(), K, N, y.data<float>());
        else if (route == Route::AmxTiles)
          cpu::matmul_amx_bf16(pool, x.data<float>(), M, K, w.data<uint16_t>(), K, N, y.data<float>(),
                               cpu::MatmulTuning{.amx_vector_rows = 0});
        else
          cpu::matmul(kernels, pool, x.data<float>(), M, K, cpu::WeightRows{w.dtype(), w.raw(), K}, N,
                      y.data<float>(), precision, tuning);
      }
    };
    pass();  // warm-up
    double best = 1e300;
    for (int p = 0; p < passes; ++p) {
      const auto start = Clock::now();
      pass();
      best = std::min(best, seconds_since(start) / copies);
    }
    return best;
  }
};

// "KB:ITEMS:SPLIT,..." -> one tuning each (chunk KiB, items per thread,
// rows from which M is split first).
std::vector<cpu::MatmulTuning> parse_schedules(const std::string& list) {
  std::vector<cpu::MatmulTuning> out;
  std::size_t at = 0;
  while (at <= list.size()) {
    const std::size_t end = std::min(list.find(',', at), list.size());
    const std::string item = list.substr(at, end - at);
    long long kb = 0, items = 0, split = 0;
    char tail = 0;
    if (std::sscanf(item.c_str(), "%lld:%lld:%lld%c", &kb, &items, &split, &tail) != 3 || kb < 1 || items < 1 ||
        split < 0)
      throw Error("--schedules: '" + item + "' is not KB:ITEMS:SPLIT (KB, ITEMS >= 1, SPLIT >= 0)");
    cpu::MatmulTuning t;
    t.chunk_bytes = int64_t(kb) << 10;
    t.items_per_thread = items;
    t.split_rows_from = split;
    out.push_back(t);
    at = end + 1;
  }
  return out;
}

int run_bench(int argc, char** argv) {
  int threads = 0;
  bool quick = false;
  std::string only;
  std::vector<cpu::MatmulTuning> schedules;
  cpu::Isa isa = cpu::isa_from_env();
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (arg == "--isa" && i + 1 < argc) isa = cpu::parse_isa(argv[++i]);
    else if (arg == "--quick") quick = true;
    else if (arg == "--only" && i + 1 < argc) only = argv[++i];
    else if (arg == "--schedules" && i + 1 < argc) schedules = parse_schedules(argv[++i]);
    else
      throw Error("unknown argument '" + arg +
                  "' (use --threads N, --isa NAME, --only gemv|gemm|e2b|batch, --quick, --schedules KB:ITEMS:SPLIT,...)");
  }
  if (schedules.empty()) schedules.push_back({});
  if (!only.empty() && only != "gemv" && only != "gemm" && only != "e2b" && only != "batch")
    throw Error("--only must be gemv, gemm, e2b or batch, got '" + only + "'");
  ThreadPool pool(threads);
  Bench bench{cpu::kernels_for(isa), pool};

  const double bandwidth = cpu::measure_read_bandwidth(pool);
  const double peak = cpu::measure_fma_peak(pool);
  const double bf16_peak = cpu::measure_bf16_dot_peak(pool);
  std::printf("{\n  \"isa\": \"%s\",\n  \"threads\": %d,\n", std::string(cpu::isa_name(isa)).c_str(), pool.size());
  std::printf("  \"read_bandwidth_gbps\": %.2f,\n  \"fma_peak_gflops\": %.1f,\n  \"bf16_dot_peak_gflops\": %.1f,\n",
              bandwidth, peak, bf16_peak);

  struct Gemv { int64_t N, K; };
  std::vector<Gemv> gemvs = {{2048, 8192}, {8192, 2048}, {262144, 1536}};
  if (quick) gemvs.resize(2);
  if (!only.empty() && only != "gemv") gemvs.clear();
  std::printf("  \"gemv\": [");
  const char* sep = "\n";
  for (DType dt : {DType::BF16, DType::F16, DType::F32})
    for (const Gemv& g : gemvs) {
      const double gbps = double(g.N) * double(g.K) * double(dtype_size(dt)) /
                          bench.seconds_per_matmul(dt, 1, g.N, g.K, quick ? 2 : 3) / 1e9;
      std::printf("%s    {\"dtype\": \"%s\", \"N\": %lld, \"K\": %lld, \"gbps\": %.2f, \"pct_bandwidth\": %.1f}",
                  sep, std::string(dtype_name(dt)).c_str(), (long long)g.N, (long long)g.K, gbps,
                  100.0 * gbps / bandwidth);
      sep = ",\n";
      std::fflush(stdout);
    }
  std::printf("\n  ],\n");

  struct Gemm { int64_t M, N, K; };
  std::vector<Gemm> gemms = {{64, 2048, 2560}, {128, 4096, 2560}, {512, 2560, 10240}, {512, 10240, 2560}};
  if (quick) gemms = {{64, 2048, 2560}, {256, 2048, 2560}};
  if (only == "e2b")  // a 256-token prefill's linears in Gemma 4 E2B: q, k/v, o, gate/up and down
                      // (single and double-wide MLP), the per-layer input's gate and projection
    gemms = {{256, 2048, 1536}, {256, 256, 1536}, {256, 1536, 2048}, {256, 6144, 1536}, {256, 1536, 6144},
             {256, 12288, 1536}, {256, 1536, 12288}, {256, 256, 1536}, {256, 1536, 256}};
  if (only == "gemv" || only == "batch") gemms.clear();
  std::printf("  \"gemm\": [");
  sep = "\n";
  const std::vector<DType> gemm_dtypes =
      only == "e2b" ? std::vector<DType>{DType::BF16} : std::vector<DType>{DType::BF16, DType::F16, DType::F32};
  for (DType dt : gemm_dtypes)
    for (const Gemm& g : gemms)
      for (const cpu::MatmulTuning& t : schedules) {
        const double gflops = 2.0 * double(g.M) * double(g.N) * double(g.K) /
                              bench.seconds_per_matmul(dt, g.M, g.N, g.K, quick ? 1 : 2, MatmulPrecision::F32,
                                                       Route::Table, t) /
                              1e9;
        std::printf("%s    {\"dtype\": \"%s\", \"M\": %lld, \"N\": %lld, \"K\": %lld, \"schedule\": \"%lld:%lld:%lld\", "
                    "\"gflops\": %.1f, \"pct_fma_peak\": %.1f}",
                    sep, std::string(dtype_name(dt)).c_str(), (long long)g.M, (long long)g.N, (long long)g.K,
                    (long long)(t.chunk_bytes >> 10), (long long)t.items_per_thread, (long long)t.split_rows_from,
                    gflops, 100.0 * gflops / peak);
        sep = ",\n";
        std::fflush(stdout);
      }
  std::printf("\n  ],\n");

  // Batched decode: a few rows against weights streamed from DRAM, where
  // the bf16-dot path's doubled multiply-add rate shows; bf16 also in AMX's
  // order, where decode's few rows leave the tiles for the vector units.
  std::vector<Gemv> batch_shapes = {{8192, 1536}, {1536, 12288}};
  std::vector<int64_t> batch_rows = {1, 4, 16};
  if (quick) batch_shapes.resize(1);
  if (!only.empty() && only != "batch") batch_shapes.clear();
  struct Variant {
    MatmulPrecision precision;
    Route route;
  };
  std::vector<Variant> variants = {{MatmulPrecision::F32, Route::Table}, {MatmulPrecision::Bf16, Route::Table}};
  if (cpu::isa_supported(cpu::Isa::Avx512)) variants.push_back({MatmulPrecision::Bf16, Route::AmxVector});
  if (cpu::amx_bf16_usable()) variants.push_back({MatmulPrecision::Bf16, Route::AmxTiles});
  std::printf("  \"batched_decode\": [");
  sep = "\n";
  for (const Gemv& g : batch_shapes)
    for (int64_t M : batch_rows)
      for (const Variant& v : variants) {
        const double seconds =
            bench.seconds_per_matmul(DType::BF16, M, g.N, g.K, quick ? 2 : 3, v.precision, v.route);
        const double gflops = 2.0 * double(M) * double(g.N) * double(g.K) / seconds / 1e9;
        const double gbps = double(g.N) * double(g.K) * 2.0 / seconds / 1e9;
        const double compute_peak = v.precision == MatmulPrecision::Bf16 ? bf16_peak : peak;
        std::printf("%s    {\"precision\": \"%s\", \"path\": \"%s\", \"M\": %lld, \"N\": %lld, \"K\": %lld, "
                    "\"gflops\": %.1f, \"pct_compute_peak\": %.1f, \"gbps\": %.2f, \"pct_bandwidth\": %.1f}",
                    sep, std::string(matmul_precision_name(v.precision)).c_str(), route_name(v.route),
                    (long long)M, (long long)g.N, (long long)g.K, gflops, 100.0 * gflops / compute_peak, gbps,
                    100.0 * gbps / bandwidth);
        sep = ",\n";
        std::fflush(stdout);
      }
  std::printf("\n  ]\n}\n");
  return 0;
}

}  // namespace
}  // namespace rowlm

int main(int argc, char** argv) {
  try {
    return rowlm::run_bench(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kernels_bench: %s\n", e.what());
    return 1;
  }
}
