#pragma once
// Gemma 4 text decoder (docs/design/families.md) on the shared decoder: per-type
// head sizes and KV-head counts, proportional RoPE, attention_k_eq_v, KV
// sharing, per-layer embeddings, double-wide MLP, layer_scalar, MoE, final
// softcap.

#include <memory>
#include <string>

#include "model/decoder.h"
#include "model/gemma4_config.h"
#include "model/gemma4_weights.h"
#include "model/model.h"

namespace rowlm::gemma4 {

// The shared decoder's configuration for a resolved Gemma 4 config.
decoder::DecoderConfig decoder_config(const Config& config);

std::unique_ptr<Model> make_model(const Config& config, decoder::DecoderWeights weights, Backend& backend,
                                  std::string directory = "", const ModelOptions& options = {});

// config.json + safetensors in `dir`.
std::unique_ptr<Model> load(const std::string& dir, Backend& backend, const ModelOptions& options = {});

// inv_freq for one layer type, as transformers computes it (f32).
decoder::RopeFrequencies rope_frequencies(const RopeParams& params, int head_dim);

}  // namespace rowlm::gemma4
