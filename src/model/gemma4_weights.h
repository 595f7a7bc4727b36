#pragma once
// The Gemma 4 text decoder's tensors, bound by name from a checkpoint and
// checked against the config. Matrices are views into the mmapped
// safetensors files (f32, bf16 or f16, [out, in]); norm weights and scalars
// are converted to owned f32. Tensors a layer lacks stay empty.
// Spec: ../shared/docs/gemma4-spec.md §3.

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/gemma4_config.h"

namespace rowlm::gemma4 {

struct LayerWeights {
  // Norms, f32 [H] (q_norm / k_norm: [head_dim]).
  Tensor input_norm, post_attention_norm, pre_feedforward_norm, post_feedforward_norm;
  Tensor q_norm, k_norm;
  // Attention projections. k/v are empty on KV-shared layers; v is empty on
  // full layers with attention_k_eq_v.
  Tensor q_proj, k_proj, v_proj, o_proj;
  // Dense MLP (the "shared expert" branch in MoE layers).
  Tensor gate_proj, up_proj, down_proj;
  float layer_scalar = 1.0f;
  // Per-layer embeddings (P > 0).
  Tensor per_layer_input_gate;       // [P, H]
  Tensor per_layer_projection;       // [H, P]
  Tensor post_per_layer_input_norm;  // f32 [H]
  // Mixture of experts.
  Tensor router_proj;                // [E, H]
  Tensor router_scale;               // f32 [H]
  Tensor router_per_expert_scale;    // f32 [E]
  std::vector<Tensor> expert_gate;   // E × [I_e, H]
  std::vector<Tensor> expert_up;     // E × [I_e, H]
  std::vector<Tensor> expert_down;   // E × [H, I_e]
  Tensor pre_feedforward_norm_2, post_feedforward_norm_1, post_feedforward_norm_2;  // f32 [H]
};

struct Weights {
  Tensor embed_tokens;                // [V, H]; also the tied output head
  Tensor final_norm;                  // f32 [H]
  Tensor embed_tokens_per_layer;      // [V_ple, L·P]
  Tensor per_layer_model_projection;  // [L·P, H]
  Tensor per_layer_projection_norm;   // f32 [P]
  Tensor lm_head;                     // [V, H] only when !tie_word_embeddings; else empty
  std::vector<LayerWeights> layers;
  // Keeps the mmapped checkpoint files alive for the views above.
  std::shared_ptr<const void> storage;
  std::size_t weight_bytes = 0;       // bytes of all bound tensors as stored
  int64_t parameter_count = 0;
};

// Opens <dir>'s safetensors (model.safetensors or the sharded index), finds
// the tensor-name prefix (model., model.language_model., or MLX's
// language_model.model.), and binds every tensor the config calls for,
// checking dtype and shape. Unused tensors (vision/audio towers, k/v of
// KV-shared layers, lm_head tied to the embedding) are skipped. Errors name
// the file and the tensor.
Weights load_weights(const std::string& model_dir, const Config& config);

// Random weights with the shapes `config` implies (bf16 matrices ~ N(0, stddev),
// norm weights near 1, layer scalars 1), for benchmarks and tests.
Weights make_synthetic_weights(const Config& config, uint64_t seed, float stddev = 0.02f);

}  // namespace rowlm::gemma4
