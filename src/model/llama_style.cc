#include "model/llama_style.h"

#include <array>
#include <cmath>
#include <optional>
#include <sstream>

#include "core/error.h"
#include "io/checkpoint.h"
#include "model/config_fields.h"
#include "model/gguf_source.h"
#include "model/weight_binder.h"

namespace rowlm::llama_style {
namespace {

using config::Fields;
using config::json;

// Where a family's sliding-window layers come from.
enum class WindowRule {
  None,             // llama: no window
  QwenLayers,       // qwen2, qwen3: with use_sliding_window, layer_types or the layers from max_window_layers on
  EveryLayer,       // mistral: every layer, unless sliding_window is null
  EveryLayerOptIn,  // qwen3_moe: every layer, with use_sliding_window
};

enum class BiasRule {
  None,           // mistral
  QkvAlways,      // qwen2: q/k/v biases, none on o
  AttentionBias,  // attention_bias: q/k/v/o
};

// One model_type: its transformers 5.17 config class's defaults and the
// features its modeling file has.
struct Variant {
  const char* model_type;
  const char* family;
  int vocab, hidden, intermediate, layers, heads;
  std::optional<int> kv_heads;    // absent from config.json (nullopt: one per query head)
  std::optional<int> head_dim;    // absent (nullopt: hidden / heads; null always means hidden / heads)
  int max_position;
  std::optional<int> bos, eos;
  bool qk_norm;
  BiasRule bias;
  WindowRule window;
  bool moe;
};

constexpr std::array<Variant, 5> kVariants = {{
    // LlamaConfig
    {"llama", "Llama", 32000, 4096, 11008, 32, 32, std::nullopt, std::nullopt, 2048, 1, 2, false,
     BiasRule::AttentionBias, WindowRule::None, false},
    // MistralConfig
    {"mistral", "Mistral", 32000, 4096, 14336, 32, 32, 8, std::nullopt, 131072, 1, 2, false, BiasRule::None,
     WindowRule::EveryLayer, false},
    // Qwen2Config
    {"qwen2", "Qwen 2", 151936, 4096, 22016, 32, 32, 32, std::nullopt, 32768, std::nullopt, std::nullopt, false,
     BiasRule::QkvAlways, WindowRule::QwenLayers, false},
    // Qwen3Config
    {"qwen3", "Qwen 3", 151936, 4096, 22016, 32, 32, 32, 128, 32768, std::nullopt, std::nullopt, true,
     BiasRule::AttentionBias, WindowRule::QwenLayers, false},
    // Qwen3MoeConfig
    {"qwen3_moe", "Qwen 3 MoE", 151936, 2048, 6144, 24, 32, 4, std::nullopt, 32768, std::nullopt, std::nullopt, true,
     BiasRule::AttentionBias, WindowRule::EveryLayerOptIn, true},
}};

const Variant* find_variant(const std::string& model_type) {
  for (const Variant& v : kVariants)
    if (model_type == v.model_type) return &v;
  return nullptr;
}

// The RoPE of one layer type: rope_parameters as transformers 5 writes it
// (flat, or keyed by layer type), or the older top-level rope_theta with
// rope_scaling (null, or the scaling entry).
rope::RopeSpec parse_rope(const Fields& f, const std::string& source, const char* layer_type, int max_position,
                          const std::string& family) {
  std::string key = "rope_parameters";
  const json* rp = f.find(key);
  const json* legacy = f.find("rope_scaling");
  // transformers takes rope_scaling over rope_parameters; rowlm wants one
  // answer, so both set and different is an error.
  if (rp && !rp->is_null() && legacy && !legacy->is_null() && *rp != *legacy)
    f.fail("rope_scaling", "contradicts rope_parameters (give one)");
  if (!rp || rp->is_null()) rp = f.find(key = "rope_scaling");
  const double theta = f.number("rope_theta", 10000.0);
  if (!rp || rp->is_null()) {
    const json empty = json::object();
    return rope::parse_entry(Fields(empty, "", source), theta, max_position, family);
  }
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
  // A pretraining context written beside the scaling entry must agree with it.
  rope::RopeSpec spec = rope::parse_entry(r, theta, f.integer("original_max_position_embeddings", max_position), family);
  if (spec.type == rope::RopeType::Llama3 && f.has("original_max_position_embeddings") &&
      r.has("original_max_position_embeddings") &&
      f.integer("original_max_position_embeddings") != r.integer("original_max_position_embeddings"))
    f.fail("original_max_position_embeddings", "contradicts " + r.path("original_max_position_embeddings"));
  return spec;
}

std::vector<bool> parse_layer_types(const Fields& f, int num_layers) {
  std::vector<bool> sliding(std::size_t(num_layers), false);
  const json* types = f.find("layer_types");
  if (!types->is_array() || types->size() != std::size_t(num_layers))
    f.fail("layer_types", "must list one type per layer (" + std::to_string(num_layers) + ")");
  for (int l = 0; l < num_layers; ++l) {
    const json& t = (*types)[std::size_t(l)];
    if (t == "sliding_attention") sliding[std::size_t(l)] = true;
    else if (t != "full_attention")
      f.fail("layer_types[" + std::to_string(l) + "]", "must be \"sliding_attention\" or \"full_attention\" (got " +
                                                          t.dump() + ")");
  }
  return sliding;
}

// Sliding layers and their window, as each family's config class and
// modeling file resolve them.
void parse_window(const Fields& f, const Variant& v, Config& c) {
  const int L = c.num_layers;
  c.sliding.assign(std::size_t(L), false);
  if (v.window == WindowRule::None) return;
  const int window = f.nullable_integer("sliding_window", 4096, 0, 0);  // null or 0: no window
  const bool has_types = f.has_value("layer_types");
  switch (v.window) {
    case WindowRule::None:
      break;
    case WindowRule::QwenLayers: {
      // transformers applies the window only when use_sliding_window is on
      // and sliding_window is set (Qwen3Config.__post_init__ drops it otherwise).
      const bool use = f.boolean("use_sliding_window", false);
      std::vector<bool> s(std::size_t(L), false);
      if (has_types) {
        s = parse_layer_types(f, L);
      } else if (use) {
        const int from = f.integer("max_window_layers", 28, 0);
        for (int l = from; l < L; ++l) s[std::size_t(l)] = true;
      }
      if (use && window > 0) c.sliding = s;
      break;
    }
    case WindowRule::EveryLayer:
    case WindowRule::EveryLayerOptIn: {
      const bool use = v.window == WindowRule::EveryLayer || f.boolean("use_sliding_window", false);
      if (use && window > 0) c.sliding.assign(std::size_t(L), true);
      // transformers ignores layer_types here (MistralConfig warns of it: a
      // Ministral-style alternating model); a list that disagrees with the
      // window would run another model than its authors meant.
      if (has_types && parse_layer_types(f, L) != c.sliding)
        f.fail("layer_types", std::string("contradicts ") +
                                  (window > 0 && use ? "sliding_window: every layer slides"
                                                     : "sliding_window: no layer slides") +
                                  " (" + v.model_type + " applies the window to all layers or none)");
      break;
    }
  }
  if (window > 0) c.sliding_window = window;
  bool any = false;
  for (bool s : c.sliding) any = any || s;
  if (!any) c.sliding_window = 0;
}

void parse_experts(const Fields& f, Config& c) {
  // transformers 5 serialises num_experts through its attribute map as
  // num_local_experts; Hub configs say num_experts.
  const bool local = f.has("num_local_experts"), named = f.has("num_experts");
  c.num_experts = named ? f.integer("num_experts", 128, 0) : f.integer("num_local_experts", 128, 0);
  if (local && named && f.integer("num_local_experts", 0, 0) != c.num_experts)
    f.fail("num_local_experts", "contradicts num_experts");
  c.experts_per_token = f.integer("num_experts_per_tok", 8);
  c.moe_intermediate_size = f.integer("moe_intermediate_size", 768);
  c.norm_topk_prob = f.boolean("norm_topk_prob", false);
  const int step = f.integer("decoder_sparse_step", 1);
  std::vector<bool> dense_only(std::size_t(c.num_layers), false);
  if (const json* only = f.find("mlp_only_layers"); only && !only->is_null()) {
    if (!only->is_array()) f.fail("mlp_only_layers", "must be a list of layer indices");
    for (std::size_t i = 0; i < only->size(); ++i) {
      const std::string item = "mlp_only_layers[" + std::to_string(i) + "]";
      const int l = f.to_int(item, (*only)[i], 0);
      if (l >= c.num_layers)
        f.fail(item, "is layer " + std::to_string(l) + ", past num_hidden_layers (" + std::to_string(c.num_layers) + ")");
      dense_only[std::size_t(l)] = true;
    }
  }
  c.sparse.assign(std::size_t(c.num_layers), false);
  for (int l = 0; l < c.num_layers; ++l)
    c.sparse[std::size_t(l)] = !dense_only[std::size_t(l)] && c.num_experts > 0 && (l + 1) % step == 0;
  bool any = false;
  for (bool s : c.sparse) any = any || s;
  if (any && c.experts_per_token > c.num_experts)
    f.fail("num_experts_per_tok", "(" + std::to_string(c.experts_per_token) + ") exceeds num_experts (" +
                                      std::to_string(c.num_experts) + ")");
  if (!any) c.num_experts = c.experts_per_token = c.moe_intermediate_size = 0;
}

}  // namespace

Config parse_config(const std::string& json_text, const std::string& source) {
  const json top = config::parse_object(json_text, source);
  const Fields f(top, "", source);
  Config c;
  c.quantization = decoder::QuantizationConfig::parse(top, source);
  c.model_type = f.string("model_type", "");
  const Variant* variant = find_variant(c.model_type);
  if (!variant) {
    std::string list;
    for (const Variant& v : kVariants) list += (list.empty() ? "" : ", ") + std::string(v.model_type);
    f.fail("model_type", "'" + c.model_type + "' is not a Llama-style model (" + list + ")");
  }
  const Variant& v = *variant;
  c.family = v.family;

  c.vocab_size = f.integer("vocab_size", v.vocab);
  c.hidden_size = f.integer("hidden_size", v.hidden);
  c.intermediate_size = f.integer("intermediate_size", v.intermediate);
  c.num_layers = f.integer("num_hidden_layers", v.layers);
  c.num_heads = f.integer("num_attention_heads", v.heads);
  // Absent: the class default; null: one KV head per query head.
  c.num_kv_heads = f.nullable_integer("num_key_value_heads", v.kv_heads.value_or(c.num_heads), c.num_heads, 1);
  // head_dim: its own field where the family reads one; null or absent
  // without a class default, hidden / heads (`getattr(config, "head_dim", None) or ...`).
  if (f.has_value("head_dim")) {
    c.head_dim = f.integer("head_dim");
  } else if (v.head_dim && !f.has("head_dim")) {
    c.head_dim = *v.head_dim;
  } else {
    if (c.hidden_size % c.num_heads != 0)
      f.fail("hidden_size", "(" + std::to_string(c.hidden_size) + ") is not divisible by num_attention_heads (" +
                                std::to_string(c.num_heads) + ") and head_dim is not given");
    c.head_dim = c.hidden_size / c.num_heads;
  }
  c.max_position_embeddings = f.integer("max_position_embeddings", v.max_position);
  c.rms_norm_eps = f.number("rms_norm_eps", 1e-6);
  if (!(c.rms_norm_eps > 0.0 && c.rms_norm_eps < 1.0)) f.fail("rms_norm_eps", "must be in (0, 1)");
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  c.qk_norm = v.qk_norm;
  const bool attention_bias = f.boolean("attention_bias", false);
  c.qkv_bias = v.bias == BiasRule::QkvAlways || (v.bias == BiasRule::AttentionBias && attention_bias);
  c.o_bias = v.bias == BiasRule::AttentionBias && attention_bias;
  if (f.string("hidden_act", "silu") != "silu")
    f.fail("hidden_act", "'" + f.string("hidden_act", "") + "' is not supported (silu only)");
  if (f.boolean("mlp_bias", false)) f.fail("mlp_bias", "is not supported (MLP projections without biases only)");
  if (c.num_heads % c.num_kv_heads != 0)
    f.fail("num_attention_heads", "(" + std::to_string(c.num_heads) + ") is not divisible by num_key_value_heads (" +
                                      std::to_string(c.num_kv_heads) + ")");
  if (c.head_dim % 2 != 0) f.fail("head_dim", "is odd (" + std::to_string(c.head_dim) + "); RoPE needs pairs");
  config::check_product_fits(f, "head_dim", c.num_heads, c.head_dim);
  if (f.has_value("partial_rotary_factor") && f.number("partial_rotary_factor", 1.0) != 1.0)
    f.fail("partial_rotary_factor", "is not supported for " + c.family + " (RoPE over the whole head only)");
  c.rope = parse_rope(f, source, "full_attention", c.max_position_embeddings, c.family);

  parse_window(f, v, c);
  if (c.sliding_window > 0) c.rope_sliding = parse_rope(f, source, "sliding_attention", c.max_position_embeddings, c.family);
  if (v.moe) parse_experts(f, c);
  else c.sparse.assign(std::size_t(c.num_layers), false);

  c.bos_token_id = [&] {
    const std::vector<int> ids =
        config::token_ids(f, "bos_token_id", v.bos ? std::vector<int>{*v.bos} : std::vector<int>{}, c.vocab_size);
    if (ids.size() > 1) f.fail("bos_token_id", "must be a single token id");
    return ids.empty() ? -1 : ids[0];
  }();
  c.eos_token_ids =
      config::token_ids(f, "eos_token_id", v.eos ? std::vector<int>{*v.eos} : std::vector<int>{}, c.vocab_size);
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
  d.ropes = {rope::frequencies(c.rope, c.head_dim)};
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
    a.qk_norm = c.qk_norm;
    a.qkv_bias = c.qkv_bias;
    a.o_bias = c.o_bias;
    // transformers: scaling = head_dim ** -0.5, in Python double, applied in f32.
    a.scale = float(1.0 / std::sqrt(double(c.head_dim)));
    dl.ffn.activation = Activation::Silu;
    if (c.sparse[std::size_t(l)]) {
      dl.ffn.kind = decoder::FfnKind::Experts;
      dl.ffn.experts = c.num_experts;
      dl.ffn.top_k = c.experts_per_token;
      dl.ffn.expert_intermediate = c.moe_intermediate_size;
      dl.ffn.renormalize = c.norm_topk_prob;
    } else {
      dl.ffn.kind = decoder::FfnKind::Dense;
      dl.ffn.intermediate = c.intermediate_size;
    }
    d.layers.push_back(dl);
  }
  return d;
}

