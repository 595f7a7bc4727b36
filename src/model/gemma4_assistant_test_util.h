#pragma once
// Tests only: random Gemma 4 assistant checkpoints (config.json +
// model.safetensors, transformers' Gemma4AssistantForCausalLM layout) for a
// given target, written into a directory.

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/tensor.h"
#include "io/safetensors.h"

namespace rowlm::test {

struct AssistantShape {
  int vocab = 8192;
  int backbone = 256;  // the target's hidden size
  int hidden = 64;
  int heads = 2;
  int kv_heads = 1;     // the target's
  int head_dim = 64;    // the target's sliding layers'
  int global_head_dim = 128;  // the target's full layers'
  int window = 64;
  int intermediate = 96;
  std::vector<std::string> layer_types = {"sliding_attention", "sliding_attention", "full_attention"};
  int centroids = 0;   // > 0: ordered embeddings with `top_k` of them scored
  int top_k = 0;
};

inline nlohmann::json assistant_config(const AssistantShape& s) {
  nlohmann::json text = {{"model_type", "gemma4_text"},
                         {"vocab_size", s.vocab},
                         {"hidden_size", s.hidden},
                         {"intermediate_size", s.intermediate},
                         {"num_hidden_layers", int(s.layer_types.size())},
                         {"num_attention_heads", s.heads},
                         {"num_key_value_heads", s.kv_heads},
                         {"head_dim", s.head_dim},
                         {"global_head_dim", s.global_head_dim},
                         {"sliding_window", s.window},
                         {"layer_types", s.layer_types},
                         {"num_kv_shared_layers", int(s.layer_types.size())},
                         {"hidden_size_per_layer_input", 0},
                         {"vocab_size_per_layer_input", 0},
                         {"final_logit_softcapping", nullptr},
                         {"rope_parameters",
                          {{"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
                           {"full_attention",
                            {{"rope_type", "proportional"}, {"partial_rotary_factor", 0.25}, {"rope_theta", 1e6}}}}}};
  nlohmann::json c = {{"model_type", "gemma4_assistant"},
                      {"architectures", {"Gemma4AssistantForCausalLM"}},
                      {"backbone_hidden_size", s.backbone},
                      {"use_ordered_embeddings", s.centroids > 0},
                      {"tie_word_embeddings", true},
                      {"text_config", text}};
  if (s.centroids > 0) {
    c["num_centroids"] = s.centroids;
    c["centroid_intermediate_top_k"] = s.top_k;
  }
  return c;
}

// Random bf16 weights (matrices ~ N(0, 0.05), norms near 1, layer scalars
// near 1, a random token ordering) with the shapes `s` implies.
inline void write_random_assistant(const std::string& dir, const AssistantShape& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  NamedTensors tensors;
  auto add = [&](const std::string& name, Shape shape, float mean, float stddev) {
    Tensor t(DType::BF16, shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<uint16_t>()[i] = f32_to_bf16(mean + stddev * normal(rng));
    tensors.emplace_back(name, std::move(t));
  };
  const int64_t H = s.hidden;
  add("model.embed_tokens.weight", {s.vocab, H}, 0, 0.05f);
  add("model.norm.weight", {H}, 1, 0.2f);
  for (std::size_t l = 0; l < s.layer_types.size(); ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const int64_t hd = s.layer_types[l] == "full_attention" ? s.global_head_dim : s.head_dim;
    for (const char* n : {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                          "post_feedforward_layernorm"})
      add(p + n + ".weight", {H}, 1, 0.2f);
    add(p + "self_attn.q_proj.weight", {s.heads * hd, H}, 0, 0.05f);
    add(p + "self_attn.q_norm.weight", {hd}, 1, 0.2f);
    add(p + "self_attn.o_proj.weight", {H, s.heads * hd}, 0, 0.05f);
    add(p + "mlp.gate_proj.weight", {s.intermediate, H}, 0, 0.05f);
    add(p + "mlp.up_proj.weight", {s.intermediate, H}, 0, 0.05f);
    add(p + "mlp.down_proj.weight", {H, s.intermediate}, 0, 0.05f);
    add(p + "layer_scalar", {1}, 1, 0.2f);
  }
  add("pre_projection.weight", {H, 2 * int64_t(s.backbone)}, 0, 0.05f);
  add("post_projection.weight", {s.backbone, H}, 0, 0.05f);
  if (s.centroids > 0) {
    add("masked_embedding.centroids.weight", {s.centroids, H}, 0, 0.05f);
    Tensor order(DType::I64, {s.vocab});
    for (int64_t i = 0; i < s.vocab; ++i) order.data<int64_t>()[i] = i;
    std::shuffle(order.data<int64_t>(), order.data<int64_t>() + s.vocab, rng);
    tensors.emplace_back("masked_embedding.token_ordering", std::move(order));
  }
  write_safetensors(dir + "/model.safetensors", tensors);
  std::ofstream(dir + "/config.json") << assistant_config(s).dump(1);
}

}  // namespace rowlm::test
