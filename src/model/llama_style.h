#pragma once
// The Llama lineage of dense and MoE decoders on the shared decoder: Llama
// (model_type "llama", Llama 2/3.x), Mistral ("mistral"), Qwen 2/2.5
// ("qwen2"), Qwen 3 ("qwen3") and Qwen 3 MoE ("qwen3_moe"). They share one
// layer: pre-norm (x̂·w), GQA attention with RoPE, a SiLU-gated MLP, and
// differ in data that this config resolves per model_type, each with the
// defaults of its transformers 5.17 config class:
//
//   q/k RMS norms per head      qwen3, qwen3_moe
//   attention biases            q/k/v always (qwen2); q/k/v/o with attention_bias (llama, qwen3, qwen3_moe)
//   head_dim                    its own field (qwen3: default 128), else hidden / heads
//   sliding window              layer_types or max_window_layers (qwen2, qwen3) with use_sliding_window;
//                               every layer (mistral: unless sliding_window is null; qwen3_moe: with
//                               use_sliding_window)
//   RoPE                        default, linear, dynamic or llama3 (rope_config.h)
//   routed experts              qwen3_moe: top-k of a softmax router (norm_topk_prob), on the layers
//                               that decoder_sparse_step and mlp_only_layers select
//
// Checked against transformers 5.17 (tools/oracle/make_llama_style_fixtures.py,
// make_qwen3_fixtures.py; docs/design/families.md).

#include <memory>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "model/decoder.h"
#include "model/quantization_config.h"
#include "model/model.h"
#include "model/rope_config.h"

namespace rowlm::llama_style {

struct Config {
  // config.json's MLX quantization entry (none for a plain checkpoint).
  decoder::QuantizationConfig quantization;
  std::string model_type;
  std::string family;  // "Llama", "Mistral", "Qwen 2", "Qwen 3", "Qwen 3 MoE"
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;  // the dense MLP's width
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  double rms_norm_eps = 1e-6;
  rope::RopeSpec rope;          // full layers
  rope::RopeSpec rope_sliding;  // sliding layers (the same unless rope_parameters is keyed by type)
  bool tie_word_embeddings = false;
  bool qk_norm = false;
  bool qkv_bias = false;
  bool o_bias = false;
  int max_position_embeddings = 0;
  int sliding_window = 0;       // window of the sliding layers (0: none)
  std::vector<bool> sliding;    // per layer
  // Routed experts (qwen3_moe): on the layers marked in `sparse`.
  int num_experts = 0;
  int experts_per_token = 0;
  int moe_intermediate_size = 0;
  bool norm_topk_prob = false;
  std::vector<bool> sparse;     // per layer
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;
};

// Parses and validates config.json text; errors name `source` and the field.
Config parse_config(const std::string& json_text, const std::string& source);
Config load_config(const std::string& model_dir);

decoder::DecoderConfig decoder_config(const Config& config);
// Binds model.* (and lm_head.weight when untied) from <dir>'s safetensors.
decoder::DecoderWeights load_weights(const std::string& model_dir, const Config& config);
// Binds llama.cpp's names from a GGUF file of the llama, qwen2, qwen3 or
// qwen3moe architecture (gguf_model.h, gguf_names.h), llama's q and k rows
// back in transformers' order; every tensor of the file must be used.
decoder::DecoderWeights load_gguf_weights(const gguf::File& file, const Config& config);
decoder::DecoderWeights make_synthetic_weights(const Config& config, uint64_t seed, float stddev = 0.02f);

std::unique_ptr<Model> make_model(const Config& config, decoder::DecoderWeights weights, Backend& backend,
                                  std::string directory = "", const ModelOptions& options = {});
std::unique_ptr<Model> load(const std::string& dir, Backend& backend, const ModelOptions& options = {});

}  // namespace rowlm::llama_style
