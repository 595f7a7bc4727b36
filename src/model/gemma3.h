#pragma once
// Gemma 3 text decoder (Gemma3ForCausalLM, model_type "gemma3_text"; the
// text decoder of Gemma3ForConditionalGeneration, "gemma3" with
// text_config) on the shared decoder: (1 + w) RMS norms, pre and post norms
// around attention and the MLP, q/k norms per head, scores scaled by
// query_pre_attn_scalar^-½, interleaved sliding and full layers with their
// own RoPE (the full layers' may be scaled), the embedding scaled by √H in
// the weights' dtype, a gelu-tanh gated MLP, the final softcap of
// Gemma3ForCausalLM. Checked against transformers 5.17's modeling_gemma3
// (tools/oracle/make_family_fixtures.py; docs/design/families.md).
//
// As transformers does: attn_logit_softcapping is read but never applied
// (Gemma3Attention does not pass it to the attention), and the conditional
// model (gemma3) applies no final softcap (Gemma3ForConditionalGeneration's
// forward has none); released configs set neither.

#include <memory>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "model/decoder.h"
#include "model/quantization_config.h"
#include "model/model.h"
#include "model/rope_config.h"

namespace rowlm::gemma3 {

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
  double query_pre_attn_scalar = 256;
  double attn_logit_softcapping = 0;   // as config.json says (not applied; see above)
  double final_logit_softcapping = 0;  // as config.json says; 0: off (applied for gemma3_text only)
  rope::RopeSpec rope_full, rope_sliding;
  bool tie_word_embeddings = true;
  bool attention_bias = false;
  int max_position_embeddings = 0;
  int sliding_window = 0;
  std::vector<bool> sliding;  // per layer
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;
  // A GGUF file's model, as llama.cpp's gemma3 graph runs it (set by the
  // GGUF loader): the stored norm weights are already 1 + w (Gemma3Model
  // adds the 1 in f32, the sum transformers forms), so they apply as plain
  // weights, bitwise what (1 + w) gives; the embedding is scaled by √H in
  // f32 whatever its stored type.
  bool from_gguf = false;
};

// Parses and validates config.json text; errors name `source` and the field.
Config parse_config(const std::string& json_text, const std::string& source);
Config load_config(const std::string& model_dir);

// `embed_dtype` is the embedding's stored dtype: transformers multiplies by
// √H cast to it (Gemma3TextScaledWordEmbedding), so a bf16 checkpoint's
// scale is √H rounded to bf16.
decoder::DecoderConfig decoder_config(const Config& config, DType embed_dtype = DType::F32);
decoder::DecoderWeights load_weights(const std::string& model_dir, const Config& config);
// Binds llama.cpp's gemma3 names from a GGUF file (gguf_model.h); every
// tensor of the file must be used. `config` must have from_gguf set.
decoder::DecoderWeights load_gguf_weights(const gguf::File& file, const Config& config);
decoder::DecoderWeights make_synthetic_weights(const Config& config, uint64_t seed, float stddev = 0.02f);

std::unique_ptr<Model> make_model(const Config& config, decoder::DecoderWeights weights, Backend& backend,
                                  std::string directory = "", const ModelOptions& options = {});
std::unique_ptr<Model> load(const std::string& dir, Backend& backend, const ModelOptions& options = {});

}  // namespace rowlm::gemma3
