#include "model/gemma4_weights.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <random>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/safetensors.h"
#include "io/temp_dir.h"

namespace rowlm::gemma4 {
namespace {

using Weights = decoder::DecoderWeights;
using LayerWeights = decoder::LayerWeights;

using json = nlohmann::json;

// The "everything" fixture of tools/oracle/make_gemma4_fixtures.py: PLE, KV sharing, double-wide MLP, k_eq_v
// with one global KV head, MoE.
json everything_config() {
  return {{"model_type", "gemma4_text"},
          {"vocab_size", 128},
          {"hidden_size", 64},
          {"intermediate_size", 96},
          {"num_hidden_layers", 4},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"head_dim", 16},
          {"global_head_dim", 32},
          {"num_global_key_value_heads", 1},
          {"attention_k_eq_v", true},
          {"sliding_window", 4},
          {"layer_types", {"sliding_attention", "full_attention", "sliding_attention", "full_attention"}},
          {"final_logit_softcapping", 30.0},
          {"hidden_size_per_layer_input", 8},
          {"vocab_size_per_layer_input", 128},
          {"num_kv_shared_layers", 2},
          {"use_double_wide_mlp", true},
          {"enable_moe_block", true},
          {"num_experts", 8},
          {"top_k_experts", 2},
          {"moe_intermediate_size", 16}};
}

json dense_config() {
  json j = everything_config();
  j.update({{"hidden_size_per_layer_input", 0},
            {"num_kv_shared_layers", 0},
            {"enable_moe_block", false},
            {"num_hidden_layers", 3},
            {"layer_types", {"sliding_attention", "sliding_attention", "full_attention"}}});
  return j;
}

enum class Kind { Matrix, Vector, Scalar };

// One tensor the loader must bind, and where it must land in Weights.
struct Expected {
  std::string name;  // without the prefix
  Shape shape;
  Kind kind;
  std::function<Tensor(const Weights&)> get;  // unused for experts and scalars
  std::function<float(const Weights&)> scalar = nullptr;
};

// The checkpoint layout of docs/design/families.md (Gemma 4), written out from the
// config's resolved geometry.
std::vector<Expected> expected_tensors(const Config& c) {
  const int64_t H = c.hidden_size, V = c.vocab_size, nH = c.num_heads, P = c.hidden_size_per_layer_input;
  const int64_t L = c.num_layers, E = c.num_experts, Ie = c.moe_intermediate_size;
  std::vector<Expected> out = {
      {"embed_tokens.weight", {V, H}, Kind::Matrix, [](const Weights& w) { return w.embed.values; }},
      {"norm.weight", {H}, Kind::Vector, [](const Weights& w) { return w.final_norm; }},
  };
  if (P) {
    out.push_back({"embed_tokens_per_layer.weight", {c.vocab_size_per_layer_input, L * P}, Kind::Matrix,
                   [](const Weights& w) { return w.per_layer_embed.values; }});
    out.push_back({"per_layer_model_projection.weight", {L * P, H}, Kind::Matrix,
                   [](const Weights& w) { return w.per_layer_model_projection.values; }});
    out.push_back({"per_layer_projection_norm.weight", {P}, Kind::Vector,
                   [](const Weights& w) { return w.per_layer_projection_norm; }});
  }
  for (const LayerConfig& lc : c.layers) {
    const int l = lc.index;
    const std::string p = "layers." + std::to_string(l) + ".";
    const int64_t hd = lc.head_dim, kv = lc.kv_heads * hd, I = lc.intermediate;
    auto layer = [l](Tensor LayerWeights::*field) {
      return std::function<Tensor(const Weights&)>([l, field](const Weights& w) { return w.layers[l].*field; });
    };
    auto matrix = [l](Weight LayerWeights::*field) {
      return std::function<Tensor(const Weights&)>([l, field](const Weights& w) { return (w.layers[l].*field).values; });
    };
    out.push_back({p + "input_layernorm.weight", {H}, Kind::Vector, layer(&LayerWeights::attn_norm)});
    out.push_back({p + "post_attention_layernorm.weight", {H}, Kind::Vector, layer(&LayerWeights::post_attn_norm)});
    out.push_back({p + "pre_feedforward_layernorm.weight", {H}, Kind::Vector, layer(&LayerWeights::ffn_norm)});
    out.push_back({p + "post_feedforward_layernorm.weight", {H}, Kind::Vector, layer(&LayerWeights::post_ffn_norm)});
    out.push_back({p + "self_attn.q_proj.weight", {nH * hd, H}, Kind::Matrix, matrix(&LayerWeights::q_proj)});
    out.push_back({p + "self_attn.q_norm.weight", {hd}, Kind::Vector, layer(&LayerWeights::q_norm)});
    out.push_back({p + "self_attn.o_proj.weight", {H, nH * hd}, Kind::Matrix, matrix(&LayerWeights::o_proj)});
    if (lc.owns_kv()) {
      out.push_back({p + "self_attn.k_proj.weight", {kv, H}, Kind::Matrix, matrix(&LayerWeights::k_proj)});
      out.push_back({p + "self_attn.k_norm.weight", {hd}, Kind::Vector, layer(&LayerWeights::k_norm)});
      if (!lc.k_eq_v) out.push_back({p + "self_attn.v_proj.weight", {kv, H}, Kind::Matrix, matrix(&LayerWeights::v_proj)});
    }
    out.push_back({p + "mlp.gate_proj.weight", {I, H}, Kind::Matrix, matrix(&LayerWeights::gate_proj)});
    out.push_back({p + "mlp.up_proj.weight", {I, H}, Kind::Matrix, matrix(&LayerWeights::up_proj)});
    out.push_back({p + "mlp.down_proj.weight", {H, I}, Kind::Matrix, matrix(&LayerWeights::down_proj)});
    out.push_back({p + "layer_scalar", {1}, Kind::Scalar, nullptr, [l](const Weights& w) { return w.layers[l].layer_scalar; }});
    if (P) {
      out.push_back({p + "per_layer_input_gate.weight", {P, H}, Kind::Matrix, matrix(&LayerWeights::per_layer_gate)});
      out.push_back({p + "per_layer_projection.weight", {H, P}, Kind::Matrix, matrix(&LayerWeights::per_layer_projection)});
      out.push_back({p + "post_per_layer_input_norm.weight", {H}, Kind::Vector,
                     layer(&LayerWeights::per_layer_norm)});
    }
    if (c.enable_moe_block) {
      out.push_back({p + "router.proj.weight", {E, H}, Kind::Matrix, matrix(&LayerWeights::router)});
      out.push_back({p + "router.scale", {H}, Kind::Vector, layer(&LayerWeights::router_scale)});
      out.push_back({p + "router.per_expert_scale", {E}, Kind::Vector, layer(&LayerWeights::router_expert_scale)});
      out.push_back({p + "experts.gate_up_proj", {E, 2 * Ie, H}, Kind::Matrix, nullptr});
      out.push_back({p + "experts.down_proj", {E, H, Ie}, Kind::Matrix, nullptr});
      out.push_back({p + "pre_feedforward_layernorm_2.weight", {H}, Kind::Vector, layer(&LayerWeights::expert_norm)});
      out.push_back({p + "post_feedforward_layernorm_1.weight", {H}, Kind::Vector, layer(&LayerWeights::dense_post_norm)});
      out.push_back({p + "post_feedforward_layernorm_2.weight", {H}, Kind::Vector, layer(&LayerWeights::expert_post_norm)});
    }
  }
  return out;
}

float as_float(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::F32: return t.data<float>()[i];
    case DType::BF16: return bf16_to_f32(t.data<uint16_t>()[i]);
    case DType::F16: return f16_to_f32(t.data<uint16_t>()[i]);
    default: return NAN;
  }
}

