// Gemma 3 configs and checkpoints: gemma3_text and gemma3 (text_config),
// the defaults of transformers 5.17's Gemma3TextConfig, both RoPE
// serialisations, the embedding scale in the weights' dtype, the names
// under each prefix, and errors that name the field or tensor. The numerics
// against transformers are in transformers_reference_test.cc.

#include "model/gemma3.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "io/temp_dir.h"

namespace rowlm::gemma3 {
namespace {

using json = nlohmann::json;

json text() {
  return {{"model_type", "gemma3_text"}, {"vocab_size", 64},        {"hidden_size", 32},
          {"intermediate_size", 48},     {"num_hidden_layers", 7},  {"num_attention_heads", 4},
          {"num_key_value_heads", 2},    {"head_dim", 8}};
}

Config parse(const json& j) { return parse_config(j.dump(), "config.json"); }

std::string error_of(const json& j) {
  try {
    parse(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Gemma3Config, DefaultsAsTransformersResolvesThem) {
  const Config c = parse(text());
  // Every sixth layer full (sliding_window_pattern 6); the last is not forced full.
  EXPECT_EQ(c.sliding, (std::vector<bool>{true, true, true, true, true, false, true}));
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.rope_full.theta, 1e6);
  EXPECT_EQ(c.rope_sliding.theta, 1e4);
  EXPECT_EQ(c.query_pre_attn_scalar, 256);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 2);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{1});
  const decoder::DecoderConfig d = decoder_config(c);
  EXPECT_EQ(d.norm_kind, NormKind::OnePlus);
  EXPECT_FLOAT_EQ(d.embed_scale, std::sqrt(32.0f));
  EXPECT_EQ(d.final_softcap, 0.0f);
  const decoder::LayerConfig& l0 = d.layers[0];
  EXPECT_TRUE(l0.post_attention_norm && l0.post_ffn_norm && l0.attention.qk_norm);
  EXPECT_FALSE(l0.attention.v_norm);
  EXPECT_EQ(l0.ffn.activation, Activation::GeluTanh);
  EXPECT_FLOAT_EQ(l0.attention.scale, 1.0f / 16.0f);  // 256^-1/2, not head_dim's
  EXPECT_EQ(l0.attention.window, 4096);
  EXPECT_EQ(d.layers[5].attention.window, 0);
  EXPECT_NE(d.ropes[std::size_t(l0.attention.rope)].inv_freq[1], d.ropes[std::size_t(d.layers[5].attention.rope)].inv_freq[1]);
}

TEST(Gemma3Config, EmbeddingScaleInTheWeightsDtype) {
  json j = text();
  j["hidden_size"] = 1152;  // Gemma 3 1B: √1152 = 33.94…, 34 in bf16
  const Config c = parse(j);
  EXPECT_FLOAT_EQ(decoder_config(c, DType::F32).embed_scale, float(std::sqrt(1152.0)));
  EXPECT_EQ(decoder_config(c, DType::BF16).embed_scale, 34.0f);
  EXPECT_EQ(decoder_config(c, DType::F16).embed_scale, 33.9375f);  // f16: steps of 1/32 at 32…64
}

TEST(Gemma3Config, RopeInBothSerialisations) {
  // Hub Gemma 3 (4B and up): rope_theta, rope_local_base_freq, and a linear
  // rope_scaling for the full layers only.
  json hub = text();
  hub["rope_theta"] = 1e6;
  hub["rope_local_base_freq"] = 1e4;
  hub["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  const Config a = parse(hub);
  EXPECT_EQ(a.rope_full.type, rope::RopeType::Linear);
  EXPECT_EQ(a.rope_full.factor, 8.0);
  EXPECT_EQ(a.rope_sliding.type, rope::RopeType::Default);
  // transformers 5: keyed by layer type.
  json v5 = text();
  v5["rope_parameters"] = {{"full_attention", {{"rope_type", "linear"}, {"factor", 8.0}, {"rope_theta", 1e6}}},
                           {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 1e4}}}};
  const Config b = parse(v5);
  EXPECT_EQ(decoder_config(a).ropes[0].inv_freq, decoder_config(b).ropes[0].inv_freq);
  EXPECT_EQ(decoder_config(a).ropes[1].inv_freq, decoder_config(b).ropes[1].inv_freq);
  EXPECT_FLOAT_EQ(decoder_config(b).ropes[0].inv_freq[1], float(1.0 / std::pow(1e6, 2.0 / 8.0)) / 8.0f);
  v5["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e4}};
  EXPECT_NE(error_of(v5).find("'rope_parameters' must be an object keyed by layer type"), std::string::npos);
}

TEST(Gemma3Config, TextConfigOfTheConditionalModel) {
  json outer = {{"model_type", "gemma3"}, {"text_config", text()}, {"eos_token_id", {1, 46}}};
  outer["text_config"].erase("model_type");
  outer["text_config"]["final_logit_softcapping"] = 30.0;
  outer["text_config"]["attn_logit_softcapping"] = 50.0;
  outer["text_config"]["tie_word_embeddings"] = false;
  const Config c = parse(outer);
  EXPECT_EQ(c.num_layers, 7);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{1, 46}));  // the outer config's
  EXPECT_FALSE(c.tie_word_embeddings);
  // As transformers: Gemma3ForConditionalGeneration applies no final softcap,
  // and no Gemma 3 applies attn_logit_softcapping.
  const decoder::DecoderConfig d = decoder_config(c);
  EXPECT_EQ(c.final_logit_softcapping, 30.0);
  EXPECT_EQ(d.final_softcap, 0.0f);
  EXPECT_EQ(d.layers[0].attention.softcap, 0.0f);
  json causal = outer["text_config"];
  causal["model_type"] = "gemma3_text";
  const decoder::DecoderConfig dc = decoder_config(parse(causal));
  EXPECT_EQ(dc.final_softcap, 30.0f);  // Gemma3ForCausalLM caps
  EXPECT_EQ(dc.layers[0].attention.softcap, 0.0f);
  outer["text_config"]["model_type"] = "gemma2";
  EXPECT_NE(error_of(outer).find("text_config.model_type"), std::string::npos);
  EXPECT_NE(error_of({{"model_type", "gemma3"}}).find("text_config"), std::string::npos);
}

