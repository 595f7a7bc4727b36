#include "model/gemma4_config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <random>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace rowlm::gemma4 {
namespace {

using json = nlohmann::json;
constexpr LayerType S = LayerType::Sliding, F = LayerType::Full;

// The tiny configurations of tools/oracle/make_gemma4_fixtures.py, as Gemma4TextConfig fields.
// Full-layer geometry is added by one of the serialisations below.
struct TinyConfig {
  std::string name;
  json fields;
  int global_kv = 0;  // num_global_key_value_heads, 0 = not given
  // Expected resolution, written out from the spec's table.
  std::vector<LayerType> types;
  std::vector<int> head_dim, kv_heads, kv_source, intermediate;
};

json common_fields() {
  return {{"vocab_size", 128},
          {"hidden_size", 64},
          {"intermediate_size", 96},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"head_dim", 16},
          {"sliding_window", 4},
          {"rms_norm_eps", 1e-6},
          {"final_logit_softcapping", 30.0},
          {"tie_word_embeddings", true},
          {"max_position_embeddings", 256},
          {"hidden_size_per_layer_input", 0},
          {"vocab_size_per_layer_input", 128},
          {"eos_token_id", {1, 106 % 128}},
          {"rope_parameters",
           {{"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
            {"full_attention", {{"rope_type", "proportional"}, {"partial_rotary_factor", 0.25}, {"rope_theta", 1e6}}}}}};
}

json types_json(const std::vector<LayerType>& types) {
  json out = json::array();
  for (LayerType t : types) out.push_back(t == F ? "full_attention" : "sliding_attention");
  return out;
}

std::vector<TinyConfig> tiny_configs() {
  std::vector<TinyConfig> out;
  auto make = [&](std::string name, std::vector<LayerType> types, json extra, int global_kv) {
    TinyConfig c{std::move(name), common_fields(), global_kv, types, {}, {}, {}, {}};
    c.fields["num_hidden_layers"] = types.size();
    c.fields["layer_types"] = types_json(types);
    for (auto& [k, v] : extra.items()) c.fields[k] = v;
    return c;
  };
  const json moe = {{"enable_moe_block", true}, {"num_experts", 8}, {"top_k_experts", 2}, {"moe_intermediate_size", 16}};

  // num_global_key_value_heads is given but attention_k_eq_v is off: ignored.
  TinyConfig e = make("e_series", {S, S, F, S, S, F},
                      {{"hidden_size_per_layer_input", 8}, {"num_kv_shared_layers", 3}, {"use_double_wide_mlp", true}}, 1);
  e.head_dim = {16, 16, 32, 16, 16, 32};
  e.kv_heads = {2, 2, 2, 2, 2, 2};
  e.kv_source = {0, 1, 2, 1, 1, 2};
  e.intermediate = {96, 96, 96, 192, 192, 192};
  out.push_back(e);

  TinyConfig m = make("e2b_like_mqa", {S, S, S, S, F, S, S, S, S, F},
                      {{"num_key_value_heads", 1},
                       {"hidden_size_per_layer_input", 8},
                       {"num_kv_shared_layers", 5},
                       {"use_double_wide_mlp", true}},
                      0);
  m.head_dim = {16, 16, 16, 16, 32, 16, 16, 16, 16, 32};
  m.kv_heads = std::vector<int>(10, 1);
  m.kv_source = {0, 1, 2, 3, 4, 3, 3, 3, 3, 4};
  m.intermediate = {96, 96, 96, 96, 96, 192, 192, 192, 192, 192};
  out.push_back(m);

  TinyConfig d = make("dense_keqv", {S, S, F, S, S, F}, {{"attention_k_eq_v", true}}, 1);
  d.head_dim = {16, 16, 32, 16, 16, 32};
  d.kv_heads = {2, 2, 1, 2, 2, 1};
  d.kv_source = {0, 1, 2, 3, 4, 5};
  d.intermediate = std::vector<int>(6, 96);
  out.push_back(d);

  json moe_keqv = moe;
  moe_keqv["attention_k_eq_v"] = true;
  TinyConfig k = make("moe_keqv", {S, S, F, S, S, F}, moe_keqv, 2);
  k.head_dim = {16, 16, 32, 16, 16, 32};
  k.kv_heads = std::vector<int>(6, 2);
  k.kv_source = {0, 1, 2, 3, 4, 5};
  k.intermediate = std::vector<int>(6, 96);
  out.push_back(k);

  json everything = moe;
  everything.update({{"attention_k_eq_v", true},
                     {"hidden_size_per_layer_input", 8},
                     {"num_kv_shared_layers", 2},
                     {"use_double_wide_mlp", true}});
  TinyConfig x = make("everything", {S, F, S, F}, everything, 1);
  x.head_dim = {16, 32, 16, 32};
  x.kv_heads = {2, 1, 2, 1};
  x.kv_source = {0, 1, 0, 1};
  x.intermediate = {96, 96, 192, 192};
  out.push_back(x);
  return out;
}

// Released/older serialisation: global_head_dim / num_global_key_value_heads.
json flat_form(const TinyConfig& c) {
  json j = c.fields;
  j["model_type"] = "gemma4_text";
  j["global_head_dim"] = 32;
  if (c.global_kv) j["num_global_key_value_heads"] = c.global_kv;
  return j;
}

// What transformers 5.17 writes: per_layer_config for every full layer, with
// the KV-head override only when attention_k_eq_v.
json per_layer_form(const TinyConfig& c) {
  json j = c.fields;
  j["model_type"] = "gemma4_text";
  json plc = json::object();
  const bool k_eq_v = j.value("attention_k_eq_v", false);
  for (std::size_t l = 0; l < c.types.size(); ++l) {
    if (c.types[l] != F) continue;
    json o = {{"head_dim", 32}};
    if (k_eq_v && c.global_kv) o["num_key_value_heads"] = c.global_kv;
    plc[std::to_string(l)] = o;
  }
  j["per_layer_config"] = plc;
  return j;
}

json nested(json text) {
  text["model_type"] = "gemma4_text";
  return {{"model_type", "gemma4"},
          {"text_config", text},
          {"vision_config", {{"hidden_size", 8}}},
          {"tie_word_embeddings", true}};
}

void expect_resolved(const Config& got, const TinyConfig& want, const std::string& form) {
  SCOPED_TRACE(want.name + " / " + form);
  const int L = int(want.types.size());
  ASSERT_EQ(got.num_layers, L);
  ASSERT_EQ(got.layers.size(), std::size_t(L));
  EXPECT_EQ(got.layer_types, want.types);
  EXPECT_EQ(got.first_kv_shared_layer(), L - want.fields.value("num_kv_shared_layers", 0));
  for (int l = 0; l < L; ++l) {
    const LayerConfig& g = got.layers[l];
    SCOPED_TRACE("layer " + std::to_string(l));
    EXPECT_EQ(g.index, l);
    EXPECT_EQ(g.type, want.types[l]);
    EXPECT_EQ(g.head_dim, want.head_dim[l]);
    EXPECT_EQ(g.kv_heads, want.kv_heads[l]);
    EXPECT_EQ(g.kv_source, want.kv_source[l]);
    EXPECT_EQ(g.owns_kv(), want.kv_source[l] == l);
    EXPECT_EQ(g.intermediate, want.intermediate[l]);
    EXPECT_EQ(g.window, want.types[l] == S ? 4 : 0);
    EXPECT_EQ(g.k_eq_v, want.types[l] == F && want.fields.value("attention_k_eq_v", false));
  }
  EXPECT_EQ(got.vocab_size, 128);
  EXPECT_EQ(got.hidden_size, 64);
  EXPECT_EQ(got.num_heads, 4);
  EXPECT_EQ(got.head_dim, 16);
  EXPECT_EQ(got.global_head_dim, 32);
  EXPECT_EQ(got.final_logit_softcapping, 30.0);
  EXPECT_EQ(got.rope_sliding.type, RopeType::Default);
  EXPECT_EQ(got.rope_sliding.theta, 10000.0);
  EXPECT_EQ(got.rope_full.type, RopeType::Proportional);
  EXPECT_EQ(got.rope_full.theta, 1e6);
  EXPECT_EQ(got.rope_full.partial_rotary_factor, 0.25);
  EXPECT_EQ(got.rope_full.factor, 1.0);
  EXPECT_EQ(got.hidden_size_per_layer_input, want.fields["hidden_size_per_layer_input"].get<int>());
  EXPECT_EQ(got.enable_moe_block, want.fields.value("enable_moe_block", false));
  if (got.enable_moe_block) {
    EXPECT_EQ(got.num_experts, 8);
    EXPECT_EQ(got.top_k_experts, 2);
    EXPECT_EQ(got.moe_intermediate_size, 16);
  }
  EXPECT_EQ(got.eos_token_ids, (std::vector<int>{1, 106 % 128}));
  EXPECT_EQ(got.bos_token_id, 2);
  EXPECT_EQ(got.pad_token_id, 0);
  EXPECT_TRUE(got.tie_word_embeddings);
}

TEST(Gemma4Config, TinyConfigsResolveInEverySerialisation) {
  for (const TinyConfig& c : tiny_configs()) {
    expect_resolved(parse_config(flat_form(c).dump(), "flat.json"), c, "global_head_dim");
    expect_resolved(parse_config(per_layer_form(c).dump(), "plc.json"), c, "per_layer_config");
    expect_resolved(parse_config(nested(flat_form(c)).dump(), "nested.json"), c, "gemma4 + global_head_dim");
    expect_resolved(parse_config(nested(per_layer_form(c)).dump(), "nested.json"), c, "gemma4 + per_layer_config");
    EXPECT_EQ(parse_config(nested(flat_form(c)).dump(), "n").model_type, "gemma4");
  }
}

TEST(Gemma4Config, DefaultsFollowTransformers) {
  json j = {{"model_type", "gemma4_text"}, {"vocab_size", 300},  {"hidden_size", 32},       {"intermediate_size", 64},
            {"num_hidden_layers", 8},      {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 8}};
  const Config c = parse_config(j.dump(), "defaults.json");
  // Every sixth layer full, and the last forced full.
  EXPECT_EQ(c.layer_types, (std::vector<LayerType>{S, S, S, S, S, F, S, F}));
  EXPECT_EQ(c.layers[5].head_dim, 512);  // global_head_dim's default
  EXPECT_EQ(c.layers[5].kv_heads, 2);
  EXPECT_EQ(c.sliding_window, 512);
  EXPECT_EQ(c.final_logit_softcapping, 0.0);  // absent = off
  EXPECT_EQ(c.hidden_size_per_layer_input, 256);
  EXPECT_EQ(c.vocab_size_per_layer_input, 262144);
  EXPECT_FALSE(c.use_double_wide_mlp);
  EXPECT_FALSE(c.enable_moe_block);
  EXPECT_EQ(c.rope_full.type, RopeType::Proportional);
  EXPECT_EQ(c.rope_full.partial_rotary_factor, 0.25);
  EXPECT_EQ(c.rope_full.theta, 1e6);
  EXPECT_EQ(c.rope_sliding.theta, 10000.0);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{1});

