#include "model/gemma3.h"

#include <cmath>
#include <sstream>

#include "core/dtype.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "model/config_fields.h"
#include "model/gguf_source.h"
#include "model/weight_binder.h"

namespace rowlm::gemma3 {
namespace {

using config::Fields;
using config::json;
using config::token_ids;

// Gemma3TextConfig.convert_rope_params_to_dict: rope_parameters keyed by
// layer type, each entry defaulting to {rope_type: default}; the older
// rope_scaling updates the full layers' entry; the bases default to
// rope_theta (1e6) for full and rope_local_base_freq (1e4) for sliding layers.
rope::RopeSpec parse_rope(const Fields& f, const std::string& source, const char* layer_type, int max_position) {
  const bool full = std::string(layer_type) == "full_attention";
  json entry = {{"rope_type", "default"}};
  std::string path = "rope_parameters." + std::string(layer_type) + ".";
  if (const json* rp = f.find("rope_parameters"); rp && !rp->is_null()) {
    if (!rp->is_object() || !(rp->contains("full_attention") || rp->contains("sliding_attention")))
      f.fail("rope_parameters", "must be an object keyed by layer type (full_attention, sliding_attention)");
    if (const auto it = rp->find(layer_type); it != rp->end() && !it->is_null()) {
      if (!it->is_object()) f.fail(path, "must be an object");
      entry = *it;
    }
  }
  if (const json* scaling = f.find("rope_scaling"); full && scaling && !scaling->is_null()) {
    if (!scaling->is_object()) f.fail("rope_scaling", "must be an object");
    entry.update(*scaling);
    path = "rope_scaling.";
  }
  const double theta = full ? f.number("rope_theta", 1e6) : f.number("rope_local_base_freq", 1e4);
  return rope::parse_entry(Fields(entry, f.path(path), source), theta, max_position, "gemma3");
}

}  // namespace

Config parse_config(const std::string& json_text, const std::string& source) {
  const json top = config::parse_object(json_text, source);
  const Fields outer(top, "", source);
  Config c;
  c.quantization = decoder::QuantizationConfig::parse(top, source);
  c.model_type = outer.string("model_type", "");
  if (c.model_type != "gemma3" && c.model_type != "gemma3_text")
    outer.fail("model_type", "'" + c.model_type + "' is not a Gemma 3 model (gemma3_text, gemma3)");
  const config::TextSection text = config::text_section(top, outer, c.model_type == "gemma3", c.model_type);
  const Fields f(*text.object, text.prefix, source);
  if (const std::string inner = f.string("model_type", "gemma3_text"); inner != "gemma3_text")
    f.fail("model_type", "'" + inner + "' is not a Gemma 3 text model (gemma3_text)");

  // Defaults are transformers 5.17's Gemma3TextConfig.
  c.vocab_size = f.integer("vocab_size", 262208);
  c.hidden_size = f.integer("hidden_size", 2304);
  c.intermediate_size = f.integer("intermediate_size", 9216);
  c.num_layers = f.integer("num_hidden_layers", 26);
  c.num_heads = f.integer("num_attention_heads", 8);
  c.num_kv_heads = f.nullable_integer("num_key_value_heads", 4, c.num_heads, 1);
  c.head_dim = f.integer("head_dim", 256);
  c.max_position_embeddings = f.integer("max_position_embeddings", 131072);
  c.rms_norm_eps = f.number("rms_norm_eps", 1e-6);
  if (!(c.rms_norm_eps > 0.0 && c.rms_norm_eps < 1.0)) f.fail("rms_norm_eps", "must be in (0, 1)");
  c.query_pre_attn_scalar = f.number("query_pre_attn_scalar", 256);
  if (!(c.query_pre_attn_scalar > 0.0) || !std::isfinite(c.query_pre_attn_scalar))
    f.fail("query_pre_attn_scalar", "must be positive");
  for (auto [key, out] : {std::pair{"attn_logit_softcapping", &c.attn_logit_softcapping},
                          std::pair{"final_logit_softcapping", &c.final_logit_softcapping}}) {
    if (!f.has_value(key)) continue;
    *out = f.number(key, 0.0);
    if (!(*out >= 0.0) || !std::isfinite(*out)) f.fail(key, "must be non-negative or null");
  }
  c.attention_bias = f.boolean("attention_bias", false);
  // Tied embeddings may be declared on the text config or the outer one.
  c.tie_word_embeddings =
      f.has("tie_word_embeddings") ? f.boolean("tie_word_embeddings", true) : outer.boolean("tie_word_embeddings", true);
  if (f.string("hidden_activation", "gelu_pytorch_tanh") != "gelu_pytorch_tanh")
    f.fail("hidden_activation", "'" + f.string("hidden_activation", "") + "' is not supported (gelu_pytorch_tanh only)");
  if (f.has_value("use_bidirectional_attention") && f.boolean("use_bidirectional_attention", false))
    f.fail("use_bidirectional_attention", "true (a non-causal model) is not supported");
  if (c.num_heads % c.num_kv_heads != 0)
    f.fail("num_attention_heads", "(" + std::to_string(c.num_heads) + ") is not divisible by num_key_value_heads (" +
                                      std::to_string(c.num_kv_heads) + ")");
  if (c.head_dim % 2 != 0) f.fail("head_dim", "is odd (" + std::to_string(c.head_dim) + "); RoPE needs pairs");
  config::check_product_fits(f, "head_dim", c.num_heads, c.head_dim);

  // Layer types: the list, else every sliding_window_pattern-th layer full.
  c.sliding.assign(std::size_t(c.num_layers), false);
  if (const json* types = f.find("layer_types"); types && !types->is_null()) {
    if (!types->is_array() || types->size() != std::size_t(c.num_layers))
      f.fail("layer_types", "must list one type per layer (" + std::to_string(c.num_layers) + ")");
    for (int l = 0; l < c.num_layers; ++l) {
      const json& t = (*types)[std::size_t(l)];
      if (t == "sliding_attention") c.sliding[std::size_t(l)] = true;
      else if (t != "full_attention")
        f.fail("layer_types[" + std::to_string(l) + "]", "must be \"sliding_attention\" or \"full_attention\" (got " +
                                                            t.dump() + ")");
    }
  } else {
    const int pattern = f.integer("sliding_window_pattern", 6);
    for (int l = 0; l < c.num_layers; ++l) c.sliding[std::size_t(l)] = (l + 1) % pattern != 0;
  }
  bool any_sliding = false;
  for (bool s : c.sliding) any_sliding = any_sliding || s;
  if (any_sliding) {
    c.sliding_window = f.nullable_integer("sliding_window", 4096, 0, 1);
    if (c.sliding_window == 0) f.fail("sliding_window", "is null, but layer_types has sliding layers");
    c.rope_sliding = parse_rope(f, source, "sliding_attention", c.max_position_embeddings);
  }
  c.rope_full = parse_rope(f, source, "full_attention", c.max_position_embeddings);

  // Special tokens: the text config's, else the outer config's.
  auto ids = [&](const std::string& key, std::vector<int> fallback) {
    return f.has(key) ? token_ids(f, key, fallback, c.vocab_size) : token_ids(outer, key, fallback, c.vocab_size);
  };
  const std::vector<int> bos = ids("bos_token_id", {2});
  if (bos.size() > 1) (f.has("bos_token_id") ? f : outer).fail("bos_token_id", "must be a single token id");
  c.bos_token_id = bos.empty() ? -1 : bos[0];
  c.eos_token_ids = ids("eos_token_id", {1});
  return c;
}

Config load_config(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  return parse_config(config::read_text(path), path);
}

decoder::DecoderConfig decoder_config(const Config& c, DType embed_dtype) {
  decoder::DecoderConfig d;
  d.info.architecture = c.model_type;
  d.info.max_position = c.max_position_embeddings;
  d.info.bos_token_id = c.bos_token_id;
  d.info.eos_token_ids = c.eos_token_ids;
  d.vocab_size = c.vocab_size;
  d.hidden_size = c.hidden_size;
  d.norm_eps = float(c.rms_norm_eps);
  d.norm_kind = c.from_gguf ? NormKind::Plain : NormKind::OnePlus;
  // torch.tensor(hidden_size ** 0.5) is f32, then cast to the weights' dtype.
  const float scale = float(std::sqrt(double(c.hidden_size)));
  d.embed_scale = embed_dtype == DType::BF16  ? round_bf16(scale)
                  : embed_dtype == DType::F16 ? f16_to_f32(f32_to_f16(scale))
                                              : scale;
  // Gemma3ForCausalLM caps the logits; Gemma3ForConditionalGeneration does not.
  d.final_softcap = c.model_type == "gemma3_text" ? float(c.final_logit_softcapping) : 0.0f;
  d.tie_word_embeddings = c.tie_word_embeddings;
  d.ropes = {rope::frequencies(c.rope_full, c.head_dim)};
  if (c.sliding_window > 0) d.ropes.push_back(rope::frequencies(c.rope_sliding, c.head_dim));
  for (int l = 0; l < c.num_layers; ++l) {
    const bool sliding = c.sliding[std::size_t(l)];
    decoder::LayerConfig dl;
    decoder::AttentionConfig& a = dl.attention;
    a.num_heads = c.num_heads;
    a.kv_heads = c.num_kv_heads;
    a.head_dim = c.head_dim;
    a.window = sliding ? c.sliding_window : 0;
    a.rope = sliding ? 1 : 0;
    a.kv_source = l;
    a.qk_norm = true;
    a.qkv_bias = c.attention_bias;
    a.o_bias = c.attention_bias;
    // scaling = query_pre_attn_scalar ** -0.5, in Python double, applied in f32.
    a.scale = float(std::pow(c.query_pre_attn_scalar, -0.5));
    a.softcap = 0.0f;  // transformers' Gemma3Attention ignores attn_logit_softcapping
    dl.ffn.kind = decoder::FfnKind::Dense;
    dl.ffn.activation = Activation::GeluTanh;
    dl.ffn.intermediate = c.intermediate_size;
    dl.post_attention_norm = true;
    dl.post_ffn_norm = true;
    d.layers.push_back(dl);
  }
  return d;
}

namespace {

template <class Source>
void bind_all(Source& b, const Config& c, decoder::DecoderWeights& w) {
  const int64_t H = c.hidden_size, V = c.vocab_size, I = c.intermediate_size;
  const int64_t q = int64_t(c.num_heads) * c.head_dim, kv = int64_t(c.num_kv_heads) * c.head_dim, hd = c.head_dim;
  w.embed = b.matrix("embed_tokens.weight", {V, H});
  w.final_norm = b.vector("norm.weight", H);
  // Gemma3ForConditionalGeneration's head is top-level lm_head (transformers
  // 5) or language_model.lm_head (4.x), Gemma3ForCausalLM's lm_head.
  if (!c.tie_word_embeddings)
    w.lm_head = b.first_matrix_of({"lm_head.weight", "language_model.lm_head.weight"}, {V, H});
  w.layers.resize(std::size_t(c.num_layers));
  for (int l = 0; l < c.num_layers; ++l) {
    decoder::LayerWeights& lw = w.layers[std::size_t(l)];
    const std::string p = "layers." + std::to_string(l) + ".";
    lw.attn_norm = b.vector(p + "input_layernorm.weight", H);
    lw.post_attn_norm = b.vector(p + "post_attention_layernorm.weight", H);
    lw.ffn_norm = b.vector(p + "pre_feedforward_layernorm.weight", H);
    lw.post_ffn_norm = b.vector(p + "post_feedforward_layernorm.weight", H);
    lw.q_proj = b.matrix(p + "self_attn.q_proj.weight", {q, H});
    lw.k_proj = b.matrix(p + "self_attn.k_proj.weight", {kv, H});
    lw.v_proj = b.matrix(p + "self_attn.v_proj.weight", {kv, H});
    lw.o_proj = b.matrix(p + "self_attn.o_proj.weight", {H, q});
    lw.q_norm = b.vector(p + "self_attn.q_norm.weight", hd);
    lw.k_norm = b.vector(p + "self_attn.k_norm.weight", hd);
    if (c.attention_bias) {
      lw.q_bias = b.vector(p + "self_attn.q_proj.bias", q);
      lw.k_bias = b.vector(p + "self_attn.k_proj.bias", kv);
      lw.v_bias = b.vector(p + "self_attn.v_proj.bias", kv);
      lw.o_bias = b.vector(p + "self_attn.o_proj.bias", H);
    }
    lw.gate_proj = b.matrix(p + "mlp.gate_proj.weight", {I, H});
    lw.up_proj = b.matrix(p + "mlp.up_proj.weight", {I, H});
    lw.down_proj = b.matrix(p + "mlp.down_proj.weight", {H, I});
  }
}

std::string summary(const Config& c) {
  std::ostringstream s;
  int sliding = 0;
  for (bool x : c.sliding) sliding += x;
  s << "Gemma 3 decoder: " << c.num_layers << " layers";
  if (sliding) s << " (" << sliding << " sliding, window " << c.sliding_window << ", RoPE " << rope::describe(c.rope_sliding) << ")";
  s << ", hidden " << c.hidden_size << ", " << c.num_heads << " query heads / " << c.num_kv_heads << " KV heads of "
    << c.head_dim << ", MLP " << c.intermediate_size << ", vocab " << c.vocab_size << ", full-layer RoPE "
    << rope::describe(c.rope_full) << ", query_pre_attn_scalar " << c.query_pre_attn_scalar
    << (c.tie_word_embeddings ? ", tied head" : ", untied head");
  if (c.model_type == "gemma3_text" && c.final_logit_softcapping > 0) s << ", final softcap " << c.final_logit_softcapping;
  return s.str();
}

}  // namespace

decoder::DecoderWeights load_weights(const std::string& model_dir, const Config& c) {
  return decoder::load_checkpoint_weights(
      model_dir, c.quantization,
      [&](const Checkpoint& ck, const std::string& prefix) { decoder::check_layer_count(ck, prefix, c.num_layers); },
      [&](decoder::CheckpointSource& b, decoder::DecoderWeights& w) { bind_all(b, c, w); });
}

decoder::DecoderWeights load_gguf_weights(const gguf::File& file, const Config& c) {
  ROWLM_CHECK(c.from_gguf, "a gemma3 GGUF's config says so (its norms hold 1 + w)");
  decoder::DecoderWeights w;
  w.storage = file.owner();
  decoder::GgufSource b(file, "gemma3", w);
  bind_all(b, c, w);
  b.check_all_used();
  return w;
}

decoder::DecoderWeights make_synthetic_weights(const Config& c, uint64_t seed, float stddev) {
  decoder::DecoderWeights w;
  decoder::SyntheticSource source(seed, stddev, w);
  bind_all(source, c, w);
  return w;
}

std::unique_ptr<Model> make_model(const Config& config, decoder::DecoderWeights weights, Backend& backend,
                                  std::string directory, const ModelOptions& options) {
  decoder::DecoderConfig d = decoder_config(config, config.from_gguf ? DType::F32 : weights.embed.values.dtype());
  d.info.directory = std::move(directory);
  return decoder::make_decoder_model(std::move(d), std::move(weights), backend, summary(config), options);
}

std::unique_ptr<Model> load(const std::string& dir, Backend& backend, const ModelOptions& options) {
  Config config = load_config(dir);
  decoder::DecoderWeights weights = load_weights(dir, config);
  return make_model(config, std::move(weights), backend, dir, options);
}

}  // namespace rowlm::gemma3
