#pragma once
// The RoPE of one layer type as a Hugging Face config.json states it, and
// the inv_freq table transformers 5.17 computes from it
// (modeling_rope_utils.py): default, linear, dynamic and llama3. Shared by
// the families whose configs use these forms (llama_style.h, gemma3.h);
// Gemma 4's proportional RoPE stays in gemma4_config.h.

#include <string>

#include "model/config_fields.h"
#include "model/decoder.h"

namespace rowlm::rope {

enum class RopeType {
  Default,  // inv_freq[k] = θ^(−2k/hd)
  Linear,   // default / factor
  // NTK scaling that transformers applies only past max_position_embeddings;
  // rowlm never runs a row past that (the engine's context limit), so within
  // it the frequencies are the default ones.
  Dynamic,
  Llama3,   // Llama 3.1's wavelength bands (factor, low/high frequency factors, original context)
};

struct RopeSpec {
  RopeType type = RopeType::Default;
  double theta = 10000.0;
  double factor = 1.0;            // linear, dynamic, llama3
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  int original_max_position = 0;  // llama3
};

// Reads one RoPE entry: `entry` holds rope_type (or the older "type";
// absent: default), rope_theta (absent: `fallback_theta`) and the type's
// parameters. `max_position` is the config's max_position_embeddings (what
// llama3's original_max_position_embeddings defaults to). Errors name the
// field through `entry`'s path; `family` names who refuses an unknown type.
RopeSpec parse_entry(const config::Fields& entry, double fallback_theta, int max_position, const std::string& family);

// inv_freq over head_dim as transformers computes it in f32.
decoder::RopeFrequencies frequencies(const RopeSpec& spec, int head_dim);

// "default θ 10000", "llama3 θ 500000 ×32 (1, 4, 8192)": for model summaries.
std::string describe(const RopeSpec& spec);

}  // namespace rowlm::rope