  // An explicit list ending in a sliding layer is forced too.
  j["num_hidden_layers"] = 3;
  j["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention"};
  EXPECT_EQ(parse_config(j.dump(), "x").layer_types, (std::vector<LayerType>{S, F, F}));

  // null softcap = off; null ids = none; eos as a bare int.
  j["final_logit_softcapping"] = nullptr;
  j["pad_token_id"] = nullptr;
  j["eos_token_id"] = 7;
  j["rope_parameters"]["full_attention"] = {{"rope_type", "proportional"}, {"rope_theta", 5e5}, {"factor", 8.0}};
  j["rope_parameters"]["sliding_attention"] = {{"rope_type", "default"}, {"rope_theta", 1e4}};
  const Config n = parse_config(j.dump(), "x");
  EXPECT_EQ(n.final_logit_softcapping, 0.0);
  EXPECT_EQ(n.pad_token_id, -1);
  EXPECT_EQ(n.eos_token_ids, std::vector<int>{7});
  EXPECT_EQ(n.rope_full.factor, 8.0);
  EXPECT_EQ(n.rope_full.partial_rotary_factor, 1.0);
  EXPECT_EQ(n.rope_full.theta, 5e5);

  // gemma4_unified: its own defaults, and no PLE.
  json u = {{"model_type", "gemma4_unified"}, {"text_config", j}};
  u["text_config"].erase("model_type");
  const Config uc = parse_config(u.dump(), "u");
  EXPECT_EQ(uc.sliding_window, 1024);
  EXPECT_EQ(uc.hidden_size_per_layer_input, 0);
}