namespace {

// A sparse layer's experts, in any of the layouts checkpoints use:
// one module per expert (Hub checkpoints: experts.{e}.gate_proj.weight ...),
// transformers 5's stacks (experts.gate_up_proj [E, 2·I, H], gate rows
// first; experts.down_proj [E, H, I]) or MLX's (switch_mlp.*_proj.weight
// [E, I, H] / [E, H, I]).
template <class Source>
void bind_experts(Source& b, const std::string& p, const Config& c, decoder::LayerWeights& lw) {
  const int64_t E = c.num_experts, I = c.moe_intermediate_size, H = c.hidden_size;
  const std::string& pre = b.prefix();
  ExpertBank& bank = lw.experts;
  if (b.has(p + "experts.0.gate_proj.weight")) {
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = p + "experts." + std::to_string(e) + ".";
      bank.gate.push_back(b.matrix(x + "gate_proj.weight", {I, H}));
      bank.up.push_back(b.matrix(x + "up_proj.weight", {I, H}));
      bank.down.push_back(b.matrix(x + "down_proj.weight", {H, I}));
    }
    return;
  }
  if (b.has(p + "switch_mlp.gate_proj.weight")) {
    const Weight gate = b.matrix(p + "switch_mlp.gate_proj.weight", {E, I, H});
    const Weight up = b.matrix(p + "switch_mlp.up_proj.weight", {E, I, H});
    const Weight down = b.matrix(p + "switch_mlp.down_proj.weight", {E, H, I});
    bank = decoder::experts_from_stacks(gate, up, down, E);
    return;
  }
  // The per-expert name is listed so that a checkpoint with no layout gets
  // an error naming the forms tried.
  const Weight gate_up =
      b.first_matrix_of({pre + p + "experts.gate_up_proj", pre + p + "experts.0.gate_proj.weight"}, {E, 2 * I, H});
  const Weight down = b.first_matrix_of({pre + p + "experts.down_proj"}, {E, H, I});
  bank = decoder::experts_from_gate_up_stack(gate_up, down, E);
}

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
    if (c.qk_norm) {
      lw.q_norm = b.vector(p + "self_attn.q_norm.weight", hd);
      lw.k_norm = b.vector(p + "self_attn.k_norm.weight", hd);
    }
    if (c.qkv_bias) {
      lw.q_bias = b.vector(p + "self_attn.q_proj.bias", q);
      lw.k_bias = b.vector(p + "self_attn.k_proj.bias", kv);
      lw.v_bias = b.vector(p + "self_attn.v_proj.bias", kv);
    }
    if (c.o_bias) lw.o_bias = b.vector(p + "self_attn.o_proj.bias", H);
    if (c.sparse[std::size_t(l)]) {
      lw.router = b.matrix(p + "mlp.gate.weight", {c.num_experts, H});
      bind_experts(b, p + "mlp.", c, lw);
    } else {
      lw.gate_proj = b.matrix(p + "mlp.gate_proj.weight", {I, H});
      lw.up_proj = b.matrix(p + "mlp.up_proj.weight", {I, H});
      lw.down_proj = b.matrix(p + "mlp.down_proj.weight", {H, I});
    }
  }
}

