#include "model/gemma4.h"

#include <cmath>
#include <sstream>

#include "core/error.h"

namespace rowlm::gemma4 {

decoder::RopeFrequencies rope_frequencies(const RopeParams& params, int head_dim) {
  // Pairs rotated: all of them (default), or the first R (proportional).
  const int rotated = params.type == RopeType::Proportional ? int(params.partial_rotary_factor * head_dim) / 2
                                                            : head_dim / 2;
  return decoder::default_rope(head_dim, params.theta, params.factor, rotated);
}

namespace {

std::string summary(const Config& c) {
  std::ostringstream s;
  int full = 0, shared = 0;
  for (const LayerConfig& l : c.layers) {
    full += l.type == LayerType::Full;
    shared += !l.owns_kv();
  }
  s << "Gemma 4 text decoder: " << c.num_layers << " layers (" << c.num_layers - full << " sliding, window "
    << c.sliding_window << "; " << full << " full), hidden " << c.hidden_size << ", " << c.num_heads
    << " query heads, vocab " << c.vocab_size;
  if (shared) s << ", " << shared << " KV-shared layers";
  if (c.hidden_size_per_layer_input) s << ", per-layer embeddings " << c.hidden_size_per_layer_input;
  if (c.enable_moe_block) s << ", MoE " << c.num_experts << " experts top-" << c.top_k_experts;
  if (c.attention_k_eq_v) s << ", k_eq_v on full layers";
  return s.str();
}

}  // namespace

decoder::DecoderConfig decoder_config(const Config& c) {
  decoder::DecoderConfig d;
  d.info.architecture = c.model_type.empty() ? "gemma4_text" : c.model_type;
  d.info.max_position = c.max_position_embeddings;
  d.info.bos_token_id = c.bos_token_id;
  d.info.eos_token_ids = c.eos_token_ids;
  d.vocab_size = c.vocab_size;
  d.hidden_size = c.hidden_size;
  d.norm_eps = float(c.rms_norm_eps);
  d.norm_kind = NormKind::Plain;
  // HF scales in the weight dtype; rowlm's activations are f32, so √H is exact.
  d.embed_scale = std::sqrt(float(c.hidden_size));
  d.final_softcap = float(c.final_logit_softcapping);
  d.tie_word_embeddings = c.tie_word_embeddings;
  d.per_layer_input = c.hidden_size_per_layer_input;
  d.per_layer_vocab = c.vocab_size_per_layer_input;
  // One RoPE table per (layer type, head_dim): per_layer_config may give
  // layers of one type different head sizes.
  std::vector<std::pair<LayerType, int>> rope_keys;
  auto rope_index = [&](LayerType type, int head_dim) {
    for (std::size_t i = 0; i < rope_keys.size(); ++i)
      if (rope_keys[i] == std::pair{type, head_dim}) return int(i);
    rope_keys.emplace_back(type, head_dim);
    d.ropes.push_back(rope_frequencies(type == LayerType::Full ? c.rope_full : c.rope_sliding, head_dim));
    return int(rope_keys.size() - 1);
  };
  for (const LayerConfig& l : c.layers) {
    decoder::LayerConfig dl;
    decoder::AttentionConfig& a = dl.attention;
    a.num_heads = c.num_heads;
    a.kv_heads = l.kv_heads;
    a.head_dim = l.head_dim;
    a.window = l.window;
    a.rope = rope_index(l.type, l.head_dim);
    a.kv_source = l.kv_source;
    a.k_eq_v = l.k_eq_v;
    a.qk_norm = true;
    a.v_norm = true;
    a.scale = 1.0f;  // q and k are normalised; Gemma 4 does not scale scores
    decoder::FfnConfig& f = dl.ffn;
    f.kind = c.enable_moe_block ? decoder::FfnKind::DenseAndExperts : decoder::FfnKind::Dense;
    f.activation = Activation::GeluTanh;
    f.intermediate = l.intermediate;
    f.experts = c.num_experts;
    f.top_k = c.top_k_experts;
    f.expert_intermediate = c.moe_intermediate_size;
    f.renormalize = true;
    dl.post_attention_norm = true;
    dl.post_ffn_norm = true;
    d.layers.push_back(dl);
  }
  return d;
}

std::unique_ptr<Model> make_model(const Config& config, decoder::DecoderWeights weights, Backend& backend,
                                  std::string directory, const ModelOptions& options) {
  decoder::DecoderConfig d = decoder_config(config);
  d.info.directory = std::move(directory);
  return decoder::make_decoder_model(std::move(d), std::move(weights), backend, summary(config), options);
}

std::unique_ptr<Model> load(const std::string& dir, Backend& backend, const ModelOptions& options) {
  Config config = load_config(dir);
  decoder::DecoderWeights weights = load_weights(dir, config);
  return make_model(config, std::move(weights), backend, dir, options);
}

}  // namespace rowlm::gemma4
