#include "model/qwen3.h"

#include <cmath>
#include <sstream>

#include "core/error.h"
#include "io/checkpoint.h"
#include "model/config_fields.h"
#include "model/gguf_source.h"
#include "model/weight_binder.h"

namespace rowlm::qwen3 {
namespace {

using config::Fields;
using config::json;

// The RoPE base of one layer type: rope_parameters {rope_type: default,
// rope_theta} as transformers 5 writes it (flat, or keyed by layer type), or
// the older top-level rope_theta with rope_scaling null.
double parse_rope_theta(const Fields& f, const std::string& source, const char* layer_type) {
  std::string key = "rope_parameters";
  const json* rp = f.find(key);
  if (!rp || rp->is_null()) rp = f.find(key = "rope_scaling");
  double theta = f.number("rope_theta", 10000.0);
  if (rp && !rp->is_null()) {
    if (!rp->is_object()) f.fail(key, "must be an object");
    const json* entry = rp;
    std::string path = key + ".";
    if (rp->contains("full_attention") || rp->contains("sliding_attention")) {
      if (!rp->contains(layer_type)) f.fail(key, std::string("has no entry for ") + layer_type + " layers");
      entry = &(*rp)[layer_type];
      path += std::string(layer_type) + ".";
    }
    if (!entry->is_object()) f.fail(path, "must be an object");
    const Fields r(*entry, f.path(path), source);
    const std::string type = r.string("rope_type", r.string("type", "default"));
    if (type != "default")
      r.fail("rope_type", "'" + type + "' is not supported for qwen3 yet (only default RoPE)");
    theta = r.number("rope_theta", theta);
  }
  if (!(theta > 1.0) || !std::isfinite(theta)) f.fail("rope_theta", "must be greater than 1");
  return theta;
}

}  // namespace

Config parse_config(const std::string& json_text, const std::string& source) {
  json top;
  try {
    top = json::parse(json_text);
  } catch (const json::exception& e) {
    throw Error(source + ": not valid JSON (" + e.what() + ")");
  }
  if (!top.is_object()) throw Error(source + ": not a JSON object");
  const Fields f(top, "", source);
  Config c;
  c.quantization = decoder::QuantizationConfig::parse(top, source);
  c.model_type = f.string("model_type", "");
  if (c.model_type != "qwen3") f.fail("model_type", "'" + c.model_type + "' is not a Qwen 3 dense model (qwen3)");

  // Defaults are transformers 5.17's Qwen3Config.
  c.vocab_size = f.integer("vocab_size", 151936);
  c.hidden_size = f.integer("hidden_size", 4096);
  c.intermediate_size = f.integer("intermediate_size", 22016);
  c.num_layers = f.integer("num_hidden_layers", 32);
  c.num_heads = f.integer("num_attention_heads", 32);
  // Absent: the class default 32; null: one KV head per query head.
  c.num_kv_heads = f.nullable_integer("num_key_value_heads", 32, c.num_heads, 1);
  c.head_dim = f.integer("head_dim", 128);
  c.max_position_embeddings = f.integer("max_position_embeddings", 32768);
  c.rms_norm_eps = f.number("rms_norm_eps", 1e-6);
  if (!(c.rms_norm_eps > 0.0 && c.rms_norm_eps < 1.0)) f.fail("rms_norm_eps", "must be in (0, 1)");
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  c.attention_bias = f.boolean("attention_bias", false);
  if (f.string("hidden_act", "silu") != "silu")
    f.fail("hidden_act", "'" + f.string("hidden_act", "") + "' is not supported (silu only)");
  if (c.num_heads % c.num_kv_heads != 0)
    f.fail("num_attention_heads", "(" + std::to_string(c.num_heads) + ") is not divisible by num_key_value_heads (" +
                                      std::to_string(c.num_kv_heads) + ")");
  if (c.head_dim % 2 != 0) f.fail("head_dim", "is odd (" + std::to_string(c.head_dim) + "); RoPE needs pairs");
  config::check_product_fits(f, "head_dim", c.num_heads, c.head_dim);
  c.rope_theta = parse_rope_theta(f, source, "full_attention");

  // Sliding layers: layer_types if given, else (use_sliding_window) the
  // layers from max_window_layers on.
  const bool use_sliding = f.boolean("use_sliding_window", false);
  const int window = f.nullable_integer("sliding_window", 4096, 0, 0);
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
  } else if (use_sliding) {
    const int from = f.integer("max_window_layers", 28, 0);
    for (int l = from; l < c.num_layers; ++l) c.sliding[std::size_t(l)] = true;
  }
  // transformers applies the window only when use_sliding_window is on and
  // sliding_window is set.
  if (!use_sliding || window == 0) c.sliding.assign(std::size_t(c.num_layers), false);
  bool any = false;
  for (bool s : c.sliding) any = any || s;
  if (any) {
    c.sliding_window = window;
    c.rope_theta_sliding = parse_rope_theta(f, source, "sliding_attention");
  }

