#include "model/gguf_names.h"

#include <charconv>
#include <span>
#include <utility>

namespace rowlm::gguf_names {
namespace {

using Pair = std::pair<std::string_view, std::string_view>;

// Tensors outside the layers, by full Hugging Face name (llama, qwen2,
// qwen3, qwen3moe).
constexpr Pair kLlamaGlobal[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
};

// Tensors of layer N: "model.layers.N." + key -> "blk.N." + value. The
// lineage's layers (llama and qwen2 have no q/k norms; a binder asks only
// for what its config has, and GgufSource::check_all_used refuses the rest).
constexpr Pair kLlamaLayer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.bias", "attn_output.bias"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};

// Qwen 3 MoE's routed layers: the router and the experts stacked in 3-D
// tensors [E, I, H] / [E, H, I], which the binders ask for under MLX's
// switch_mlp names (the same stacked layout).
constexpr Pair kQwen3MoeLayer[] = {
    {"mlp.gate.weight", "ffn_gate_inp.weight"},
    {"mlp.switch_mlp.gate_proj.weight", "ffn_gate_exps.weight"},
    {"mlp.switch_mlp.up_proj.weight", "ffn_up_exps.weight"},
    {"mlp.switch_mlp.down_proj.weight", "ffn_down_exps.weight"},
};

// Gemma 3 and Gemma 4 (Gemma 3 uses the first rows only).
constexpr Pair kGemma4Global[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
    {"model.embed_tokens_per_layer.weight", "per_layer_token_embd.weight"},
    {"model.per_layer_model_projection.weight", "per_layer_model_proj.weight"},
    {"model.per_layer_projection_norm.weight", "per_layer_proj_norm.weight"},
};

// Gemma 4 dense layers (tensor_mapping.py's gemma2 / gemma3n / gemma4 rows;
// the converter appends ".weight" to layer_scalar).
constexpr Pair kGemma4Layer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"layer_scalar", "layer_output_scale.weight"},
    {"per_layer_input_gate.weight", "inp_gate.weight"},
    {"per_layer_projection.weight", "proj.weight"},
    {"post_per_layer_input_norm.weight", "post_norm.weight"},
};

struct Arch {
  std::string_view name;
  std::span<const Pair> global, layer, more_layer;
};

constexpr Arch kArchs[] = {
    {"llama", kLlamaGlobal, kLlamaLayer, {}},
    {"qwen2", kLlamaGlobal, kLlamaLayer, {}},
    {"qwen3", kLlamaGlobal, kLlamaLayer, {}},
    {"qwen3moe", kLlamaGlobal, kLlamaLayer, kQwen3MoeLayer},
    {"gemma3", kGemma4Global, kGemma4Layer, {}},
    {"gemma4", kGemma4Global, kGemma4Layer, {}},
};

}  // namespace

std::optional<std::string> to_gguf(std::string_view arch, std::string_view hf_name) {
  for (const Arch& a : kArchs) {
    if (a.name != arch) continue;
    for (const auto& [hf, gg] : a.global)
      if (hf == hf_name) return std::string(gg);
    constexpr std::string_view layers = "model.layers.";
    if (!hf_name.starts_with(layers)) return std::nullopt;
    std::string_view rest = hf_name.substr(layers.size());
    int index = -1;
    const auto [stop, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), index);
    if (ec != std::errc() || stop == rest.data() + rest.size() || *stop != '.') return std::nullopt;
    const std::string_view key = rest.substr(std::size_t(stop - rest.data()) + 1);
    for (std::span<const Pair> table : {a.layer, a.more_layer})
      for (const auto& [hf, gg] : table)
        if (hf == key) return "blk." + std::to_string(index) + "." + std::string(gg);
    return std::nullopt;
  }
  return std::nullopt;
}

RopeRows rope_rows(std::string_view arch, std::string_view hf_name) {
  // LlamaModel.modify_tensors permutes q_proj and k_proj, weights and biases.
  if (arch != "llama") return RopeRows::None;
  for (std::string_view suffix : {".self_attn.q_proj.weight", ".self_attn.q_proj.bias"})
    if (hf_name.ends_with(suffix)) return RopeRows::QueryHeads;
  for (std::string_view suffix : {".self_attn.k_proj.weight", ".self_attn.k_proj.bias"})
    if (hf_name.ends_with(suffix)) return RopeRows::KeyValueHeads;
  return RopeRows::None;
}

std::vector<int64_t> rope_rows_source(int64_t heads, int64_t head_dim) {
  // Within a head, GGUF row 2j + s holds the transformers row s·hd/2 + j
  // (s = 0: the first half, 1: the second): LlamaModel.permute's
  // reshape(heads, 2, hd/2).swapaxes(1, 2).
  std::vector<int64_t> from(std::size_t(heads * head_dim));
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t s = 0; s < 2; ++s)
      for (int64_t j = 0; j < half; ++j) from[std::size_t(h * head_dim + s * half + j)] = h * head_dim + 2 * j + s;
  return from;
}

}  // namespace rowlm::gguf_names
