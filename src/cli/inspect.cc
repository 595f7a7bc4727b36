// rowlm inspect: what a model directory holds and what it costs to run.

#include <cstdio>
#include <iostream>
#include <map>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_source.h"
#include "cli/runtime.h"
#include "core/error.h"
#include "kvcodec/codec.h"
#include "model/mlx_checkpoint.h"

namespace rowlm::cli {

int run_inspect(const std::vector<std::string>& argv) {
  Args args("inspect", "Prints a model's architecture, parameter count, weight bytes, and the KV cache\n"
                       "bytes per token for each layer type and KV codec.");
  add_model_argument(args).flag("json", "print JSON");
  add_runtime_options(args, "bf16");
  if (!args.parse(argv)) return 0;
  const std::string model_dir = model_source_from(args).dir;
  Runtime rt = open_runtime(args, model_dir);
  const ModelInfo& info = rt.model->info();

  nlohmann::json j;
  j["architecture"] = info.architecture;
  j["summary"] = rt.model->describe();
  j["device"] = info.device;
  j["parameters"] = info.parameter_count;
  j["weight_bytes"] = info.weight_bytes;
  j["vocab_size"] = info.vocab_size;
  j["layers"] = info.num_layers;
  j["max_position"] = info.max_position;
  j["tensor_parallel"] = info.tensor_parallel;
  // KV bytes per token: per storage layer geometry (window/full), for every
  // codec. Split over N shards, a storage layer is one shard's KV heads.
  nlohmann::json kv = nlohmann::json::object();
  // A codec that does not fit the layers (a quantized group wider than
  // head_dim) is reported as null with the reason.
  for (const char* codec : {"f32", "bf16", "f16", "q8", "q4"}) {
    const std::vector<kv::LayerSpec> layers = rt.model->kv_layers(kv::parse_codec(codec));
    std::size_t sliding = 0, full = 0, total = 0;
    int n_sliding = 0, n_full = 0;
    try {
      for (std::size_t l = 0; l < layers.size(); ++l) {
        kv::check_layer_spec(layers[l], int(l));
        const std::size_t b = kv::token_record_bytes(layers[l]);
        total += b;
        if (layers[l].window > 0) { sliding = b; ++n_sliding; } else { full = b; ++n_full; }
      }
    } catch (const Error& e) {
      kv[codec] = {{"not_applicable", e.what()}};
      continue;
    }
    kv[codec] = {{"per_sliding_layer", sliding}, {"per_full_layer", full}, {"sliding_layers", n_sliding},
                 {"full_layers", n_full}, {"all_layers", total}};
  }
  j["kv_bytes_per_token"] = kv;
  // Each stored tensor: its format (dtype, or qBITS/GROUP with the scales'
  // dtype for an MLX-quantized matrix) and its bytes as stored.
  const std::vector<TensorFormat> tensors = tensor_formats(model_dir);
  j["tensors"] = nlohmann::json::array();
  for (const TensorFormat& t : tensors)
    j["tensors"].push_back({{"name", t.name}, {"format", t.format}, {"shape", t.shape}, {"bytes", t.bytes}});
  if (args.flag_set("json")) {
    std::cout << j.dump(1) << "\n";
    return 0;
  }
  std::printf("%s\n\n", rt.model->describe().c_str());
  std::printf("device         %s\n", info.device.c_str());
  std::printf("parameters     %lld (%.1f M)\n", (long long)info.parameter_count, info.parameter_count / 1e6);
  std::printf("weight bytes   %zu (%.1f MB)\n", info.weight_bytes, info.weight_bytes / 1e6);
  if (info.tensor_parallel > 1)
    std::printf("tensor parallel %d shards (a storage layer below is one shard's KV heads)\n", info.tensor_parallel);
  std::printf("\nKV cache bytes per token (storage layers: %d sliding, %d full)\n",
              int(kv["bf16"]["sliding_layers"]), int(kv["bf16"]["full_layers"]));
  std::printf("  %-6s %14s %14s %14s\n", "codec", "sliding layer", "full layer", "all layers");
  for (const char* codec : {"f32", "bf16", "f16", "q8", "q4"}) {
    if (kv[codec].contains("not_applicable")) {
      std::printf("  %-6s %s\n", codec, std::string(kv[codec]["not_applicable"]).c_str());
      continue;
    }
    std::printf("  %-6s %14zu %14zu %14zu\n", codec, std::size_t(kv[codec]["per_sliding_layer"]),
                std::size_t(kv[codec]["per_full_layer"]), std::size_t(kv[codec]["all_layers"]));
  }
  std::map<std::string, std::pair<int, std::size_t>> by_format;
  for (const TensorFormat& t : tensors) {
    by_format[t.format].first += 1;
    by_format[t.format].second += t.bytes;
  }
  std::printf("\nstored tensors by format\n");
  for (const auto& [format, n] : by_format)
    std::printf("  %-24s %6d tensors %14zu bytes\n", format.c_str(), n.first, n.second);
  std::printf("\ntensors\n");
  for (const TensorFormat& t : tensors)
    std::printf("  %-64s %-24s %-18s %12zu\n", t.name.c_str(), t.format.c_str(), shape_str(t.shape).c_str(), t.bytes);
  return 0;
}

}  // namespace rowlm::cli
