#pragma once
// llama.cpp's tensor names for the architectures rowlm runs (gguf-py's
// constants.py TENSOR_NAMES and tensor_mapping.py): the GGUF name of a
// tensor that the families' binders ask for by its Hugging Face name.
//
//   model.embed_tokens.weight                 token_embd.weight
//   model.layers.3.self_attn.q_proj.weight    blk.3.attn_q.weight
//
// Both architectures store their tensors as transformers does (llama.cpp
// runs qwen3 and gemma4 with NEOX RoPE, so q and k are not permuted, and
// gemma4's converter adds nothing to its norms), so a name is all that
// changes.

#include <optional>
#include <string>
#include <string_view>

namespace rowlm::gguf_names {

// The GGUF name of `hf_name` in a file of `arch` ("qwen3"), or nullopt if
// the architecture has no such tensor.
std::optional<std::string> to_gguf(std::string_view arch, std::string_view hf_name);

}  // namespace rowlm::gguf_names
