#pragma once
// Qwen 3 dense decoder (Qwen3ForCausalLM, model_type "qwen3") on the shared
// decoder: pre-norm layers, q/k RMS norms per head before RoPE, GQA with a
// head_dim independent of hidden / heads, SiLU-gated MLP, scores scaled by
// head_dim^-0.5, tied or untied output head, optional attention biases and
// sliding-window layers (layer_types / use_sliding_window), RoPE theta from
// the config (rope_parameters, or the older rope_theta). Checked against
// transformers 5.17's modeling_qwen3 (tools/oracle/make_qwen3_fixtures.py).

#include <memory>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "model/decoder.h"
#include "model/model.h"
#include "model/quantization_config.h"

namespace rowlm::qwen3 {

struct Config {
  // config.json's MLX quantization entry (none for a plain checkpoint).
  decoder::QuantizationConfig quantization;
  std::string model_type;
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;          // full layers
  double rope_theta_sliding = 10000.0;  // sliding layers (the same unless rope_parameters is keyed by type)
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  int max_position_embeddings = 0;
  int sliding_window = 0;            // window of the sliding layers (0: none)
  std::vector<bool> sliding;         // per layer
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;
};

// Parses and validates config.json text; errors name `source` and the field.
Config parse_config(const std::string& json_text, const std::string& source);
Config load_config(const std::string& model_dir);

decoder::DecoderConfig decoder_config(const Config& config);
// Binds model.* (and lm_head.weight when untied) from <dir>'s safetensors.
decoder::DecoderWeights load_weights(const std::string& model_dir, const Config& config);
// Binds llama.cpp's names from a GGUF file (gguf_model.h); every tensor of
// the file must be used.
decoder::DecoderWeights load_gguf_weights(const gguf::File& file, const Config& config);
decoder::DecoderWeights make_synthetic_weights(const Config& config, uint64_t seed, float stddev = 0.02f);

std::unique_ptr<Model> make_model(const Config& config, decoder::DecoderWeights weights, Backend& backend,
                                  std::string directory = "");
std::unique_ptr<Model> load(const std::string& dir, Backend& backend);

}  // namespace rowlm::qwen3