Tensor random_float(DType dtype, Shape shape, std::mt19937& rng) {
  Tensor t(dtype, std::move(shape));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = dist(rng);
    if (dtype == DType::F32) t.data<float>()[i] = v;
    else if (dtype == DType::BF16) t.data<uint16_t>()[i] = f32_to_bf16(v);
    else t.data<uint16_t>()[i] = f32_to_f16(v);
  }
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// A checkpoint for `c` with random values in mixed dtypes, as
// transformers' (or, with mlx_experts, MLX's) names under `prefix`.
struct Fixture {
  std::map<std::string, Tensor> tensors;  // full name -> value
  std::vector<Expected> expected;
  std::string prefix;
  bool mlx_experts = false;
};

Fixture make_fixture(const Config& c, const std::string& prefix, bool mlx_experts, std::mt19937& rng) {
  Fixture fx{{}, expected_tensors(c), prefix, mlx_experts};
  const DType floats[] = {DType::F32, DType::BF16, DType::F16};
  for (const Expected& e : fx.expected) {
    const DType dtype = floats[rng() % 3];
    const bool expert_stack = e.name.find("experts.") != std::string::npos;
    if (expert_stack && mlx_experts) {
      const int64_t E = e.shape[0];
      const std::string p = e.name.substr(0, e.name.find("experts."));
      if (e.name.ends_with("gate_up_proj")) {
        const int64_t Ie = e.shape[1] / 2, H = e.shape[2];
        fx.tensors[prefix + p + "experts.switch_glu.gate_proj.weight"] = random_float(dtype, {E, Ie, H}, rng);
        fx.tensors[prefix + p + "experts.switch_glu.up_proj.weight"] = random_float(dtype, {E, Ie, H}, rng);
      } else {
        fx.tensors[prefix + p + "experts.switch_glu.down_proj.weight"] = random_float(dtype, e.shape, rng);
      }
      continue;
    }
    fx.tensors[prefix + e.name] = random_float(dtype, e.shape, rng);
  }
  return fx;
}