TEST(Gemma3Config, BadFieldsAreNamed) {
  auto with = [](const char* key, json value) {
    json j = text();
    j[key] = std::move(value);
    return j;
  };
  EXPECT_NE(error_of(with("hidden_activation", "gelu")).find("hidden_activation"), std::string::npos);
  EXPECT_NE(error_of(with("use_bidirectional_attention", true)).find("use_bidirectional_attention"), std::string::npos);
  EXPECT_NE(error_of(with("sliding_window", nullptr)).find("sliding_window"), std::string::npos);
  EXPECT_NE(error_of(with("query_pre_attn_scalar", 0)).find("query_pre_attn_scalar"), std::string::npos);
  EXPECT_NE(error_of(with("layer_types", {"full_attention"})).find("layer_types"), std::string::npos);
  EXPECT_NE(error_of(with("rope_scaling", {{"rope_type", "yarn"}, {"factor", 2.0}})).find("rope_scaling.rope_type"),
            std::string::npos);
  EXPECT_NE(error_of(with("num_key_value_heads", 3)).find("num_attention_heads"), std::string::npos);
  EXPECT_NE(error_of(with("final_logit_softcapping", -1.0)).find("final_logit_softcapping"), std::string::npos);
  EXPECT_NE(error_of(with("model_type", "gemma3n")).find("model_type"), std::string::npos);
}