  c.bos_token_id = [&] {
    const std::vector<int> v = config::token_ids(f, "bos_token_id", {}, c.vocab_size);
    if (v.size() > 1) f.fail("bos_token_id", "must be a single token id");
    return v.empty() ? -1 : v[0];
  }();
  c.eos_token_ids = config::token_ids(f, "eos_token_id", {}, c.vocab_size);
  return c;
}

Config load_config(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  return parse_config(config::read_text(path), path);
}

decoder::DecoderConfig decoder_config(const Config& c) {
  decoder::DecoderConfig d;
  d.info.architecture = c.model_type;
  d.info.max_position = c.max_position_embeddings;
  d.info.bos_token_id = c.bos_token_id;
  d.info.eos_token_ids = c.eos_token_ids;
  d.vocab_size = c.vocab_size;
  d.hidden_size = c.hidden_size;
  d.norm_eps = float(c.rms_norm_eps);
  d.norm_kind = NormKind::Plain;
  d.embed_scale = 1.0f;
  d.tie_word_embeddings = c.tie_word_embeddings;
  d.ropes = {decoder::default_rope(c.head_dim, c.rope_theta)};
  if (c.sliding_window > 0) d.ropes.push_back(decoder::default_rope(c.head_dim, c.rope_theta_sliding));
  for (int l = 0; l < c.num_layers; ++l) {
    decoder::LayerConfig dl;
    decoder::AttentionConfig& a = dl.attention;
    a.num_heads = c.num_heads;
    a.kv_heads = c.num_kv_heads;
    a.head_dim = c.head_dim;
    a.window = c.sliding[std::size_t(l)] ? c.sliding_window : 0;
    a.rope = c.sliding[std::size_t(l)] ? 1 : 0;
    a.kv_source = l;
    a.qk_norm = true;
    a.qkv_bias = c.attention_bias;
    a.o_bias = c.attention_bias;
    // transformers: scaling = head_dim ** -0.5, in Python double, applied in f32.
    a.scale = float(1.0 / std::sqrt(double(c.head_dim)));
    dl.ffn.kind = decoder::FfnKind::Dense;
    dl.ffn.activation = Activation::Silu;
    dl.ffn.intermediate = c.intermediate_size;
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
  if (!c.tie_word_embeddings) w.lm_head = b.first_matrix_of({"lm_head.weight"}, {V, H});
  w.layers.resize(std::size_t(c.num_layers));
  for (int l = 0; l < c.num_layers; ++l) {
    decoder::LayerWeights& lw = w.layers[std::size_t(l)];
    const std::string p = "layers." + std::to_string(l) + ".";
    lw.attn_norm = b.vector(p + "input_layernorm.weight", H);
    lw.ffn_norm = b.vector(p + "post_attention_layernorm.weight", H);  // Llama naming: the MLP's input norm
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
  s << "Qwen 3 decoder: " << c.num_layers << " layers";
  if (sliding) s << " (" << sliding << " sliding, window " << c.sliding_window << ")";
  s << ", hidden " << c.hidden_size << ", " << c.num_heads << " query heads / " << c.num_kv_heads
    << " KV heads of " << c.head_dim << ", MLP " << c.intermediate_size << ", vocab " << c.vocab_size
    << ", RoPE theta " << c.rope_theta << (c.tie_word_embeddings ? ", tied head" : ", untied head");
  if (c.attention_bias) s << ", attention biases";
  return s.str();
}

}  // namespace

decoder::DecoderWeights load_weights(const std::string& model_dir, const Config& c) {
  const Checkpoint ck = Checkpoint::open(model_dir);
  const std::string prefix = detect_text_prefix(ck);
  decoder::check_layer_count(ck, prefix, c.num_layers);
  decoder::DecoderWeights w;
  w.storage = ck.storage();
  decoder::CheckpointSource b(ck, prefix, w, c.quantization);
  bind_all(b, c, w);
  return w;
}

decoder::DecoderWeights load_gguf_weights(const gguf::File& file, const Config& c) {
  decoder::DecoderWeights w;
  w.storage = file.owner();
  decoder::GgufSource b(file, "qwen3", w);
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
                                  std::string directory) {
  decoder::DecoderConfig d = decoder_config(config);
  d.info.directory = std::move(directory);
  return decoder::make_decoder_model(std::move(d), std::move(weights), backend, summary(config));
}

std::unique_ptr<Model> load(const std::string& dir, Backend& backend) {
  Config config = load_config(dir);
  decoder::DecoderWeights weights = load_weights(dir, config);
  return make_model(config, std::move(weights), backend, dir);
}

}  // namespace rowlm::qwen3
