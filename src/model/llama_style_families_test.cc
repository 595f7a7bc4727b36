// Llama, Mistral, Qwen 2 and Qwen 3 MoE configs and checkpoints: each
// model_type's defaults (transformers 5.17's config classes), the features
// its modeling file has, the fields that contradict each other, and the
// expert layouts checkpoints use. The numerics against transformers are in
// transformers_reference_test.cc.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "backend/factory/make_backend.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "io/temp_dir.h"
#include "kv/kv_cache.h"
#include "model/llama_style.h"
#include "model/model.h"

namespace rowlm::llama_style {
namespace {

using json = nlohmann::json;

json small(const char* model_type) {
  return {{"model_type", model_type}, {"vocab_size", 64},         {"hidden_size", 32},
          {"intermediate_size", 48},  {"num_hidden_layers", 4},   {"num_attention_heads", 4}};
}

Config parse(const json& j) { return parse_config(j.dump(), "config.json"); }

std::string family_config_error(const json& j) {
  try {
    parse(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(LlamaConfig, DefaultsAndFeatures) {
  const Config c = parse(small("llama"));
  EXPECT_EQ(c.family, "Llama");
  EXPECT_EQ(c.head_dim, 8);       // hidden / heads
  EXPECT_EQ(c.num_kv_heads, 4);   // absent: one per query head
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{2});
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.sliding_window, 0);
  const decoder::DecoderConfig d = decoder_config(c);
  EXPECT_FALSE(d.layers[0].attention.qk_norm);
  EXPECT_EQ(d.layers[3].ffn.kind, decoder::FfnKind::Dense);
  EXPECT_FLOAT_EQ(d.layers[0].attention.scale, 1.0f / std::sqrt(8.0f));

  json j = small("llama");
  j["attention_bias"] = true;
  j["head_dim"] = 16;  // Llama 3.2-style explicit head_dim
  const Config b = parse(j);
  EXPECT_TRUE(b.qkv_bias);
  EXPECT_TRUE(b.o_bias);
  EXPECT_EQ(b.head_dim, 16);
  j["head_dim"] = nullptr;
  EXPECT_EQ(parse(j).head_dim, 8);
}

TEST(LlamaConfig, Llama3ScalingInBothSerialisations) {
  // Hub Llama 3.x: top-level rope_theta beside rope_scaling.
  json j = small("llama");
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 32.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  const Config hub = parse(j);
  EXPECT_EQ(hub.rope.type, rope::RopeType::Llama3);
  EXPECT_EQ(hub.rope.theta, 500000.0);
  EXPECT_EQ(hub.rope.factor, 32.0);
  EXPECT_EQ(hub.rope.original_max_position, 8192);
  // transformers 5: everything inside rope_parameters.
  json v5 = small("llama");
  v5["rope_parameters"] = j["rope_scaling"];
  v5["rope_parameters"]["rope_theta"] = 500000.0;
  const Config five = parse(v5);
  EXPECT_EQ(decoder_config(five).ropes[0].inv_freq, decoder_config(hub).ropes[0].inv_freq);
  // Contradictions are named.
  v5["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  EXPECT_NE(family_config_error(v5).find("'rope_scaling' contradicts rope_parameters"), std::string::npos);
  j["original_max_position_embeddings"] = 4096;
  EXPECT_NE(family_config_error(j).find("'original_max_position_embeddings' contradicts rope_scaling.original_max_position_embeddings"),
            std::string::npos);
}

TEST(LlamaConfig, UnsupportedFieldsAreNamed) {
  auto with = [](const char* key, json value) {
    json j = small("llama");
    j[key] = std::move(value);
    return j;
  };
  EXPECT_NE(family_config_error(with("mlp_bias", true)).find("mlp_bias"), std::string::npos);
  EXPECT_NE(family_config_error(with("partial_rotary_factor", 0.5)).find("partial_rotary_factor"), std::string::npos);
  EXPECT_NE(family_config_error(with("hidden_size", 30)).find("'hidden_size'"), std::string::npos);  // not divisible by heads
  EXPECT_NE(family_config_error(with("rope_scaling", {{"type", "yarn"}, {"factor", 4.0}})).find("rope_scaling.type"),
            std::string::npos);
  EXPECT_NE(family_config_error(with("model_type", "llama4")).find("model_type"), std::string::npos);
}

TEST(MistralConfig, WindowOnEveryLayerUnlessNull) {
  json j = small("mistral");
  j["num_key_value_heads"] = 2;
  const Config c = parse(j);
  EXPECT_EQ(c.family, "Mistral");
  EXPECT_EQ(c.sliding_window, 4096);  // MistralConfig's default
  EXPECT_EQ(c.sliding, std::vector<bool>(4, true));
  EXPECT_EQ(c.bos_token_id, 1);
  j["sliding_window"] = 7;
  const Config w = parse(j);
  EXPECT_EQ(w.sliding_window, 7);
  const decoder::DecoderConfig d = decoder_config(w);
  for (const auto& l : d.layers) EXPECT_EQ(l.attention.window, 7);
  j["sliding_window"] = nullptr;
  EXPECT_EQ(parse(j).sliding, std::vector<bool>(4, false));
  EXPECT_EQ(parse(j).sliding_window, 0);
  j["layer_types"] = {"sliding_attention", "full_attention", "full_attention", "full_attention"};
  EXPECT_NE(family_config_error(j).find("'layer_types' contradicts sliding_window"), std::string::npos);
}

TEST(MistralConfig, DefaultKvHeadsAreEight) {
  json j = small("mistral");
  j["num_attention_heads"] = 16;
  j["hidden_size"] = 64;
  EXPECT_EQ(parse(j).num_kv_heads, 8);
  EXPECT_EQ(parse(j).head_dim, 4);
}

TEST(Qwen2Config, QkvBiasesAndQwenWindows) {
  json j = small("qwen2");
  EXPECT_NE(family_config_error(j).find("num_key_value_heads (32)"), std::string::npos);  // Qwen2Config's default
  j["num_key_value_heads"] = nullptr;  // null: one per query head
  EXPECT_EQ(parse(j).num_kv_heads, 4);
  j["num_key_value_heads"] = 2;
  const Config c = parse(j);
  EXPECT_EQ(c.family, "Qwen 2");
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.bos_token_id, -1);
  EXPECT_EQ(c.sliding_window, 0);  // use_sliding_window defaults to false
  j["use_sliding_window"] = true;
  j["sliding_window"] = 6;
  j["max_window_layers"] = 3;
  const Config s = parse(j);
  EXPECT_EQ(s.sliding, (std::vector<bool>{false, false, false, true}));
  EXPECT_EQ(s.sliding_window, 6);
}

json moe() {
  json j = small("qwen3_moe");
  j["num_key_value_heads"] = 2;
  j["head_dim"] = 12;
  j["num_experts"] = 6;
  j["num_experts_per_tok"] = 2;
  j["moe_intermediate_size"] = 16;
  return j;
}

TEST(Qwen3MoeConfig, SparseLayersFromStepAndMlpOnlyLayers) {
  json j = moe();
  const Config c = parse(j);
  EXPECT_EQ(c.family, "Qwen 3 MoE");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.sparse, std::vector<bool>(4, true));  // decoder_sparse_step 1
  EXPECT_FALSE(c.norm_topk_prob);                   // Qwen3MoeConfig's default
  j["decoder_sparse_step"] = 2;
  EXPECT_EQ(parse(j).sparse, (std::vector<bool>{false, true, false, true}));
  j["mlp_only_layers"] = {3};
  j["norm_topk_prob"] = true;
  const Config s = parse(j);
  EXPECT_EQ(s.sparse, (std::vector<bool>{false, true, false, false}));
  const decoder::DecoderConfig d = decoder_config(s);
  EXPECT_EQ(d.layers[0].ffn.kind, decoder::FfnKind::Dense);
  EXPECT_EQ(d.layers[0].ffn.intermediate, 48);
  EXPECT_EQ(d.layers[1].ffn.kind, decoder::FfnKind::Experts);
  EXPECT_EQ(d.layers[1].ffn.experts, 6);
  EXPECT_EQ(d.layers[1].ffn.top_k, 2);
  EXPECT_EQ(d.layers[1].ffn.expert_intermediate, 16);
  EXPECT_TRUE(d.layers[1].ffn.renormalize);
  // transformers 5 writes num_experts as num_local_experts.
  json local = moe();
  local.erase("num_experts");
  local["num_local_experts"] = 5;
  EXPECT_EQ(parse(local).num_experts, 5);
}

TEST(Qwen3MoeConfig, WindowOnEveryLayerWithUseSlidingWindow) {
  json j = moe();
  j["sliding_window"] = 5;
  EXPECT_EQ(parse(j).sliding_window, 0);  // use_sliding_window false drops it
  j["use_sliding_window"] = true;
  EXPECT_EQ(parse(j).sliding, std::vector<bool>(4, true));
  EXPECT_EQ(parse(j).sliding_window, 5);
}

TEST(Qwen3MoeConfig, ContradictionsAreNamed) {
  auto with = [](const char* key, json value) {
    json j = moe();
    j[key] = std::move(value);
    return j;
  };
  EXPECT_NE(family_config_error(with("num_local_experts", 7)).find("'num_local_experts' contradicts num_experts"),
            std::string::npos);
  EXPECT_NE(family_config_error(with("num_experts_per_tok", 7)).find("num_experts_per_tok"), std::string::npos);
  EXPECT_NE(family_config_error(with("mlp_only_layers", {1, 4})).find("'mlp_only_layers[1]'"), std::string::npos);
  EXPECT_NE(family_config_error(with("mlp_only_layers", 1)).find("mlp_only_layers"), std::string::npos);
  EXPECT_NE(family_config_error(with("decoder_sparse_step", 0)).find("decoder_sparse_step"), std::string::npos);
}

// --- Expert layouts -----------------------------------------------------

// A checkpoint of `w` under transformers' names, the experts in `layout`:
// "modules" (experts.{e}.gate_proj ...), "stacked" (experts.gate_up_proj,
// gate rows first) or "mlx" (switch_mlp.*). Written from the names
// transformers and mlx-lm use, not from rowlm's binder.
NamedTensors checkpoint_of(const Config& c, const decoder::DecoderWeights& w, const std::string& layout) {
  NamedTensors t;
  t.emplace_back("model.embed_tokens.weight", w.embed.values);
  t.emplace_back("model.norm.weight", w.final_norm);
  if (!c.tie_word_embeddings) t.emplace_back("lm_head.weight", w.lm_head.values);
  for (int l = 0; l < c.num_layers; ++l) {
    const decoder::LayerWeights& lw = w.layers[std::size_t(l)];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.emplace_back(p + "input_layernorm.weight", lw.attn_norm);
    t.emplace_back(p + "post_attention_layernorm.weight", lw.ffn_norm);
    t.emplace_back(p + "self_attn.q_proj.weight", lw.q_proj.values);
    t.emplace_back(p + "self_attn.k_proj.weight", lw.k_proj.values);
    t.emplace_back(p + "self_attn.v_proj.weight", lw.v_proj.values);
    t.emplace_back(p + "self_attn.o_proj.weight", lw.o_proj.values);
    t.emplace_back(p + "self_attn.q_norm.weight", lw.q_norm);
    t.emplace_back(p + "self_attn.k_norm.weight", lw.k_norm);
    if (!c.sparse[std::size_t(l)]) {
      t.emplace_back(p + "mlp.gate_proj.weight", lw.gate_proj.values);
      t.emplace_back(p + "mlp.up_proj.weight", lw.up_proj.values);
      t.emplace_back(p + "mlp.down_proj.weight", lw.down_proj.values);
      continue;
    }
    t.emplace_back(p + "mlp.gate.weight", lw.router.values);
    const int64_t E = c.num_experts, I = c.moe_intermediate_size, H = c.hidden_size;
    const ExpertBank& bank = lw.experts;
    auto stack = [&](std::initializer_list<const std::vector<Weight>*> parts, int64_t rows, int64_t cols) {
      Tensor s(bank.gate[0].values.dtype(), {E, int64_t(parts.size()) * rows, cols});
      auto* out = static_cast<std::byte*>(s.raw());
      for (int64_t e = 0; e < E; ++e)
        for (const std::vector<Weight>* part : parts) {
          const Tensor& m = (*part)[std::size_t(e)].values;
          std::memcpy(out, m.raw(), m.nbytes());
          out += m.nbytes();
        }
      return s;
    };
    if (layout == "modules") {
      for (int64_t e = 0; e < E; ++e) {
        const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
        t.emplace_back(x + "gate_proj.weight", bank.gate[std::size_t(e)].values);
        t.emplace_back(x + "up_proj.weight", bank.up[std::size_t(e)].values);
        t.emplace_back(x + "down_proj.weight", bank.down[std::size_t(e)].values);
      }
    } else if (layout == "stacked") {
      t.emplace_back(p + "mlp.experts.gate_up_proj", stack({&bank.gate, &bank.up}, I, H));
      t.emplace_back(p + "mlp.experts.down_proj", stack({&bank.down}, H, I));
    } else {
      t.emplace_back(p + "mlp.switch_mlp.gate_proj.weight", stack({&bank.gate}, I, H));
      t.emplace_back(p + "mlp.switch_mlp.up_proj.weight", stack({&bank.up}, I, H));
      t.emplace_back(p + "mlp.switch_mlp.down_proj.weight", stack({&bank.down}, H, I));
    }
  }
  return t;
}

Tensor logits_of(Model& model, Backend& backend, const std::vector<int32_t>& ids) {
  kv::CacheOptions opt;
  opt.layers = model.kv_layers(kv::parse_codec("f32"));
  opt.block_size = 4;
  kv::KvCache cache(opt, backend);
  const kv::RowId row = cache.create_row();
  ForwardBatch b;
  for (std::size_t i = 0; i < ids.size(); ++i) b.add(row, int64_t(i), ids[i], true);
  Tensor logits;
  model.forward(b, cache, logits);
  return logits;
}

// The same weights in each layout load to the same model: logits bitwise
// equal to the in-memory one's.
TEST(Qwen3MoeWeights, EveryExpertLayoutLoadsTheSameModel) {
  json j = moe();
  j["mlp_only_layers"] = {2};
  j["norm_topk_prob"] = true;
  const Config c = parse(j);
  auto backend = make_backend({"cpu", 1});
  const std::vector<int32_t> ids = {3, 17, 41, 9, 60, 22, 5, 33};
  auto reference = make_model(c, make_synthetic_weights(c, 7, 0.3f), *backend);
  const Tensor want = logits_of(*reference, *backend, ids);
  for (const char* layout : {"modules", "stacked", "mlx"}) {
    const decoder::DecoderWeights w = make_synthetic_weights(c, 7, 0.3f);
    TempDir dir;
    std::ofstream(dir.file("config.json")) << j.dump();
    write_safetensors(dir.file("model.safetensors"), checkpoint_of(c, w, layout));
    auto model = load_model(dir.path(), *backend);
    EXPECT_NE(model->describe().find("3 MoE layers (6 experts of 16, top 2, renormalised)"), std::string::npos)
        << model->describe();
    const Tensor got = logits_of(*model, *backend, ids);
    ASSERT_EQ(got.shape(), want.shape());
    EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0) << layout;
  }
}

TEST(Qwen3MoeWeights, AMissingExpertStackIsNamed) {
  const Config c = parse(moe());
  const decoder::DecoderWeights w = make_synthetic_weights(c, 7);
  NamedTensors t = checkpoint_of(c, w, "stacked");
  std::erase_if(t, [](const auto& named) { return named.first == "model.layers.1.mlp.experts.gate_up_proj"; });
  TempDir dir;
  std::ofstream(dir.file("config.json")) << moe().dump();
  write_safetensors(dir.file("model.safetensors"), t);
  try {
    load_weights(dir.path(), c);
    FAIL() << "loaded without layer 1's experts";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.1.mlp.experts.gate_up_proj"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace rowlm::llama_style

namespace rowlm::llama_style {
namespace {

// Configs in the form the Hub publishes them (transformers 4.x serialisations,
// every field they carry): they parse to the geometry the model cards state.
TEST(HubConfigs, Llama32AndQwen3MoeParse) {
  const Config llama = parse_config(R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false,
    "attention_dropout": 0.0, "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 131072,
    "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16,
    "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_cache": true,
    "vocab_size": 128256})", "config.json");
  EXPECT_EQ(llama.head_dim, 64);
  EXPECT_EQ(llama.num_kv_heads, 8);
  EXPECT_TRUE(llama.tie_word_embeddings);
  EXPECT_EQ(llama.rope.type, rope::RopeType::Llama3);
  EXPECT_EQ(llama.rope.factor, 32.0);
  EXPECT_EQ(llama.bos_token_id, 128000);

  const Config moe = parse_config(R"({"architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false,
    "attention_dropout": 0.0, "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645,
    "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 6144, "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [],
    "model_type": "qwen3_moe", "moe_intermediate_size": 768, "norm_topk_prob": true, "num_attention_heads": 32,
    "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
    "output_router_logits": false, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.001, "sliding_window": null, "tie_word_embeddings": false,
    "torch_dtype": "bfloat16", "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})",
                                    "config.json");
  EXPECT_EQ(moe.sparse, std::vector<bool>(48, true));
  EXPECT_EQ(moe.num_experts, 128);
  EXPECT_EQ(moe.experts_per_token, 8);
  EXPECT_TRUE(moe.norm_topk_prob);
  EXPECT_EQ(moe.head_dim, 128);
  EXPECT_EQ(moe.sliding_window, 0);
  EXPECT_EQ(moe.rope.theta, 1e6);
}

}  // namespace
}  // namespace rowlm::llama_style