// Tensors the loader must tolerate and skip.
void add_extras(Fixture& fx, const Config& c, std::mt19937& rng) {
  const int64_t H = c.hidden_size;
  fx.tensors["model.vision_tower.encoder.layers.0.mlp.up_proj.weight"] = random_float(DType::BF16, {4, 4}, rng);
  fx.tensors["model.audio_tower.conv.weight"] = random_float(DType::F32, {3}, rng);
  fx.tensors["model.embed_vision.embedding_projection.weight"] = random_float(DType::BF16, {H, 4}, rng);
  fx.tensors["lm_head.weight"] = random_float(DType::BF16, {c.vocab_size, H}, rng);
  for (const LayerConfig& lc : c.layers) {
    const std::string p = fx.prefix + "layers." + std::to_string(lc.index) + ".self_attn.";
    if (!lc.owns_kv()) {  // some converters keep these; the model never reads them
      fx.tensors[p + "k_proj.weight"] = random_float(DType::BF16, {lc.kv_heads * lc.head_dim, H}, rng);
      fx.tensors[p + "v_proj.weight"] = random_float(DType::BF16, {lc.kv_heads * lc.head_dim, H}, rng);
      fx.tensors[p + "k_norm.weight"] = random_float(DType::BF16, {lc.head_dim}, rng);
    }
  }
}

void write_fixture(const TempDir& dir, const Fixture& fx, int shards) {
  std::vector<NamedTensors> parts(shards);
  json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", json::object()}};
  int i = 0;
  for (const auto& [name, t] : fx.tensors) {
    const int s = i++ % shards;
    parts[s].emplace_back(name, t);
    index["weight_map"][name] = "model-" + std::to_string(s) + ".safetensors";
  }
  if (shards == 1) {
    write_safetensors(dir.file("model.safetensors"), parts[0], {{"format", "pt"}});
    return;
  }
  for (int s = 0; s < shards; ++s) write_safetensors(dir.file("model-" + std::to_string(s) + ".safetensors"), parts[s]);
  std::ofstream(dir.file("model.safetensors.index.json")) << index.dump();
}

