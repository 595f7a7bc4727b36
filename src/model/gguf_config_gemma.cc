#include <cmath>
#include <cstring>
#include <vector>

#include "model/gguf_config.h"

namespace rowlm::gguf_config {
namespace {

// The fraction of rotated dimensions of full layers: llama.cpp's converter
// stores proportional RoPE as rope_freqs.weight, one factor per pair, 1 for
// the rotated pairs and 1e30 for the rest (Gemma4Model.generate_extra_tensors).
double rotated_fraction(const gguf::File& f) {
  const gguf::TensorInfo* t = f.find_tensor("rope_freqs.weight");
  if (!t) return 1.0;
  if (t->ne.size() != 1 || t->type != gguf::GgmlType::F32)
    f.fail("GGUF tensor 'rope_freqs.weight' must be an F32 vector");
  std::vector<float> v(std::size_t(t->numel()));
  std::memcpy(v.data(), t->bytes.data(), v.size() * sizeof(float));
  std::size_t rotated = 0;
  while (rotated < v.size() && v[rotated] == 1.0f) ++rotated;
  for (std::size_t i = rotated; i < v.size(); ++i)
    if (!(v[i] >= 1e29f)) f.fail("GGUF tensor 'rope_freqs.weight' is not 1 for rotated pairs then 1e30");
  return double(rotated) / double(v.size());
}

}  // namespace

// llama_model_gemma3::load_arch_hparams: a window and its period
// (sliding_window_pattern, default 6: every sixth layer full), the query
// scale 1/sqrt(head_dim) (1/sqrt(hidden / heads) for the 62-layer 27B), the
// final softcap, θ for full layers with their linear scaling and θ_swa
// (default 10000) unscaled for sliding ones. Gemma3Model writes every norm
// as 1 + w (gemma3.h's GGUF loader reads them as plain weights).
json gemma3_config(const gguf::File& f) {
  const Keys k{f, "gemma3"};
  const int layers = int(k.integer("block_count"));
  const int64_t hidden = k.integer("embedding_length");
  const int64_t heads = k.integer("attention.head_count");
  if (heads <= 0) k.fail("attention.head_count", "must be positive");
  const int64_t head_dim = k.integer("attention.key_length", hidden / heads);
  if (k.integer("attention.value_length", head_dim) != head_dim)
    k.fail("attention.value_length", "differs from attention.key_length");
  if (k.integer("rope.dimension_count", head_dim) != head_dim)
    k.fail("rope.dimension_count", "is not the head size: partial RoPE is not supported for gemma3");
  if (f.find_tensor("rope_freqs.weight")) f.fail("GGUF tensor 'rope_freqs.weight' is not supported for gemma3");
  const int64_t kv_heads = uniform_value(k, "attention.head_count_kv", layers);
  if (kv_heads <= 0 || heads % kv_heads != 0)
    k.fail("attention.head_count_kv", "(" + std::to_string(kv_heads) + ") does not divide " + k.key("attention.head_count") +
                                          " (" + std::to_string(heads) + ")");
  json layer_types = json::array();
  const int64_t window = k.integer("attention.sliding_window", 0);
  int64_t period = 6;
  if (const gguf::Value* p = f.find(k.key("attention.sliding_window_pattern"))) {
    // llama.cpp reads one period here and ignores an array.
    if (p->type == gguf::ValueType::Array)
      k.fail("attention.sliding_window_pattern", "is an array; gemma3 files give one period (llama.cpp would ignore it)");
    period = k.integer("attention.sliding_window_pattern");
    if (period < 0) k.fail("attention.sliding_window_pattern", "must not be negative");
  }
  for (int l = 0; l < layers; ++l) {
    const bool sliding = window > 0 && (period == 0 || l % period < period - 1);
    layer_types.push_back(sliding ? "sliding_attention" : "full_attention");
  }
  const double factor = linear_rope_factor(k);
  const double theta = k.number("rope.freq_base", 10000.0);
  json full_rope = {{"rope_type", "default"}, {"rope_theta", theta}};
  if (factor != 1.0) full_rope = {{"rope_type", "linear"}, {"rope_theta", theta}, {"factor", factor}};
  json c = {
      {"model_type", "gemma3_text"},
      {"vocab_size", vocab_size(f)},
      {"hidden_size", hidden},
      {"intermediate_size", uniform_value(k, "feed_forward_length", layers)},
      {"num_hidden_layers", layers},
      {"num_attention_heads", heads},
      {"num_key_value_heads", kv_heads},
      {"head_dim", head_dim},
      {"query_pre_attn_scalar", layers == 62 ? hidden / heads : head_dim},
      {"layer_types", layer_types},
      {"sliding_window", window > 0 ? json(window) : json(nullptr)},
      {"rms_norm_eps", k.number("attention.layer_norm_rms_epsilon", 1e-6)},
      {"max_position_embeddings", k.integer("context_length")},
      {"rope_parameters",
       {{"full_attention", full_rope},
        {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", k.number("rope.freq_base_swa", 10000.0)}}}}},
      {"final_logit_softcapping", k.has("final_logit_softcapping") ? json(k.number("final_logit_softcapping", 0.0))
                                                                    : json(nullptr)},
      {"tie_word_embeddings", f.find_tensor("output.weight") == nullptr},
      {"eos_token_id", stop_ids(f)},
  };
  add_special_ids(f, c);
  return c;
}

json gemma4_config(const gguf::File& f) {
  const Keys k{f, "gemma4"};
  if (linear_rope_factor(k) != 1.0) k.fail("rope.scaling.factor", "is not supported for gemma4");
  if (k.integer("expert_count", 0) > 0) f.fail("GGUF gemma4 files with experts (MoE) are not supported yet");
  const gguf::TensorInfo& embed = f.tensor("token_embd.weight");
  if (embed.ne.size() != 2) f.fail("GGUF tensor 'token_embd.weight' is not a matrix");
  const int layers = int(k.integer("block_count"));
  std::vector<bool> sliding(std::size_t(layers), false);
  if (k.has("attention.sliding_window_pattern")) {
    const auto& p = f.get_ints(k.key("attention.sliding_window_pattern"));
    if (int(p.size()) != layers) f.fail("GGUF metadata '" + k.key("attention.sliding_window_pattern") + "' needs one entry per layer");
    for (int l = 0; l < layers; ++l) sliding[std::size_t(l)] = p[std::size_t(l)] != 0;
  }
  const int64_t head_dim_full = k.integer("attention.key_length");
  const int64_t head_dim_swa = k.integer("attention.key_length_swa", head_dim_full);
  if (k.integer("attention.value_length", head_dim_full) != head_dim_full ||
      k.integer("attention.value_length_swa", head_dim_swa) != head_dim_swa)
    f.fail("GGUF metadata: gemma4 value_length must equal key_length");
  json layer_types = json::array(), per_layer_config = json::object();
  bool k_eq_v = false;
  const int64_t first_shared = layers - k.integer("attention.shared_kv_layers", 0);
  for (int l = 0; l < layers; ++l) {
    const bool s = sliding[std::size_t(l)];
    layer_types.push_back(s ? "sliding_attention" : "full_attention");
    per_layer_config[std::to_string(l)] = {{"head_dim", s ? head_dim_swa : head_dim_full},
                                    {"num_key_value_heads", layer_value(k, "attention.head_count_kv", l, layers)}};
    const std::string blk = "blk." + std::to_string(l) + ".";
    if (!s && l < first_shared && f.find_tensor(blk + "attn_k.weight") && !f.find_tensor(blk + "attn_v.weight"))
      k_eq_v = true;
  }
  const int64_t ff0 = layer_value(k, "feed_forward_length", 0, layers);
  bool double_wide = false;
  for (int l = 0; l < layers; ++l) {
    const int64_t ff = layer_value(k, "feed_forward_length", l, layers);
    if (ff == 2 * ff0 && l >= first_shared) double_wide = true;
    else if (ff != ff0) f.fail("GGUF metadata '" + k.key("feed_forward_length") + "' differs between layers other than as a double-wide MLP");
  }
  const int64_t swa_rot = k.integer("rope.dimension_count_swa", head_dim_swa);
  if (swa_rot != head_dim_swa)
    f.fail("GGUF metadata '" + k.key("rope.dimension_count_swa") + "': partial RoPE on sliding layers is not supported");
  json full_rope = {{"rope_type", "default"}, {"rope_theta", k.number("rope.freq_base", 1e6)}};
  if (f.find_tensor("rope_freqs.weight"))
    full_rope = {{"rope_type", "proportional"}, {"rope_theta", k.number("rope.freq_base", 1e6)},
                 {"partial_rotary_factor", rotated_fraction(f)}};
  json c = {
      {"model_type", "gemma4_text"},
      {"vocab_size", embed.ne[1]},
      {"hidden_size", k.integer("embedding_length")},
      {"intermediate_size", ff0},
      {"use_double_wide_mlp", double_wide},
      {"num_hidden_layers", layers},
      {"num_attention_heads", k.integer("attention.head_count")},
      {"num_key_value_heads", layer_value(k, "attention.head_count_kv", 0, layers)},
      {"head_dim", head_dim_swa},
      {"per_layer_config", per_layer_config},
      {"attention_k_eq_v", k_eq_v},
      {"layer_types", layer_types},
      {"sliding_window", k.integer("attention.sliding_window", 512)},
      {"rms_norm_eps", k.number("attention.layer_norm_rms_epsilon", 1e-6)},
      {"max_position_embeddings", k.integer("context_length")},
      {"rope_parameters",
       {{"sliding_attention", {{"rope_type", "default"}, {"rope_theta", k.number("rope.freq_base_swa", 1e4)}}},
        {"full_attention", full_rope}}},
      {"num_kv_shared_layers", layers - first_shared},
      {"hidden_size_per_layer_input", k.integer("embedding_length_per_layer_input", 0)},
      {"tie_word_embeddings", f.find_tensor("output.weight") == nullptr},
      {"enable_moe_block", false},
      {"eos_token_id", stop_ids(f)},
  };
  if (k.has("final_logit_softcapping")) c["final_logit_softcapping"] = k.number("final_logit_softcapping", 0.0);
  else c["final_logit_softcapping"] = nullptr;
  if (const gguf::TensorInfo* ple = f.find_tensor("per_layer_token_embd.weight"); ple && ple->ne.size() == 2)
    c["vocab_size_per_layer_input"] = ple->ne[1];
  add_special_ids(f, c);
  return c;
}

}  // namespace rowlm::gguf_config
