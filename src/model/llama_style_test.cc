// Llama-style configs and checkpoints (Qwen 3 here; Llama, Mistral, Qwen 2
// and Qwen 3 MoE in llama_style_families_test.cc): what config.json may say
// (transformers 5 and older serialisations), what it must not, and errors
// that name the file and the field or tensor. The numerics are in
// transformers_reference_test.cc.

#include "model/llama_style.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/safetensors.h"
#include "io/temp_dir.h"
#include "backend/factory/make_backend.h"
#include "model/families.h"
#include "model/model.h"

namespace rowlm::llama_style {
namespace {

using json = nlohmann::json;

json base() {
  return {{"model_type", "qwen3"},         {"vocab_size", 64},      {"hidden_size", 32},
          {"intermediate_size", 48},       {"num_hidden_layers", 2}, {"num_attention_heads", 4},
          {"num_key_value_heads", 2},      {"head_dim", 12},        {"tie_word_embeddings", true},
          {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 5e5}}}};
}

std::string error_of(const json& j) {
  try {
    parse_config(j.dump(), "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Qwen3Config, ReadsTheFieldsTransformersWrites) {
  const Config c = parse_config(base().dump(), "config.json");
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.head_dim, 12);  // not hidden / heads
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.rope.theta, 5e5);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.sliding_window, 0);
  const decoder::DecoderConfig d = decoder_config(c);
  ASSERT_EQ(d.layers.size(), 2u);
  EXPECT_FLOAT_EQ(d.layers[0].attention.scale, 1.0f / std::sqrt(12.0f));
  EXPECT_TRUE(d.layers[0].attention.qk_norm);
  EXPECT_EQ(d.layers[0].ffn.activation, Activation::Silu);
  EXPECT_EQ(d.embed_scale, 1.0f);
  ASSERT_EQ(d.ropes.size(), 1u);
  EXPECT_FLOAT_EQ(d.ropes[0].inv_freq[1], float(1.0 / std::pow(5e5, 2.0 / 12.0)));
}

TEST(Qwen3Config, OlderSerialisationsAndDefaults) {
  json j = base();
  j.erase("rope_parameters");
  j["rope_theta"] = 1e6;
  j["rope_scaling"] = nullptr;
  EXPECT_EQ(parse_config(j.dump(), "c").rope.theta, 1e6);
  j.erase("num_key_value_heads");
  EXPECT_NE(error_of(j).find("num_attention_heads"), std::string::npos);  // absent: transformers' 32
  j["num_key_value_heads"] = nullptr;
  EXPECT_EQ(parse_config(j.dump(), "c").num_kv_heads, 4);  // null: one per query head
  j.erase("rope_theta");
  EXPECT_EQ(parse_config(j.dump(), "c").rope.theta, 10000.0);
  j.erase("tie_word_embeddings");
  EXPECT_FALSE(parse_config(j.dump(), "c").tie_word_embeddings);  // transformers 5's default
  // Sliding layers: use_sliding_window turns max_window_layers (or layer_types) on.
  j["use_sliding_window"] = true;
  j["sliding_window"] = 7;
  j["max_window_layers"] = 1;
  const Config s = parse_config(j.dump(), "c");
  EXPECT_EQ(s.sliding, (std::vector<bool>{false, true}));
  EXPECT_EQ(s.sliding_window, 7);
  j["layer_types"] = {"sliding_attention", "full_attention"};
  EXPECT_EQ(parse_config(j.dump(), "c").sliding, (std::vector<bool>{true, false}));
  j["use_sliding_window"] = false;  // transformers ignores the window then
  EXPECT_EQ(parse_config(j.dump(), "c").sliding, (std::vector<bool>{false, false}));
  j["use_sliding_window"] = true;
  j["sliding_window"] = nullptr;  // and when it is null
  EXPECT_EQ(parse_config(j.dump(), "c").sliding, (std::vector<bool>{false, false}));
  // rope_parameters keyed by layer type: each type its own base.
  j["sliding_window"] = 7;
  j["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 1e6}}},
                          {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 1e4}}}};
  const Config keyed = parse_config(j.dump(), "c");
  EXPECT_EQ(keyed.rope.theta, 1e6);
  EXPECT_EQ(keyed.rope_sliding.theta, 1e4);
  const decoder::DecoderConfig dk = decoder_config(keyed);
  EXPECT_NE(dk.ropes[std::size_t(dk.layers[0].attention.rope)].inv_freq[1],
            dk.ropes[std::size_t(dk.layers[1].attention.rope)].inv_freq[1]);
}