void expect_bound(const Weights& w, const Fixture& fx, const Config& c) {
  std::size_t bytes = 0;
  int64_t params = 0;
  for (const Expected& e : fx.expected) {
    SCOPED_TRACE(e.name);
    const bool expert_stack = e.name.find("experts.") != std::string::npos;
    if (!(expert_stack && fx.mlx_experts)) {
      const Tensor& src = fx.tensors.at(fx.prefix + e.name);
      bytes += src.nbytes();
      params += src.numel();
    }
    if (e.kind == Kind::Matrix && e.get) {
      EXPECT_TRUE(same_bytes(e.get(w), fx.tensors.at(fx.prefix + e.name)));
    } else if (e.kind == Kind::Vector) {
      const Tensor got = e.get(w), &src = fx.tensors.at(fx.prefix + e.name);
      ASSERT_EQ(got.dtype(), DType::F32);
      ASSERT_EQ(got.shape(), src.shape());
      for (int64_t i = 0; i < src.numel(); ++i) ASSERT_EQ(got.data<float>()[i], as_float(src, i)) << i;
    } else if (e.kind == Kind::Scalar) {
      EXPECT_EQ(e.scalar(w), as_float(fx.tensors.at(fx.prefix + e.name), 0));
    }
  }
  // Experts: per-expert views of the stacks, gate rows before up rows.
  const int64_t E = c.num_experts, Ie = c.moe_intermediate_size, H = c.hidden_size;
  for (const LayerConfig& lc : c.layers) {
    const LayerWeights& lw = w.layers[lc.index];
    const std::string p = fx.prefix + "layers." + std::to_string(lc.index) + ".experts.";
    if (!c.enable_moe_block) {
      EXPECT_TRUE(lw.experts.gate.empty());
      continue;
    }
    ASSERT_EQ(lw.experts.gate.size(), std::size_t(E));
    ASSERT_EQ(lw.experts.up.size(), std::size_t(E));
    ASSERT_EQ(lw.experts.down.size(), std::size_t(E));
    for (int64_t e = 0; e < E; ++e) {
      Tensor gate, up, down;
      if (fx.mlx_experts) {
        const Tensor& g = fx.tensors.at(p + "switch_glu.gate_proj.weight");
        const Tensor& u = fx.tensors.at(p + "switch_glu.up_proj.weight");
        const Tensor& d = fx.tensors.at(p + "switch_glu.down_proj.weight");
        gate = g.reshaped({E * Ie, H}).rows(e * Ie, (e + 1) * Ie);
        up = u.reshaped({E * Ie, H}).rows(e * Ie, (e + 1) * Ie);
        down = d.reshaped({E * H, Ie}).rows(e * H, (e + 1) * H);
        if (e == 0) {
          bytes += g.nbytes() + u.nbytes() + d.nbytes();
          params += g.numel() + u.numel() + d.numel();
        }
      } else {
        const Tensor& gu = fx.tensors.at(p + "gate_up_proj");
        gate = gu.reshaped({E * 2 * Ie, H}).rows(2 * e * Ie, 2 * e * Ie + Ie);
        up = gu.reshaped({E * 2 * Ie, H}).rows(2 * e * Ie + Ie, 2 * (e + 1) * Ie);
        down = fx.tensors.at(p + "down_proj").reshaped({E * H, Ie}).rows(e * H, (e + 1) * H);
        // Zero-copy: the up half sits right after the gate half in the mapping.
        EXPECT_EQ(static_cast<const std::byte*>(lw.experts.up[e].values.raw()),
                  static_cast<const std::byte*>(lw.experts.gate[e].values.raw()) + lw.experts.gate[e].values.nbytes());
      }
      EXPECT_TRUE(same_bytes(lw.experts.gate[e].values, gate)) << "expert " << e;
      EXPECT_TRUE(same_bytes(lw.experts.up[e].values, up)) << "expert " << e;
      EXPECT_TRUE(same_bytes(lw.experts.down[e].values, down)) << "expert " << e;
    }
  }
  // Shared layers bind no K/V; k_eq_v layers bind no V.
  for (const LayerConfig& lc : c.layers) {
    EXPECT_EQ(w.layers[lc.index].k_proj.empty(), !lc.owns_kv());
    EXPECT_EQ(w.layers[lc.index].v_proj.empty(), !lc.owns_kv() || lc.k_eq_v);
  }
  EXPECT_TRUE(w.lm_head.empty());
  EXPECT_EQ(w.weight_bytes, bytes);
  EXPECT_EQ(w.parameter_count, params);
}

const char* kPrefixes[] = {"model.", "model.language_model.", "language_model.model."};

TEST(Gemma4Weights, BindsEveryTensorUnderEachPrefixAndLayout) {
  std::mt19937 rng(17);
  for (const json& cfg : {everything_config(), dense_config()}) {
    const Config c = parse_config(cfg.dump(), "config.json");
    for (const std::string prefix : kPrefixes) {
      for (const int shards : {1, 3}) {
        for (const bool mlx_experts : {false, true}) {
          if (mlx_experts && !c.enable_moe_block) continue;
          SCOPED_TRACE(prefix + " shards=" + std::to_string(shards) + (mlx_experts ? " mlx experts" : ""));
          Fixture fx = make_fixture(c, prefix, mlx_experts, rng);
          add_extras(fx, c, rng);
          TempDir dir;
          write_fixture(dir, fx, shards);
          const Weights w = load_weights(dir.path(), c);
          expect_bound(w, fx, c);
        }
      }
    }
  }
}

TEST(Gemma4Weights, ViewsOutliveEverythingButTheWeights) {
  std::mt19937 rng(18);
  const Config c = parse_config(everything_config().dump(), "config.json");
  Fixture fx = make_fixture(c, "model.", false, rng);
  Weights w;
  {
    TempDir dir;
    write_fixture(dir, fx, 2);
    w = load_weights(dir.path(), c);
  }  // files unlinked; the mappings stay
  EXPECT_TRUE(same_bytes(w.layers[3].q_proj.values, fx.tensors.at("model.layers.3.self_attn.q_proj.weight")));
}

