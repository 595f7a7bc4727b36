#pragma once
// llama.cpp's tensor names for the architectures rowlm runs (gguf-py's
// constants.py TENSOR_NAMES and tensor_mapping.py): the GGUF name of a
// tensor that the families' binders ask for by its Hugging Face name.
//
//   model.embed_tokens.weight                 token_embd.weight
//   model.layers.3.self_attn.q_proj.weight    blk.3.attn_q.weight
//
// Most architectures store their tensors as transformers does (llama.cpp
// runs qwen2, qwen3, qwen3moe, gemma3 and gemma4 with NEOX RoPE, whose
// halves are transformers' rotate_half), so a name is all that changes.
// Two exceptions, which the loaders undo:
//   llama     convert_hf_to_gguf.py's LlamaModel.permute reorders the rows of
//             q_proj and k_proj (weights and biases) for GGML's interleaved
//             RoPE (rope_rows below);
//   gemma3    Gemma3Model stores every norm weight as 1 + w (gemma3.h).
// Stacked experts (qwen3moe's ffn_*_exps) are asked for under MLX's
// switch_mlp names, whose [E, I, H] layout they share.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rowlm::gguf_names {

// The GGUF name of `hf_name` in a file of `arch` ("qwen3"), or nullopt if
// the architecture has no such tensor.
std::optional<std::string> to_gguf(std::string_view arch, std::string_view hf_name);

// Whether the rows of `hf_name` are stored permuted for GGML's interleaved
// RoPE in a file of `arch`, and which head count groups them.
enum class RopeRows { None, QueryHeads, KeyValueHeads };
RopeRows rope_rows(std::string_view arch, std::string_view hf_name);

// For a permuted tensor of `heads` heads of `head_dim` rows: the GGUF row
// that transformers' row r is stored in (from[r]).
std::vector<int64_t> rope_rows_source(int64_t heads, int64_t head_dim);

}  // namespace rowlm::gguf_names