// Donor oracle: the last layer of the same type before the shared region.
TEST(Gemma4Config, RandomLayoutsMatchTheDonorRuleInBothForms) {
  std::mt19937 rng(42);
  int accepted = 0, rejected = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int L = 1 + int(rng() % 12);
    std::vector<LayerType> types(L);
    for (auto& t : types) t = rng() % 3 ? S : F;
    types.back() = F;
    const int shared = int(rng() % L);
    const bool k_eq_v = rng() % 2, wide = rng() % 2;
    TinyConfig c{"random", common_fields(), k_eq_v ? 1 : 0, types, {}, {}, {}, {}};
    c.fields["num_hidden_layers"] = L;
    c.fields["layer_types"] = types_json(types);
    c.fields["num_kv_shared_layers"] = shared;
    c.fields["attention_k_eq_v"] = k_eq_v;
    c.fields["use_double_wide_mlp"] = wide;

    const int first = L - shared;
    bool valid = true;
    std::vector<int> donor(L);
    for (int l = 0; l < L; ++l) {
      donor[l] = l;
      if (shared == 0 || l < first) continue;
      donor[l] = -1;
      for (int j = 0; j < first; ++j) {
        if (types[j] == types[l]) donor[l] = j;
      }
      valid = valid && donor[l] >= 0;
    }
    for (const json& form : {flat_form(c), per_layer_form(c)}) {
      if (!valid) {
        EXPECT_THROW(parse_config(form.dump(), "r"), Error);
        ++rejected;
        continue;
      }
      const Config got = parse_config(form.dump(), "r");
      ++accepted;
      for (int l = 0; l < L; ++l) {
        const bool is_shared = shared > 0 && l >= first;
        EXPECT_EQ(got.layers[l].kv_source, donor[l]) << "trial " << trial << " layer " << l;
        EXPECT_EQ(got.layers[l].head_dim, types[l] == F ? 32 : 16);
        EXPECT_EQ(got.layers[l].kv_heads, types[l] == F && k_eq_v ? 1 : 2);
        EXPECT_EQ(got.layers[l].intermediate, is_shared && wide ? 192 : 96);
      }
    }
  }
  EXPECT_GT(accepted, 100);
  EXPECT_GT(rejected, 20);
}