TEST(Gemma4Weights, UntiedHeadIsBound) {
  std::mt19937 rng(19);
  json cfg = dense_config();
  cfg["tie_word_embeddings"] = false;
  const Config c = parse_config(cfg.dump(), "config.json");
  for (const std::string prefix : kPrefixes) {
    Fixture fx = make_fixture(c, prefix, false, rng);
    TempDir dir;
    write_fixture(dir, fx, 1);
    EXPECT_THROW(load_weights(dir.path(), c), Error) << "no head yet";
    const std::string head = prefix == "language_model.model." ? "language_model.lm_head.weight" : "lm_head.weight";
    fx.tensors[head] = random_float(DType::BF16, {c.vocab_size, c.hidden_size}, rng);
    write_fixture(dir, fx, 1);
    const Weights w = load_weights(dir.path(), c);
    EXPECT_TRUE(same_bytes(w.lm_head.values, fx.tensors.at(head)));
  }
}

struct Damage {
  std::string what;
  std::function<void(Fixture&)> edit;
  std::vector<std::string> message_has;
};

TEST(Gemma4Weights, BadCheckpointsGiveErrorsNamingTensorAndFile) {
  const Config c = parse_config(everything_config().dump(), "config.json");
  const std::string q1 = "model.layers.1.self_attn.q_proj.weight";
  const std::vector<Damage> cases = {
      {"missing tensor", [](Fixture& f) { f.tensors.erase("model.layers.1.mlp.down_proj.weight"); },
       {"missing tensor 'model.layers.1.mlp.down_proj.weight'", "model.safetensors"}},
      {"missing v_proj", [](Fixture& f) { f.tensors.erase("model.layers.0.self_attn.v_proj.weight"); },
       {"'model.layers.0.self_attn.v_proj.weight'"}},
      {"missing layer_scalar", [](Fixture& f) { f.tensors.erase("model.layers.2.layer_scalar"); },
       {"'model.layers.2.layer_scalar'"}},
      {"missing experts", [](Fixture& f) { f.tensors.erase("model.layers.0.experts.gate_up_proj"); },
       {"'model.layers.0.experts.gate_up_proj'", "switch_glu"}},
      {"wrong shape",
       [&](Fixture& f) { f.tensors[q1] = Tensor(DType::BF16, {64, 64}); },
       {"'" + q1 + "'", "has shape [64, 64]", "implies [128, 64]", "model.safetensors"}},
      {"wrong shape of double-wide MLP",
       [](Fixture& f) { f.tensors["model.layers.2.mlp.up_proj.weight"] = Tensor(DType::F32, {96, 64}); },
       {"'model.layers.2.mlp.up_proj.weight'", "[96, 64]", "[192, 64]"}},
      {"wrong expert shape",
       [](Fixture& f) { f.tensors["model.layers.1.experts.down_proj"] = Tensor(DType::F32, {8, 16, 64}); },
       {"'model.layers.1.experts.down_proj'", "[8, 16, 64]", "[8, 64, 16]"}},
      {"wrong dtype", [](Fixture& f) { f.tensors["model.norm.weight"] = Tensor(DType::I32, {64}); },
       {"'model.norm.weight'", "dtype i32", "expected f32, bf16 or f16"}},
      {"layer_scalar shape", [](Fixture& f) { f.tensors["model.layers.0.layer_scalar"] = Tensor(DType::F32, {2}); },
       {"'model.layers.0.layer_scalar'", "[2]"}},
      // MLX-quantized matrices (a .scales tensor beside .weight) whose
      // tensors do not make an affine weight.
      {"MLX-quantized without biases",
       [](Fixture& f) {
         f.tensors["model.layers.0.mlp.gate_proj.weight"] = Tensor(DType::U32, {96, 8});
         f.tensors["model.layers.0.mlp.gate_proj.scales"] = Tensor(DType::BF16, {96, 1});
       },
       {"'model.layers.0.mlp.gate_proj.scales'", "no 'model.layers.0.mlp.gate_proj.biases'"}},
      {"MLX-quantized codes not u32",
       [](Fixture& f) {
         f.tensors["model.layers.0.mlp.gate_proj.scales"] = Tensor(DType::BF16, {96, 1});
         f.tensors["model.layers.0.mlp.gate_proj.biases"] = Tensor(DType::BF16, {96, 1});
       },
       {"'model.layers.0.mlp.gate_proj.weight'", "dtype f32", "expected u32 codes"}},
      {"MLX-quantized codes of 3.5 bits",
       [](Fixture& f) {
         f.tensors["model.layers.0.mlp.gate_proj.weight"] = Tensor(DType::U32, {96, 7});
         f.tensors["model.layers.0.mlp.gate_proj.scales"] = Tensor(DType::BF16, {96, 1});
         f.tensors["model.layers.0.mlp.gate_proj.biases"] = Tensor(DType::BF16, {96, 1});
       },
       {"'model.layers.0.mlp.gate_proj.weight'", "7 words of codes a row for 64 columns"}},
      {"MLX-quantized groups of 8",
       [](Fixture& f) {
         f.tensors["model.layers.0.mlp.gate_proj.weight"] = Tensor(DType::U32, {96, 8});
         f.tensors["model.layers.0.mlp.gate_proj.scales"] = Tensor(DType::BF16, {96, 8});
         f.tensors["model.layers.0.mlp.gate_proj.biases"] = Tensor(DType::BF16, {96, 8});
       },
       {"'model.layers.0.mlp.gate_proj.scales'", "8 groups a row for 64 columns"}},
      {"MLX-quantized biases unlike scales",
       [](Fixture& f) {
         f.tensors["model.layers.0.mlp.gate_proj.weight"] = Tensor(DType::U32, {96, 8});
         f.tensors["model.layers.0.mlp.gate_proj.scales"] = Tensor(DType::BF16, {96, 1});
         f.tensors["model.layers.0.mlp.gate_proj.biases"] = Tensor(DType::F16, {96, 1});
       },
       {"'model.layers.0.mlp.gate_proj.biases'", "is f16 [96, 1]", "is bf16 [96, 1]"}},
      {"MLX-quantized rows unlike the config",
       [](Fixture& f) {
         f.tensors["model.layers.0.mlp.gate_proj.weight"] = Tensor(DType::U32, {48, 8});
         f.tensors["model.layers.0.mlp.gate_proj.scales"] = Tensor(DType::BF16, {48, 1});
         f.tensors["model.layers.0.mlp.gate_proj.biases"] = Tensor(DType::BF16, {48, 1});
       },
       {"'model.layers.0.mlp.gate_proj.weight'", "has shape [48, 8]", "implies [96, 64]"}},
      {"MLX-quantized norm",
       [](Fixture& f) { f.tensors["model.norm.scales"] = Tensor(DType::BF16, {1}); },
       {"'model.norm.weight'", "MLX-quantized", "plain f32, bf16 or f16"}},
      {"more layers than the config",
       [](Fixture& f) { f.tensors["model.layers.4.input_layernorm.weight"] = Tensor(DType::F32, {64}); },
       {"'model.layers.4.input_layernorm.weight'", "num_hidden_layers 4"}},
      {"no embedding", [](Fixture& f) { f.tensors.erase("model.embed_tokens.weight"); },
       {"model.embed_tokens.weight", "language_model.model.embed_tokens.weight"}},
  };
  for (const Damage& d : cases) {
    std::mt19937 rng(20);
    Fixture fx = make_fixture(c, "model.", false, rng);
    d.edit(fx);
    TempDir dir;
    write_fixture(dir, fx, 1);
    try {
      load_weights(dir.path(), c);
      ADD_FAILURE() << d.what << ": accepted";
    } catch (const Error& e) {
      const std::string message = e.what();
      for (const std::string& part : d.message_has) {
        EXPECT_NE(message.find(part), std::string::npos) << d.what << ": '" << message << "' lacks '" << part << "'";
      }
    }
  }
}

TEST(Gemma4Weights, FeaturesTheConfigTurnsOffMustNotBeInTheCheckpoint) {
  std::mt19937 rng(21);
  const Config everything = parse_config(everything_config().dump(), "config.json");
  json cfg = everything_config();
  cfg["hidden_size_per_layer_input"] = 0;
  const Config no_ple = parse_config(cfg.dump(), "config.json");
  cfg = everything_config();
  cfg["enable_moe_block"] = false;
  const Config no_moe = parse_config(cfg.dump(), "config.json");
  TempDir dir;
  write_fixture(dir, make_fixture(everything, "model.", false, rng), 1);
  EXPECT_THROW(load_weights(dir.path(), no_ple), Error);
  EXPECT_THROW(load_weights(dir.path(), no_moe), Error);
  EXPECT_NO_THROW(load_weights(dir.path(), everything));
}

}  // namespace
}  // namespace rowlm::gemma4
