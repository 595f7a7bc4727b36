#pragma once
// The tensor-parallel device tests' cases and schedule (issue 17), shared
// by the CPU devices' test (tensor_parallel_devices_test.cc) and the CUDA
// shard backends' (backend/cuda/tensor_parallel_cuda_test.cc), so that both
// run the same models through the same steps and compare against the same
// stand-in hashes.

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <functional>
#include <iomanip>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "kv/kv_cache.h"
#include "model/gemma3.h"
#include "model/gemma4.h"
#include "model/gemma4_weights.h"
#include "model/llama_style.h"
#include "model/model.h"
#include "quant/affine.h"

// ROWLM_SOURCE_DIR: defined by the test targets that include this.
namespace rowlm::tensor_parallel_testing {

using json = nlohmann::json;

inline std::string fixture(const std::string& name) { return std::string(ROWLM_SOURCE_DIR) + "/tests/fixtures/" + name; }

inline uint64_t fnv1a(const std::vector<float>& v) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (std::size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

inline std::string hex(uint64_t h) {
  std::ostringstream s;
  s << "0x" << std::hex << std::setw(16) << std::setfill('0') << h;
  return s.str();
}

// One way to build a model: on `backend`, with `options`.
using Build = std::function<std::unique_ptr<Model>(Backend& backend, const ModelOptions& options)>;

struct Case {
  std::string name;
  Build build;
  std::string codec;
  std::vector<int32_t> prompt, other;
};

// Every logits row of a schedule that exercises the cache across steps:
// four tokens of `other`, then `prompt` in chunks of 3, each beside one more
// token of `other` while it lasts. `prompt_rows`, if given, gets the
// prompt's rows alone. With kv_on_devices the cache places each storage
// layer where the model asks (Model::kv_backends), else all on `backend`.
inline std::vector<float> run(const Case& c, Backend& backend, const ModelOptions& options,
                       std::vector<float>* prompt_rows = nullptr, bool kv_on_devices = true) {
  auto model = c.build(backend, options);
  kv::CacheOptions opt;
  opt.layers = model->kv_layers(kv::parse_codec(c.codec));
  if (kv_on_devices) opt.layer_backends = model->kv_backends();
  opt.block_size = 4;
  kv::KvCache cache(opt, backend);
  const kv::RowId other = cache.create_row(), row = cache.create_row();
  std::vector<float> out;
  Tensor logits;
  auto keep = [&] { out.insert(out.end(), logits.data<float>(), logits.data<float>() + logits.numel()); };
  ForwardBatch head;
  for (int i = 0; i < 4; ++i) head.add(other, i, c.other[std::size_t(i)], true);
  model->forward(head, cache, logits);
  keep();
  for (std::size_t start = 0; start < c.prompt.size(); start += 3) {
    ForwardBatch b;
    const int64_t o = cache.length(other);
    const bool with_other = o < int64_t(c.other.size());
    if (with_other) b.add(other, o, c.other[std::size_t(o)], true);
    for (std::size_t i = start; i < std::min(c.prompt.size(), start + 3); ++i) b.add(row, int64_t(i), c.prompt[i], true);
    model->forward(b, cache, logits);
    keep();
    if (prompt_rows)
      prompt_rows->insert(prompt_rows->end(), logits.data<float>() + (with_other ? logits.dim(1) : 0),
                          logits.data<float>() + logits.numel());
  }
  return out;
}

inline Build from_dir(const std::string& dir) {
  return [dir](Backend& b, const ModelOptions& o) { return load_model(dir, b, o); };
}

inline json small(const char* model_type) {
  return {{"model_type", model_type}, {"vocab_size", 96},        {"hidden_size", 32}, {"intermediate_size", 40},
          {"num_hidden_layers", 3},   {"num_attention_heads", 4}, {"num_key_value_heads", 2},
          {"head_dim", 32}};
}

inline std::vector<Case> cases() {
  const std::vector<int32_t> prompt = {5, 71, 12, 90, 33, 8, 47, 60, 2, 19, 84, 27, 55, 3, 66, 41, 9, 78, 30, 14};
  const std::vector<int32_t> other = {17, 4, 93, 25, 61, 38, 7, 80, 44, 11};
  std::vector<Case> out;
  for (const char* name : {"qwen3/gqa_tied", "llama/linear_untied_bias", "gemma4/e_series"}) {
    std::ifstream in(fixture(name) + "/reference.json");
    const auto ids = json::parse(in)["ids_a"].get<std::vector<int32_t>>();
    std::vector<int32_t> rev(ids.rbegin(), ids.rend());
    rev.resize(std::min<std::size_t>(rev.size(), 8));
    out.push_back({name, from_dir(fixture(name)), "f32", ids, rev});
  }
  json llama = small("llama");
  llama["attention_bias"] = true;
  out.push_back({"llama bias, synthetic", [llama](Backend& b, const ModelOptions& o) {
                   const llama_style::Config c = llama_style::parse_config(llama.dump(), "config.json");
                   return llama_style::make_model(c, llama_style::make_synthetic_weights(c, 11, 0.3f), b, "", o);
                 }, "q8:32", prompt, other});
  json g3 = small("gemma3_text");
  g3["sliding_window"] = 5;
  g3["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention"};
  g3["final_logit_softcapping"] = 15.0;
  out.push_back({"gemma3 windows softcap, synthetic", [g3](Backend& b, const ModelOptions& o) {
                   const gemma3::Config c = gemma3::parse_config(g3.dump(), "config.json");
                   return gemma3::make_model(c, gemma3::make_synthetic_weights(c, 11, 0.3f), b, "", o);
                 }, "q8:32", prompt, other});
  {
    std::ifstream in(fixture("gemma4/dense_keqv/config.json"));
    json config = json::parse(in);
    json& text = config.contains("text_config") ? config["text_config"] : config;
    for (auto& [layer, override_] : text["per_layer_config"].items()) override_["num_key_value_heads"] = 2;
    out.push_back({"gemma4 k=v q4/16, synthetic", [config](Backend& b, const ModelOptions& o) {
                     const gemma4::Config c = gemma4::parse_config(config.dump(), "dense_keqv, 2 KV heads");
                     return gemma4::make_model(c, gemma4::make_synthetic_weights(c, 5, 0.3f, quant::AffineSpec{4, 16}),
                                               b, "", o);
                   }, "f32", prompt, other});
  }
  return out;
}

// The stand-in's hashes: fnv1a(run(c, a 2-thread CPU backend,
// {.tensor_parallel = 2})) printed by tensor_parallel_devices_test.cc's first version, built
// against main at 2795653 (decoder.cc and model.h as there), on the dev
// VM's AVX-512. Every CPU ISA path gives the same bits (cpu_backend.h).
inline uint64_t main_hash(const std::string& name) {
  static const std::vector<std::pair<std::string, uint64_t>> kHashes = {
      {"qwen3/gqa_tied", 0x7519c739b783aa3cull},
      {"llama/linear_untied_bias", 0xf3f0032c66faadf9ull},
      {"gemma4/e_series", 0x115e7dbaf84e7e17ull},
      {"llama bias, synthetic", 0x8d9f73116c020808ull},
      {"gemma3 windows softcap, synthetic", 0xa5086ad06c95487dull},
      {"gemma4 k=v q4/16, synthetic", 0x3f7916cdbde5841cull},
  };
  for (const auto& [n, h] : kHashes)
    if (n == name) return h;
  return 0;
}

// The logits rows of c.prompt prefilled alone in one step, KV where the
// model asks (Model::kv_backends): what run()'s prompt_rows must equal.
inline std::vector<float> alone(const Case& c, Backend& backend, const ModelOptions& options) {
  auto model = c.build(backend, options);
  kv::CacheOptions opt;
  opt.layers = model->kv_layers(kv::parse_codec(c.codec));
  opt.layer_backends = model->kv_backends();
  opt.block_size = 4;
  kv::KvCache cache(opt, backend);
  const kv::RowId row = cache.create_row();
  ForwardBatch all;
  for (std::size_t i = 0; i < c.prompt.size(); ++i) all.add(row, int64_t(i), c.prompt[i], true);
  Tensor logits;
  model->forward(all, cache, logits);
  return std::vector<float>(logits.data<float>(), logits.data<float>() + logits.numel());
}

}  // namespace rowlm::tensor_parallel_testing
