#pragma once
// The Gemma 4 text decoder's configuration, read from a Hugging Face
// config.json (model_type gemma4_text, or gemma4 / gemma4_unified with the
// text fields under text_config; or gemma4_assistant, transformers'
// Gemma4AssistantForCausalLM drafter, whose text stack under text_config
// reads its target's KV in every layer). Every field the forward pass needs
// is resolved here, per layer, so the forward never consults defaults.
// Design note: docs/design/families.md (Gemma 4).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/quantization_config.h"

namespace rowlm::gemma4 {

enum class LayerType { Sliding, Full };

enum class RopeType { Default, Proportional };

struct RopeParams {
  RopeType type = RopeType::Default;
  double theta = 10000.0;
  double partial_rotary_factor = 1.0;  // proportional only
  double factor = 1.0;                 // divides the frequencies
};

// Resolved geometry of one decoder layer.
struct LayerConfig {
  LayerType type = LayerType::Sliding;
  int head_dim = 0;         // head_dim, or global_head_dim for full layers
  int kv_heads = 0;         // KV heads this layer's attention reads
  bool k_eq_v = false;      // full layer without v_proj: V from the raw K projection
  int window = 0;           // sliding window W (keys p-W < j <= p); 0 for full layers
  int index = 0;
  int kv_source = 0;        // the layer whose K/V this layer reads (itself for donors; -1: the target's, in an assistant)
  bool owns_kv() const { return kv_source == index; }
  int intermediate = 0;     // dense MLP width (2·I for double-wide shared layers)
};

// Gemma4AssistantConfig's own fields (transformers 5.17 defaults).
struct AssistantFields {
  int backbone_hidden_size = 1536;      // the target's hidden size: pre_projection reads twice that
  bool use_ordered_embeddings = false;  // logits only for the tokens of the top centroids
  int num_centroids = 2048;
  int centroid_intermediate_top_k = 32;  // centroids whose tokens are scored
};

struct Config {
  // config.json's MLX quantization entry (none for a plain checkpoint).
  decoder::QuantizationConfig quantization;
  std::string model_type;   // as found at the top level of config.json
  int vocab_size = 0;
  int hidden_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;            // sliding layers (and full unless k_eq_v)
  int head_dim = 0;                // sliding
  int global_head_dim = 0;         // full
  int num_global_kv_heads = 0;     // full layers when attention_k_eq_v
  bool attention_k_eq_v = false;
  int intermediate_size = 0;
  int sliding_window = 0;
  double rms_norm_eps = 1e-6;
  double final_logit_softcapping = 0.0;  // 0 = off
  bool tie_word_embeddings = true;
  int max_position_embeddings = 0;
  RopeParams rope_sliding;
  RopeParams rope_full;
  // Per-layer embeddings (0 = off).
  int hidden_size_per_layer_input = 0;
  int vocab_size_per_layer_input = 0;
  int num_kv_shared_layers = 0;
  bool use_double_wide_mlp = false;
  // Mixture of experts (26B-A4B style).
  bool enable_moe_block = false;
  int num_experts = 0;
  int top_k_experts = 0;
  int moe_intermediate_size = 0;
  // Special tokens.
  int bos_token_id = 2;
  int pad_token_id = 0;
  std::vector<int> eos_token_ids;

  // Set for model_type gemma4_assistant: every layer reads the target's KV
  // (kv_source -1), and the text stack has no per-layer inputs, MoE or
  // double-wide MLP.
  std::optional<AssistantFields> assistant;

  std::vector<LayerType> layer_types;
  std::vector<LayerConfig> layers;  // resolved, one per decoder layer

  int first_kv_shared_layer() const { return num_layers - num_kv_shared_layers; }
};

// Parses and validates `<dir>/config.json`; errors name the file and field.
Config load_config(const std::string& model_dir);
// Same, from JSON text; `source` names it in error messages.
Config parse_config(const std::string& json_text, const std::string& source);

}  // namespace rowlm::gemma4