struct Broken {
  std::string what;
  std::function<void(json&)> edit;
  std::string field;  // the message must name it
};

TEST(Gemma4Config, MalformedConfigsNameTheField) {
  const TinyConfig base = tiny_configs()[0];  // e_series
  const std::vector<Broken> cases = {
      {"missing hidden_size", [](json& j) { j.erase("hidden_size"); }, "'hidden_size' is required"},
      {"string size", [](json& j) { j["hidden_size"] = "64"; }, "'hidden_size' must be an integer"},
      {"float size", [](json& j) { j["num_attention_heads"] = 4.5; }, "'num_attention_heads' must be an integer"},
      {"zero size", [](json& j) { j["vocab_size"] = 0; }, "'vocab_size' must be at least 1"},
      {"negative size", [](json& j) { j["intermediate_size"] = -96; }, "'intermediate_size' must be at least 1"},
      {"huge size", [](json& j) { j["hidden_size"] = 1e12; }, "'hidden_size' must be an integer"},
      {"huge int size", [](json& j) { j["hidden_size"] = int64_t(1) << 40; }, "'hidden_size' is implausibly large"},
      {"heads not divisible", [](json& j) { j["num_key_value_heads"] = 3; }, "'num_attention_heads'"},
      {"layer_types length", [](json& j) { j["num_hidden_layers"] = 7; }, "'layer_types' has 6 entries"},
      {"layer_types entry", [](json& j) { j["layer_types"][1] = "global"; }, "'layer_types[1]'"},
      {"layer_types not a list", [](json& j) { j["layer_types"] = "sliding"; }, "'layer_types' must be a list"},
      {"unknown model_type", [](json& j) { j["model_type"] = "llama"; }, "'model_type' 'llama' is not supported"},
      {"no model_type", [](json& j) { j.erase("model_type"); }, "'model_type' is required"},
      {"gemma4 without text_config", [](json& j) { j["model_type"] = "gemma4"; }, "'text_config' is required"},
      {"rope entry missing", [](json& j) { j["rope_parameters"].erase("full_attention"); }, "'rope_parameters'"},
      {"rope type", [](json& j) { j["rope_parameters"]["full_attention"]["rope_type"] = "yarn"; },
       "'rope_parameters.full_attention.rope_type' 'yarn'"},
      {"rope theta", [](json& j) { j["rope_parameters"]["sliding_attention"].erase("rope_theta"); },
       "'rope_parameters.sliding_attention.rope_theta' is required"},
      {"rope partial", [](json& j) { j["rope_parameters"]["full_attention"]["partial_rotary_factor"] = 2; },
       "'rope_parameters.full_attention.partial_rotary_factor'"},
      {"zero window", [](json& j) { j["sliding_window"] = 0; }, "'sliding_window' must be at least 1"},
      {"softcap string", [](json& j) { j["final_logit_softcapping"] = "30"; }, "'final_logit_softcapping'"},
      {"negative eps", [](json& j) { j["rms_norm_eps"] = -1; }, "'rms_norm_eps'"},
      {"eos string", [](json& j) { j["eos_token_id"] = "1"; }, "'eos_token_id'"},
      {"eos past vocab", [](json& j) { j["eos_token_id"] = {1, 500}; }, "'eos_token_id' holds token id 500"},
      {"bos list", [](json& j) { j["bos_token_id"] = {1, 2}; }, "'bos_token_id' must be a single"},
      {"double-wide not bool", [](json& j) { j["use_double_wide_mlp"] = 1; }, "'use_double_wide_mlp' must be true or false"},
      {"shared == layers", [](json& j) { j["num_kv_shared_layers"] = 6; }, "'num_kv_shared_layers' (6) must be below"},
      {"no full donor", [](json& j) { j["num_kv_shared_layers"] = 4; }, "no earlier full_attention layer"},
      {"moe without experts", [](json& j) { j["enable_moe_block"] = true; }, "'num_experts' is required"},
      {"top_k > experts",
       [](json& j) { j.update({{"enable_moe_block", true}, {"num_experts", 2}, {"top_k_experts", 3}, {"moe_intermediate_size", 4}}); },
       "'top_k_experts' (3) exceeds num_experts (2)"},
      {"activation", [](json& j) { j["hidden_activation"] = "silu"; }, "'hidden_activation' 'silu'"},
      {"bias", [](json& j) { j["attention_bias"] = true; }, "'attention_bias'"},
      {"bidirectional", [](json& j) { j["use_bidirectional_attention"] = "all"; }, "'use_bidirectional_attention'"},
      {"plc layer out of range", [](json& j) { j["per_layer_config"] = {{"9", {{"head_dim", 32}}}}; },
       "'per_layer_config' names layer 9"},
      {"plc bad key", [](json& j) { j["per_layer_config"] = {{"x1", {{"head_dim", 32}}}}; }, "key 'x1'"},
      {"plc bad attribute", [](json& j) { j["per_layer_config"] = {{"2", {{"intermediate_size", 32}}}}; },
       "'per_layer_config.2.intermediate_size'"},
      {"plc bad value", [](json& j) { j["per_layer_config"] = {{"2", {{"head_dim", "32"}}}}; },
       "'per_layer_config.2.head_dim' must be an integer"},
      {"plc kv heads not dividing", [](json& j) { j["per_layer_config"] = {{"2", {{"num_key_value_heads", 3}}}}; },
       "KV heads of layer 2"},
      {"plc shared layer geometry differs from donor", [](json& j) { j["per_layer_config"] = {{"5", {{"head_dim", 64}}}}; },
       "layer 5 (full_attention) shares K/V with layer 2"},
      {"odd head_dim", [](json& j) { j["global_head_dim"] = 33; }, "'head_dim' of layer 2"},
  };
  for (const Broken& c : cases) {
    json j = flat_form(base);
    c.edit(j);
    try {
      parse_config(j.dump(), "cfg/config.json");
      ADD_FAILURE() << c.what << ": accepted";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("cfg/config.json"), std::string::npos) << c.what << ": " << message;
      EXPECT_NE(message.find(c.field), std::string::npos) << c.what << ": '" << message << "' lacks " << c.field;
    }
  }
  // Nested fields are named with their path.
  json n = nested(flat_form(base));
  n["text_config"].erase("head_dim");
  EXPECT_THROW(
      {
        try {
          parse_config(n.dump(), "n.json");
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("'text_config.head_dim' is required"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  EXPECT_THROW(parse_config("{", "bad.json"), Error);
  EXPECT_THROW(parse_config("[]", "bad.json"), Error);
  EXPECT_THROW(load_config("/nonexistent-dir"), Error);
}

// transformers' own resolution of the same configs, recorded from the
// modules it builds (tools/oracle/gemma4_config_resolution.py).
TEST(Gemma4Config, MatchesTransformersResolution) {
  const std::string path = std::string(ROWLM_SOURCE_DIR) + "/tests/fixtures/gemma4_config_resolution.json";
  std::ifstream in(path);
  if (!in) GTEST_SKIP() << path << " not generated yet: run tools/oracle/gemma4_config_resolution.py";
  const json fixture = json::parse(in);
  ASSERT_FALSE(fixture.at("cases").empty());
  for (const json& c : fixture.at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    if (c.contains("transformers_error")) continue;  // transformers cannot build this config; nothing to compare
    const Config got = parse_config(c.at("config").dump(), "fixture");
    const json& layers = c.at("layers");
    ASSERT_EQ(got.layers.size(), layers.size());
    for (std::size_t l = 0; l < layers.size(); ++l) {
      SCOPED_TRACE("layer " + std::to_string(l));
      const json& want = layers[l];
      const LayerConfig& g = got.layers[l];
      EXPECT_EQ(g.type == F ? "full_attention" : "sliding_attention", want.at("type").get<std::string>());
      EXPECT_EQ(g.head_dim, want.at("head_dim").get<int>());
      EXPECT_EQ(got.num_heads, want.at("q_heads").get<int>());
      EXPECT_EQ(g.kv_heads, want.at("kv_heads").get<int>());
      EXPECT_EQ(g.owns_kv(), want.at("has_k_proj").get<bool>());
      EXPECT_EQ(g.owns_kv() && !g.k_eq_v, want.at("has_v_proj").get<bool>());
      if (!want.at("kv_source").is_null()) {
        EXPECT_EQ(g.kv_source, want.at("kv_source").get<int>());
      }
      EXPECT_EQ(g.intermediate, want.at("intermediate").get<int>());
      EXPECT_EQ(g.window, want.at("window").get<int>());
    }
  }
}

// Fuzz: every field of a rich config replaced by values of every JSON type.
// Each result is a rowlm::Error or a config whose resolution is coherent.
TEST(Gemma4Config, AnyFieldValueGivesAnErrorOrACoherentConfig) {
  const std::vector<json> values = {nullptr, -1, 0, 1, 2, 3, 7, int64_t(1) << 40, 1e300, 0.5, "x", true,
                                    json::array(), json::array({1, "a"}), json::object(), json::array({0, 0, 0})};
  const TinyConfig base = tiny_configs()[4];  // everything
  int accepted = 0, rejected = 0;
  auto check = [&](const json& j) {
    try {
      const Config c = parse_config(j.dump(), "fuzz.json");
      ++accepted;
      ASSERT_EQ(int(c.layers.size()), c.num_layers);
      for (const LayerConfig& l : c.layers) {
        ASSERT_GT(l.head_dim, 0);
        ASSERT_GT(l.kv_heads, 0);
        ASSERT_EQ(c.num_heads % l.kv_heads, 0);
        ASSERT_TRUE(l.kv_source >= 0 && l.kv_source <= l.index);
        ASSERT_EQ(c.layers[l.kv_source].type, l.type);
        ASSERT_GT(l.intermediate, 0);
      }
      for (int id : c.eos_token_ids) ASSERT_TRUE(id >= 0 && id < c.vocab_size);
    } catch (const Error&) {
      ++rejected;
    }
  };
  for (const json& form : {flat_form(base), per_layer_form(base), nested(per_layer_form(base))}) {
    std::vector<json::json_pointer> paths;
    std::function<void(const json&, const json::json_pointer&)> walk = [&](const json& v, const json::json_pointer& at) {
      paths.push_back(at);
      if (v.is_object()) {
        for (const auto& [k, child] : v.items()) walk(child, at / k);
      } else if (v.is_array()) {
        for (std::size_t i = 0; i < v.size(); ++i) walk(v[i], at / i);
      }
    };
    walk(form, json::json_pointer());
    for (const auto& path : paths) {
      if (path.empty()) continue;
      for (const json& value : values) {
        json j = form;
        j[path] = value;
        check(j);
      }
      json j = form;  // and removed
      j[path.parent_pointer()].is_object() ? void(j[path.parent_pointer()].erase(path.back())) : void();
      check(j);
    }
  }
  EXPECT_GT(accepted, 50);
  EXPECT_GT(rejected, 500);
}

}  // namespace
}  // namespace rowlm::gemma4
