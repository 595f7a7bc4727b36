#include "model/gemma4_weights.h"

#include "core/error.h"
#include "io/checkpoint.h"
#include "model/gguf_source.h"
#include "model/weight_binder.h"

namespace rowlm::gemma4 {
namespace {

using decoder::DecoderWeights;
using decoder::LayerWeights;

// Tensors that show the checkpoint was made for another config: more
// layers, or PLE / MoE weights the config turns off. Binding would
// silently ignore them and produce garbage.
void check_checkpoint_matches_config(const Checkpoint& ck, const std::string& prefix, const Config& c) {
  decoder::check_layer_count(ck, prefix, c.num_layers);
  const std::string ple = prefix + "embed_tokens_per_layer.weight";
  if (c.hidden_size_per_layer_input == 0 && ck.contains(ple)) {
    throw Error(ck.file_of(ple) + ": tensor '" + ple +
                "' holds per-layer embeddings, but config.json has hidden_size_per_layer_input 0");
  }
  const std::string router = prefix + "layers.0.router.proj.weight";
  if (!c.enable_moe_block && ck.contains(router)) {
    throw Error(ck.file_of(router) + ": tensor '" + router + "' is an MoE router, but config.json has enable_moe_block false");
  }
}

template <class Source>
void bind_experts(Source& b, const std::string& p, const Config& c, LayerWeights& lw) {
  const int64_t E = c.num_experts, Ie = c.moe_intermediate_size, H = c.hidden_size;
  const std::string& pre = b.prefix();
  const bool mlx = b.has(p + "experts.switch_glu.gate_proj.weight");
  Weight gate, up, gate_up;
  if (mlx) {  // MLX: split gate and up stacks
    gate = b.matrix(p + "experts.switch_glu.gate_proj.weight", {E, Ie, H});
    up = b.matrix(p + "experts.switch_glu.up_proj.weight", {E, Ie, H});
  } else {  // transformers: one [E, 2·I_e, H] stack, gate rows first
    // The MLX name is never bound here (its branch is above); it is listed so
    // that a checkpoint with neither layout gets an error naming both.
    gate_up = b.first_matrix_of({pre + p + "experts.gate_up_proj", pre + p + "experts.gate_up_proj.weight",
                                 pre + p + "experts.switch_glu.gate_proj.weight"},
                                {E, 2 * Ie, H});
  }
  const Weight down = b.first_matrix_of({pre + p + "experts.down_proj", pre + p + "experts.down_proj.weight",
                                         pre + p + "experts.switch_glu.down_proj.weight"},
                                        {E, H, Ie});
  lw.experts = mlx ? decoder::experts_from_stacks(gate, up, down, E) : decoder::experts_from_gate_up_stack(gate_up, down, E);
}

// Every tensor the config calls for, taken from `b` (a CheckpointSource or a
// SyntheticSource): the one place that knows the names and shapes of a
// Gemma 4 checkpoint.
template <class Source>
void bind_all(Source& b, const Config& c, DecoderWeights& w) {
  const std::string& prefix = b.prefix();
  const int64_t H = c.hidden_size, V = c.vocab_size, nH = c.num_heads, L = c.num_layers;
  const int64_t P = c.hidden_size_per_layer_input;

  w.embed = b.matrix("embed_tokens.weight", {V, H});
  w.final_norm = b.vector("norm.weight", H);
  if (!c.tie_word_embeddings) {
    const std::string mlx_head = prefix == "language_model.model." ? "language_model.lm_head.weight" : "lm_head.weight";
    w.lm_head = b.first_matrix_of({mlx_head, prefix + "lm_head.weight"}, {V, H});
  }
  if (P > 0) {
    w.per_layer_embed = b.matrix("embed_tokens_per_layer.weight", {c.vocab_size_per_layer_input, L * P});
    w.per_layer_model_projection = b.matrix("per_layer_model_projection.weight", {L * P, H});
    w.per_layer_projection_norm = b.vector("per_layer_projection_norm.weight", P);
  }

  w.layers.resize(c.num_layers);
  for (const LayerConfig& lc : c.layers) {
    LayerWeights& lw = w.layers[lc.index];
    const std::string p = "layers." + std::to_string(lc.index) + ".";
    const int64_t hd = lc.head_dim, kv = int64_t(lc.kv_heads) * lc.head_dim, I = lc.intermediate;

    lw.attn_norm = b.vector(p + "input_layernorm.weight", H);
    lw.post_attn_norm = b.vector(p + "post_attention_layernorm.weight", H);
    lw.ffn_norm = b.vector(p + "pre_feedforward_layernorm.weight", H);
    lw.post_ffn_norm = b.vector(p + "post_feedforward_layernorm.weight", H);

    lw.q_proj = b.matrix(p + "self_attn.q_proj.weight", {nH * hd, H});
    lw.q_norm = b.vector(p + "self_attn.q_norm.weight", hd);
    lw.o_proj = b.matrix(p + "self_attn.o_proj.weight", {H, nH * hd});
    if (lc.owns_kv()) {  // KV-shared layers' k/v (if a converter kept them) go unread
      lw.k_proj = b.matrix(p + "self_attn.k_proj.weight", {kv, H});
      lw.k_norm = b.vector(p + "self_attn.k_norm.weight", hd);
      if (!lc.k_eq_v) lw.v_proj = b.matrix(p + "self_attn.v_proj.weight", {kv, H});
    }

    lw.gate_proj = b.matrix(p + "mlp.gate_proj.weight", {I, H});
    lw.up_proj = b.matrix(p + "mlp.up_proj.weight", {I, H});
    lw.down_proj = b.matrix(p + "mlp.down_proj.weight", {H, I});
    lw.layer_scalar = b.scalar(p + "layer_scalar");

    if (P > 0) {
      lw.per_layer_gate = b.matrix(p + "per_layer_input_gate.weight", {P, H});
      lw.per_layer_projection = b.matrix(p + "per_layer_projection.weight", {H, P});
      lw.per_layer_norm = b.vector(p + "post_per_layer_input_norm.weight", H);
    }
    if (c.enable_moe_block) {
      lw.router = b.matrix(p + "router.proj.weight", {c.num_experts, H});
      lw.router_scale = b.vector(p + "router.scale", H);
      lw.router_expert_scale = b.vector(p + "router.per_expert_scale", c.num_experts);
      bind_experts(b, p, c, lw);
      lw.expert_norm = b.vector(p + "pre_feedforward_layernorm_2.weight", H);
      lw.dense_post_norm = b.vector(p + "post_feedforward_layernorm_1.weight", H);
      lw.expert_post_norm = b.vector(p + "post_feedforward_layernorm_2.weight", H);
    }
  }
}

}  // namespace

DecoderWeights load_weights(const std::string& model_dir, const Config& c) {
  ROWLM_CHECK(int(c.layers.size()) == c.num_layers, "config is not resolved (use load_config)");
  return decoder::load_checkpoint_weights(
      model_dir, c.quantization,
      [&](const Checkpoint& ck, const std::string& prefix) { check_checkpoint_matches_config(ck, prefix, c); },
      [&](decoder::CheckpointSource& b, DecoderWeights& w) { bind_all(b, c, w); });
}

DecoderWeights load_gguf_weights(const gguf::File& file, const Config& c) {
  ROWLM_CHECK(int(c.layers.size()) == c.num_layers, "config is not resolved (use parse_config)");
  DecoderWeights w;
  w.storage = file.owner();
  decoder::GgufSource b(file, "gemma4", w);
  bind_all(b, c, w);
  b.check_all_used({"rope_freqs.weight"});
  return w;
}

DecoderWeights make_synthetic_weights(const Config& c, uint64_t seed, float stddev,
                                      std::optional<quant::AffineSpec> quantize) {
  ROWLM_CHECK(int(c.layers.size()) == c.num_layers, "config is not resolved (use parse_config)");
  DecoderWeights w;
  decoder::SyntheticSource source(seed, stddev, w, quantize);
  bind_all(source, c, w);
  return w;
}

}  // namespace rowlm::gemma4