// Every tensor the text decoder needs, under the conditional model's
// transformers 5 prefix; the vision tower beside it is not read.
TEST(Gemma3Weights, BindsUnderTheConditionalPrefixAndNamesWhatIsMissing) {
  const Config c = parse(text());
  const decoder::DecoderWeights w = make_synthetic_weights(c, 3);
  NamedTensors t;
  const std::string pre = "model.language_model.";
  t.emplace_back(pre + "embed_tokens.weight", w.embed.values);
  t.emplace_back(pre + "norm.weight", w.final_norm);
  t.emplace_back("model.vision_tower.vision_model.post_layernorm.weight", w.final_norm);
  for (int l = 0; l < c.num_layers; ++l) {
    const auto& lw = w.layers[std::size_t(l)];
    const std::string p = pre + "layers." + std::to_string(l) + ".";
    for (auto [name, v] : {std::pair{"input_layernorm", &lw.attn_norm}, {"post_attention_layernorm", &lw.post_attn_norm},
                           {"pre_feedforward_layernorm", &lw.ffn_norm}, {"post_feedforward_layernorm", &lw.post_ffn_norm},
                           {"self_attn.q_norm", &lw.q_norm}, {"self_attn.k_norm", &lw.k_norm}})
      t.emplace_back(p + name + ".weight", *v);
    for (auto [name, m] : {std::pair{"self_attn.q_proj", &lw.q_proj}, {"self_attn.k_proj", &lw.k_proj},
                           {"self_attn.v_proj", &lw.v_proj}, {"self_attn.o_proj", &lw.o_proj},
                           {"mlp.gate_proj", &lw.gate_proj}, {"mlp.up_proj", &lw.up_proj}, {"mlp.down_proj", &lw.down_proj}})
      if (!(l == 6 && std::string(name) == "mlp.down_proj")) t.emplace_back(p + name + ".weight", m->values);
  }
  TempDir dir;
  std::ofstream(dir.file("config.json")) << text().dump();
  write_safetensors(dir.file("model.safetensors"), t);
  try {
    load_weights(dir.path(), c);
    FAIL() << "loaded without layer 6's down_proj";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.language_model.layers.6.mlp.down_proj.weight"), std::string::npos)
        << e.what();
  }
  t.emplace_back(pre + "layers.6.mlp.down_proj.weight", w.layers[6].down_proj.values);
  write_safetensors(dir.file("model.safetensors"), t);
  const decoder::DecoderWeights loaded = load_weights(dir.path(), c);
  EXPECT_EQ(loaded.layers.size(), 7u);
  EXPECT_TRUE(loaded.lm_head.empty());  // tied
}

}  // namespace
}  // namespace rowlm::gemma3

namespace rowlm::gemma3 {
namespace {

// Gemma 3 1B's config in the form the Hub publishes it (transformers 4.50).
TEST(HubConfigs, Gemma3OneBParses) {
  const Config c = parse_config(R"({"architectures": ["Gemma3ForCausalLM"], "attention_bias": false,
    "attention_dropout": 0.0, "attn_logit_softcapping": null, "bos_token_id": 2, "cache_implementation": "hybrid",
    "eos_token_id": [1, 106], "final_logit_softcapping": null, "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152, "initializer_range": 0.02,
    "intermediate_size": 6912, "max_position_embeddings": 32768, "model_type": "gemma3_text",
    "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1, "pad_token_id": 0,
    "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000, "rope_scaling": null,
    "rope_theta": 1000000, "sliding_window": 512, "sliding_window_pattern": 6, "torch_dtype": "bfloat16",
    "use_cache": true, "vocab_size": 262144})", "config.json");
  int full = 0;
  for (bool s : c.sliding) full += !s;
  EXPECT_EQ(full, 4);  // layers 5, 11, 17, 23
  EXPECT_FALSE(c.sliding[5]);
  EXPECT_EQ(c.sliding_window, 512);
  EXPECT_EQ(c.num_kv_heads, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{1, 106}));
  EXPECT_EQ(c.rope_full.theta, 1e6);
  EXPECT_EQ(c.rope_sliding.theta, 1e4);
  EXPECT_EQ(decoder_config(c, DType::BF16).embed_scale, 34.0f);
}

}  // namespace
}  // namespace rowlm::gemma3
