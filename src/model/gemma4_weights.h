#pragma once
// The Gemma 4 text decoder's tensors, bound by their checkpoint names into
// the shared DecoderWeights and checked against the config. Matrices are
// views into the mmapped safetensors files (f32, bf16 or f16, [out, in]);
// norm weights and scalars are converted to owned f32. Tensors a layer lacks
// stay empty. Design note: docs/design/families.md (Gemma 4, checkpoint layouts).

#include <optional>
#include <string>

#include "io/gguf.h"
#include "model/decoder.h"
#include "model/gemma4_config.h"

namespace rowlm::gemma4 {

// Opens <dir>'s safetensors (model.safetensors or the sharded index), finds
// the tensor-name prefix (model., model.language_model., or MLX's
// language_model.model.), and binds every tensor the config calls for,
// checking dtype and shape. Unused tensors (vision/audio towers, k/v of
// KV-shared layers, lm_head tied to the embedding) are skipped. Errors name
// the file and the tensor.
decoder::DecoderWeights load_weights(const std::string& model_dir, const Config& config);

// llama.cpp's names from a GGUF file (gguf_model.h); every tensor of the file
// but rope_freqs (the RoPE the config already describes) must be used.
decoder::DecoderWeights load_gguf_weights(const gguf::File& file, const Config& config);

// Random weights with the shapes `config` implies (bf16 matrices ~ N(0, stddev),
// norm weights near 1, layer scalars 1), for benchmarks and tests; with
// `quantize`, the matrices quantized with that spec (bf16 scales and biases).
decoder::DecoderWeights make_synthetic_weights(const Config& config, uint64_t seed, float stddev = 0.02f,
                                               std::optional<quant::AffineSpec> quantize = std::nullopt);

}  // namespace rowlm::gemma4
