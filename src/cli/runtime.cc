#include "cli/runtime.h"

#include <chrono>
#include <cstdio>
#include <future>
#include <iostream>

#include "backend/factory/make_backend.h"
#include "core/error.h"

namespace rowlm::cli {

void add_runtime_options(Args& args, const std::string& default_codec) {
  add_device_option(args);
  args.option("threads", "N", "CPU threads (0 = one per core)", "0")
      .option("kv-codec", "CODEC",
              "KV storage: f32, bf16, f16, q8, q4 (q8:32 etc. picks the group size), or a per-layer "
              "map such as bf16,3=q8",
              default_codec)
      .option("kv-budget", "BYTES", "KV pool capacity, e.g. 2G (0 = grow as needed)", "0");
  add_matmul_precision_option(args);
  add_tensor_parallel_option(args);
}

void add_tensor_parallel_option(Args& args) {
  args.option("tensor-parallel", "N",
              "split attention heads, KV heads and MLP columns over N shards, summed in a fixed order "
              "(today one after another on the one device: the CPU stand-in of a multi-GPU split)",
              "1");
}

int tensor_parallel_from(const Args& args) {
  const int64_t n = args.get_int("tensor-parallel");
  if (n < 1 || n > 64) throw Error("--tensor-parallel must be between 1 and 64");
  return int(n);
}

void add_device_option(Args& args) {
  args.option("device", "DEVICE",
              "where the model runs: auto (the first GPU if there is one, else the CPU), cpu, cuda or cuda:N", "auto");
}

void add_matmul_precision_option(Args& args) {
  args.option("matmul-precision", "P",
              "f32: activations stay f32 in every matmul (faithful; on the GPU, the CPU's bits); bf16: rounded "
              "to bf16 where they meet bf16 weights (CPU: faster for large batches; GPU: tensor cores); int8 (CPU "
              "only): quantized to 8 bits where they meet 4- and 8-bit quantized weights, as llama.cpp does "
              "(fastest for quantized weights); auto: f32 on the CPU, bf16 on the GPU",
              "auto");
}

MatmulPrecision matmul_precision_from(const Args& args) {
  try {
    return parse_matmul_precision(args.get("matmul-precision"));
  } catch (const Error& e) {
    throw Error(std::string("--matmul-precision: ") + e.what());
  }
}

std::unique_ptr<Engine> open_engine(const EngineOptions& options) {
  auto engine = with_loading_progress(options.model_dir, [&] { return Engine::create(options); });
  announce_device(options.device, engine->model_info());
  return engine;
}

void announce_device(const std::string& requested, const ModelInfo& info) {
  if (requested == "auto") std::fprintf(stderr, "rowlm: running on %s\n", info.device.c_str());
}

std::size_t parse_bytes(const std::string& text, const std::string& what) {
  if (text.empty()) throw Error(what + ": empty size");
  std::size_t mult = 1;
  std::string digits = text;
  switch (text.back()) {
    case 'K': case 'k': mult = std::size_t(1) << 10; digits.pop_back(); break;
    case 'M': case 'm': mult = std::size_t(1) << 20; digits.pop_back(); break;
    case 'G': case 'g': mult = std::size_t(1) << 30; digits.pop_back(); break;
    default: break;
  }
  const int64_t v = parse_int(digits, what);
  if (v < 0) throw Error(what + ": size must not be negative");
  return std::size_t(v) * mult;
}

kv::CacheOptions cache_options_for(const Args& args, const Model& model) {
  kv::CacheOptions opt;
  opt.layers = kv_layers_with_codecs(model, args.get("kv-codec"));
  opt.layer_backends = model.kv_backends();
  opt.capacity_bytes = parse_bytes(args.get("kv-budget"), "--kv-budget");
  return opt;
}

BackendOptions backend_options_from(const Args& args) {
  const int64_t threads = args.get_int("threads");
  if (threads < 0 || threads > 1024) throw Error("--threads must be between 0 and 1024");
  BackendOptions o;
  o.device = args.get("device");
  o.threads = int(threads);
  o.matmul_precision = matmul_precision_from(args);
  return o;
}

Runtime open_runtime(const Args& args, const std::string& model_dir) {
  Runtime rt;
  const int shards = tensor_parallel_from(args);
  ShardedBackends backends;
  try {
    // At --tensor-parallel N > 1 on the CPU: one backend per shard (the model co-owns shards 1 …).
    backends = make_sharded_backends(backend_options_from(args), shards);
  } catch (const Error& e) {
    throw Error(std::string("--device: ") + e.what());
  }
  rt.backend = std::move(backends.model);
  // Loading maps the weights: slow only on a cold page cache or a large model.
  rt.model = with_loading_progress(model_dir, [&] {
    return load_model(model_dir, *rt.backend, {.tensor_parallel = shards, .shard_backends = std::move(backends.others)});
  });
  rt.cache_options = cache_options_for(args, *rt.model);
  announce_device(args.get("device"), rt.model->info());
  return rt;
}

}  // namespace rowlm::cli
