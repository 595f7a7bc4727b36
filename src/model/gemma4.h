#pragma once
// Gemma 4 text decoder (../shared/docs/gemma4-spec.md §2): per-type head
// sizes and KV-head counts, proportional RoPE, attention_k_eq_v, KV sharing,
// per-layer embeddings, double-wide MLP, layer_scalar, MoE, final softcap.

#include <memory>

#include "model/gemma4_config.h"
#include "model/gemma4_weights.h"
#include "model/model.h"

namespace rowlm::gemma4 {

std::unique_ptr<Model> make_model(Config config, Weights weights, Backend& backend,
                                  std::string directory = "");

// inv_freq for one layer type, as transformers computes it (f32).
RopeFrequencies rope_frequencies(const RopeParams& params, int head_dim);

}  // namespace rowlm::gemma4
