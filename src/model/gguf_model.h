#pragma once
// Models from GGUF files (llama.cpp's format): the architecture from
// general.architecture under llama.cpp's name, the config from its
// metadata keys, the weights by llama.cpp's tensor names (gguf_names.h).
// Each architecture's metadata is translated into the Hugging Face
// config.json its family already reads, so one parser validates both.
//
//   llama     Llama 2/3.x and Mistral (convert_hf_to_gguf.py's LlamaModel)
//   qwen2     Qwen 2/2.5            qwen3     Qwen 3 dense
//   qwen3moe  Qwen 3 MoE            (all four read by llama_style.h)
//   gemma3    Gemma 3 text (gemma3.h)
//   gemma4    Gemma 4 text, dense (Gemma4Model; MoE files are refused)
//
// gguf_config.h says how each architecture's keys are read (as llama.cpp's
// loader reads them) and gguf_names.h how its tensors are stored.
//
// Errors name the file and the key or tensor at fault.

#include <memory>
#include <string>

#include "io/gguf.h"
#include "model/config_fields.h"
#include "model/mlx_checkpoint.h"
#include "model/model.h"

namespace rowlm {

// Whether `path` names a GGUF file (a regular file starting with "GGUF").
bool is_gguf_file(const std::string& path);

// "gemma3, gemma4, llama, qwen2, qwen3, qwen3moe": the architectures
// load_gguf_model reads.
std::string supported_gguf_architectures();

// The config.json a transformers checkpoint of this model would have.
config::json gguf_hf_config(const gguf::File& file);

// Every tensor of the file, sorted by name, for `rowlm inspect`: its ggml
// type and, for block types, the affine form it is converted to
// ("Q4_K -> q4/32"), the shape outermost first and the bytes in the file.
std::vector<TensorFormat> gguf_tensor_formats(const std::string& path);

std::unique_ptr<Model> load_gguf_model(const std::string& path, Backend& backend, const ModelOptions& options = {});

}  // namespace rowlm