TEST(Qwen3Config, BadFieldsAreNamed) {
  auto with = [](const char* key, json value) {
    json j = base();
    j[key] = std::move(value);
    return j;
  };
  EXPECT_NE(error_of(with("model_type", "qwen4")).find("model_type"), std::string::npos);
  EXPECT_NE(error_of(with("hidden_act", "gelu")).find("hidden_act"), std::string::npos);
  EXPECT_NE(error_of(with("num_key_value_heads", 3)).find("num_attention_heads"), std::string::npos);
  EXPECT_NE(error_of(with("head_dim", 13)).find("head_dim"), std::string::npos);
  EXPECT_NE(error_of(with("hidden_size", "64")).find("hidden_size"), std::string::npos);
  EXPECT_NE(error_of(with("rope_parameters", {{"rope_type", "yarn"}, {"factor", 4}})).find("rope_type"),
            std::string::npos);
  EXPECT_NE(error_of(with("rope_parameters", {{"rope_type", "default"}, {"rope_theta", 0.5}})).find("rope_theta"),
            std::string::npos);
  EXPECT_NE(error_of(with("layer_types", {"full_attention"})).find("layer_types"), std::string::npos);
  EXPECT_NE(error_of(with("eos_token_id", 64)).find("eos_token_id"), std::string::npos);
  EXPECT_NE(error_of(with("rms_norm_eps", 2.0)).find("rms_norm_eps"), std::string::npos);
}

// A checkpoint that does not match its config: the error names the tensor.
TEST(Qwen3Weights, MissingOrMisshapenTensorsAreNamed) {
  const Config c = parse_config(base().dump(), "config.json");
  decoder::DecoderWeights synthetic = make_synthetic_weights(c, 1);
  NamedTensors tensors;
  tensors.emplace_back("model.embed_tokens.weight", synthetic.embed.values);
  tensors.emplace_back("model.norm.weight", synthetic.final_norm);
  TempDir dir;
  std::ofstream(dir.file("config.json")) << base().dump();
  write_safetensors(dir.file("model.safetensors"), tensors);
  try {
    load_weights(dir.path(), c);
    FAIL() << "a checkpoint without layers loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.0.input_layernorm.weight"), std::string::npos) << e.what();
  }
  NamedTensors wrong;
  wrong.emplace_back("model.embed_tokens.weight", Tensor(DType::BF16, {64, 31}));
  write_safetensors(dir.file("model.safetensors"), wrong);
  try {
    load_weights(dir.path(), c);
    FAIL() << "a misshapen embedding loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.embed_tokens.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[64, 32]"), std::string::npos) << e.what();
  }
}

// The family registry: an unknown model_type is an error that lists what
// is supported; every family's types are found.
TEST(ModelFamilies, UnknownTypesAreNamedWithTheSupportedOnes) {
  auto backend = make_backend({"cpu", 1});
  TempDir dir;
  std::ofstream(dir.file("config.json")) << R"({"model_type": "mamba"})";
  try {
    load_model(dir.path(), *backend);
    FAIL() << "loaded a mamba config";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'mamba' is not supported"), std::string::npos) << m;
    EXPECT_NE(m.find("qwen3"), std::string::npos) << m;
    EXPECT_NE(m.find("gemma4_text"), std::string::npos) << m;
  }
  // A config.json that is JSON but not an object says so, not "model_type ''".
  for (const char* text : {"[]", "256", "\"gemma4\"", "null"}) {
    TempDir other;
    std::ofstream(other.file("config.json")) << text;
    try {
      load_model(other.path(), *backend);
      FAIL() << "loaded " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("config.json: not a JSON object"), std::string::npos) << text << ": " << e.what();
    }
  }
  ASSERT_NE(find_model_family("qwen3"), nullptr);
  EXPECT_EQ(find_model_family("qwen3")->name, "Qwen 3");
  EXPECT_EQ(find_model_family("gemma4_unified")->name, "Gemma 4");
  for (const char* t : {"llama", "mistral", "qwen2", "qwen3_moe", "gemma3", "gemma3_text"}) {
    EXPECT_NE(find_model_family(t), nullptr) << t;
    EXPECT_NE(supported_model_types().find(t), std::string::npos) << t;
  }
  EXPECT_EQ(find_model_family("qwen3_moe")->name, "Qwen 3 MoE");
  EXPECT_EQ(find_model_family("gemma3")->name, "Gemma 3");
  EXPECT_EQ(find_model_family("mixtral"), nullptr);
}

}  // namespace
}  // namespace rowlm::llama_style
