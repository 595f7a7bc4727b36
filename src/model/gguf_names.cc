#include "model/gguf_names.h"

#include <charconv>
#include <span>
#include <utility>

namespace rowlm::gguf_names {
namespace {

using Pair = std::pair<std::string_view, std::string_view>;

// Tensors outside the layers, by full Hugging Face name.
constexpr Pair kQwen3Global[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
};

// Tensors of layer N: "model.layers.N." + key -> "blk.N." + value.
constexpr Pair kQwen3Layer[] = {
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
  std::span<const Pair> global, layer;
};

constexpr Arch kArchs[] = {
    {"qwen3", kQwen3Global, kQwen3Layer},
    {"gemma4", kGemma4Global, kGemma4Layer},
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
    for (const auto& [hf, gg] : a.layer)
      if (hf == key) return "blk." + std::to_string(index) + "." + std::string(gg);
    return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace rowlm::gguf_names
