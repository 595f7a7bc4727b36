// Every new family on random weights, for every KV codec: a prompt prefilled in
// one step gives bitwise the logits of the same prompt fed one token at a
// time, and a row's logits are bitwise the same alone (1 thread) and
// batched with another row at other positions (2 threads). Prompts run
// past three windows. (The numerics against transformers are in
// transformers_reference_test.cc; this holds with or without fixtures.)

#include <gtest/gtest.h>

#include <cstring>

#include <nlohmann/json.hpp>

#include "backend/factory/make_backend.h"
#include "kv/kv_cache.h"
#include "model/gemma3.h"
#include "model/llama_style.h"
#include "model/model.h"

namespace rowlm {
namespace {

using json = nlohmann::json;

struct Case {
  const char* name;
  const char* codec;
  json config;
};

json base(const char* model_type) {
  return {{"model_type", model_type}, {"vocab_size", 96},        {"hidden_size", 32}, {"intermediate_size", 40},
          {"num_hidden_layers", 3},   {"num_attention_heads", 4}, {"num_key_value_heads", 2},
          {"head_dim", 32}};  // a whole q8/q4 group
}

std::vector<Case> cases() {
  json llama = base("llama");
  llama["rope_parameters"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                              {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 32}};
  llama["attention_bias"] = true;
  json mistral = base("mistral");
  mistral["sliding_window"] = 5;
  json qwen2 = base("qwen2");
  qwen2["use_sliding_window"] = true;
  qwen2["sliding_window"] = 5;
  qwen2["max_window_layers"] = 1;
  json gemma3 = base("gemma3_text");
  gemma3["sliding_window"] = 5;
  gemma3["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention"};
  gemma3["final_logit_softcapping"] = 15.0;
  json moe = base("qwen3_moe");
  moe["num_experts"] = 5;
  moe["num_experts_per_tok"] = 2;
  moe["moe_intermediate_size"] = 12;
  moe["mlp_only_layers"] = {1};
  moe["norm_topk_prob"] = true;
  moe["use_sliding_window"] = true;
  moe["sliding_window"] = 5;
  std::vector<Case> out;
  for (const char* codec : {"f32", "bf16", "f16", "q8:32", "q4:32"}) {
    out.push_back({"llama", codec, llama});
    out.push_back({"mistral", codec, mistral});
    out.push_back({"qwen2", codec, qwen2});
    out.push_back({"gemma3", codec, gemma3});
    out.push_back({"qwen3_moe", codec, moe});
  }
  return out;
}

std::unique_ptr<Model> make(const json& config, Backend& backend) {
  const std::string text = config.dump();
  if (config["model_type"] == "gemma3_text") {
    const gemma3::Config c = gemma3::parse_config(text, "config.json");
    return gemma3::make_model(c, gemma3::make_synthetic_weights(c, 11, 0.3f), backend);
  }
  const llama_style::Config c = llama_style::parse_config(text, "config.json");
  return llama_style::make_model(c, llama_style::make_synthetic_weights(c, 11, 0.3f), backend);
}

struct Harness {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
  std::unique_ptr<kv::KvCache> cache;
  Harness(const Case& c, int threads) : backend(make_backend({"cpu", threads})), model(make(c.config, *backend)) {
    kv::CacheOptions opt;
    opt.layers = model->kv_layers(kv::parse_codec(c.codec));
    opt.block_size = 4;
    cache = std::make_unique<kv::KvCache>(opt, *backend);
  }
  // Feeds `ids` from position 0 in chunks of `chunk`; logits of every fed token.
  std::vector<float> feed(kv::RowId row, const std::vector<int32_t>& ids, std::size_t chunk) {
    std::vector<float> out;
    for (std::size_t start = 0; start < ids.size(); start += chunk) {
      ForwardBatch b;
      for (std::size_t i = start; i < std::min(ids.size(), start + chunk); ++i) b.add(row, int64_t(i), ids[i], true);
      Tensor logits;
      model->forward(b, *cache, logits);
      out.insert(out.end(), logits.data<float>(), logits.data<float>() + logits.numel());
    }
    return out;
  }
};

class FamilyInvariance : public ::testing::TestWithParam<Case> {};

const std::vector<int32_t> kPrompt = {5, 71, 12, 90, 33, 8, 47, 60, 2, 19, 84, 27, 55, 3, 66, 41, 9, 78, 30, 14, 52, 88};
const std::vector<int32_t> kOther = {17, 4, 93, 25, 61, 38, 7, 80, 44, 11};

TEST_P(FamilyInvariance, PrefillEqualsDecodeAndBatchedEqualsSolo) {
  const Case& c = GetParam();
  Harness solo(c, 1);
  const std::vector<float> prefill = solo.feed(solo.cache->create_row(), kPrompt, kPrompt.size());
  const std::vector<float> decode = solo.feed(solo.cache->create_row(), kPrompt, 1);
  ASSERT_EQ(prefill.size(), decode.size());
  EXPECT_EQ(std::memcmp(prefill.data(), decode.data(), prefill.size() * sizeof(float)), 0)
      << c.name << " " << c.codec << ": prefill and token-by-token decode differ";

  // Batched: another row a few tokens ahead shares every step, in chunks of 3.
  Harness mixed(c, 2);
  const kv::RowId other = mixed.cache->create_row(), row = mixed.cache->create_row();
  ForwardBatch head;
  for (int i = 0; i < 4; ++i) head.add(other, i, kOther[std::size_t(i)], false);
  Tensor ignored;
  mixed.model->forward(head, *mixed.cache, ignored);
  std::vector<float> batched;
  const int64_t V = mixed.model->info().vocab_size;
  for (std::size_t start = 0; start < kPrompt.size(); start += 3) {
    ForwardBatch b;
    const int64_t o = mixed.cache->length(other);
    if (o < int64_t(kOther.size())) b.add(other, o, kOther[std::size_t(o)], true);
    const std::size_t end = std::min(kPrompt.size(), start + 3);
    for (std::size_t i = start; i < end; ++i) b.add(row, int64_t(i), kPrompt[i], true);
    Tensor logits;
    mixed.model->forward(b, *mixed.cache, logits);
    const int64_t first = o < int64_t(kOther.size()) ? 1 : 0;
    batched.insert(batched.end(), logits.data<float>() + first * V, logits.data<float>() + logits.numel());
  }
  ASSERT_EQ(batched.size(), prefill.size());
  EXPECT_EQ(std::memcmp(batched.data(), prefill.data(), prefill.size() * sizeof(float)), 0)
      << c.name << " " << c.codec << ": batched logits differ from solo";
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyInvariance, ::testing::ValuesIn(cases()), [](const auto& param_info) {
  std::string n = std::string(param_info.param.name) + "_" + param_info.param.codec;
  for (char& ch : n)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});

}  // namespace
}  // namespace rowlm