std::string summary(const Config& c) {
  std::ostringstream s;
  int sliding = 0, sparse = 0;
  for (bool x : c.sliding) sliding += x;
  for (bool x : c.sparse) sparse += x;
  s << c.family << " decoder: " << c.num_layers << " layers";
  if (sliding) s << " (" << sliding << " sliding, window " << c.sliding_window << ")";
  s << ", hidden " << c.hidden_size << ", " << c.num_heads << " query heads / " << c.num_kv_heads
    << " KV heads of " << c.head_dim << ", MLP " << c.intermediate_size;
  if (sparse)
    s << ", " << sparse << " MoE layers (" << c.num_experts << " experts of " << c.moe_intermediate_size << ", top "
      << c.experts_per_token << (c.norm_topk_prob ? ", renormalised" : "") << ")";
  s << ", vocab " << c.vocab_size << ", RoPE " << rope::describe(c.rope)
    << (c.tie_word_embeddings ? ", tied head" : ", untied head");
  if (c.qk_norm) s << ", q/k norms";
  if (c.qkv_bias) s << (c.o_bias ? ", q/k/v/o biases" : ", q/k/v biases");
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
  // The file's architecture names its tensors (gguf_names.h); a Mistral
  // checkpoint converts to llama.
  const std::string arch = file.get_string("general.architecture");
  decoder::DecoderWeights w;
  w.storage = file.owner();
  decoder::GgufSource b(file, arch, w, {c.num_heads, c.num_kv_heads, c.head_dim});
  bind_all(b, c, w);
  // rope_freqs holds llama3's factors, read into the config (gguf_config.h).
  b.check_all_used({"rope_freqs.weight"});
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
  decoder::DecoderConfig d = decoder_config(config);
  d.info.directory = std::move(directory);
  return decoder::make_decoder_model(std::move(d), std::move(weights), backend, summary(config), options);
}

std::unique_ptr<Model> load(const std::string& dir, Backend& backend, const ModelOptions& options) {
  Config config = load_config(dir);
  decoder::DecoderWeights weights = load_weights(dir, config);
  return make_model(config, std::move(weights), backend, dir, options);
}

}  // namespace rowlm::llama_style
