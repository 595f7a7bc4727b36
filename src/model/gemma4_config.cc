#include "model/gemma4_config.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config_fields.h"

namespace rowlm::gemma4 {
namespace {

using json = nlohmann::json;
using config::check_product_fits;
using config::Fields;
using config::token_ids;

const char* type_name(LayerType t) { return t == LayerType::Full ? "full_attention" : "sliding_attention"; }

RopeParams parse_rope(const Fields& text, const json* rope, LayerType type, const std::string& source) {
  RopeParams p;
  const std::string key = type_name(type);
  if (!rope || rope->is_null()) {  // transformers' defaults
    if (type == LayerType::Full) {
      p.type = RopeType::Proportional;
      p.theta = 1e6;
      p.partial_rotary_factor = 0.25;
    }
    return p;
  }
  const auto entry = rope->find(key);
  if (entry == rope->end()) text.fail("rope_parameters", "has no entry for " + key + " layers");
  if (!entry->is_object()) text.fail("rope_parameters." + key, "must be an object (got " + entry->dump() + ")");
  const Fields f(*entry, text.path("rope_parameters." + key + "."), source);
  const std::string rope_type = f.string("rope_type", "");
  if (rope_type.empty()) f.fail("rope_type", "is required");
  if (!f.has("rope_theta")) f.fail("rope_theta", "is required");
  p.theta = f.number("rope_theta", 0);
  if (!(p.theta > 1.0)) f.fail("rope_theta", "must be greater than 1");
  if (rope_type == "default") {
    // transformers' Gemma 4 default RoPE rotates every pair with plain
    // frequencies and reads neither factor nor partial_rotary_factor.
    p.type = RopeType::Default;
  } else if (rope_type == "proportional") {
    p.type = RopeType::Proportional;
    p.partial_rotary_factor = f.number("partial_rotary_factor", 1.0);
    if (!(p.partial_rotary_factor > 0.0 && p.partial_rotary_factor <= 1.0)) {
      f.fail("partial_rotary_factor", "must be in (0, 1]");
    }
    p.factor = f.number("factor", 1.0);
    if (!(p.factor > 0.0)) f.fail("factor", "must be positive");
  } else {
    f.fail("rope_type", "'" + rope_type + "' is not supported (expected default or proportional)");
  }
  return p;
}

std::vector<LayerType> parse_layer_types(const Fields& f, int num_layers) {
  std::vector<LayerType> types(num_layers);
  const json* v = f.find("layer_types");
  if (!v || v->is_null()) {
    // transformers' default: every sixth layer is full.
    for (int i = 0; i < num_layers; ++i) types[i] = (i + 1) % 6 == 0 ? LayerType::Full : LayerType::Sliding;
  } else {
    if (!v->is_array()) f.fail("layer_types", "must be a list");
    if (v->size() != std::size_t(num_layers)) {
      f.fail("layer_types", "has " + std::to_string(v->size()) + " entries but num_hidden_layers is " +
                                std::to_string(num_layers));
    }
    for (int i = 0; i < num_layers; ++i) {
      const json& t = (*v)[i];
      const std::string item = "layer_types[" + std::to_string(i) + "]";
      if (t == "sliding_attention") types[i] = LayerType::Sliding;
      else if (t == "full_attention") types[i] = LayerType::Full;
      else f.fail(item, "must be \"sliding_attention\" or \"full_attention\" (got " + t.dump() + ")");
    }
  }
  // transformers forces the last layer to full attention.
  types.back() = LayerType::Full;
  return types;
}

struct Geometry {
  int head_dim = 0;
  int kv_heads = 0;
};

// Per-layer attention geometry, from either serialisation:
//  - per_layer_config {"<idx>": {head_dim, num_key_value_heads}}: literal
//    per-layer overrides of the global head_dim / num_key_value_heads
//    (transformers >= 5.15; global_head_dim and num_global_key_value_heads
//    are then ignored, as transformers ignores them);
//  - global_head_dim (default 512) for full layers, and
//    num_global_key_value_heads for full layers only when attention_k_eq_v.
std::vector<Geometry> resolve_geometry(const Fields& f, const Config& c, const std::string& source) {
  std::vector<Geometry> g(c.num_layers, Geometry{c.head_dim, c.num_kv_heads});
  const json* plc = f.find("per_layer_config");
  if (plc && !plc->is_null()) {
    if (!plc->is_object()) f.fail("per_layer_config", "must be an object keyed by layer index");
    for (const auto& [key, override_] : plc->items()) {
      int layer = -1;
      const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), layer);
      if (ec != std::errc() || end != key.data() + key.size() || key.empty() || layer < 0) {
        f.fail("per_layer_config", "has key '" + key + "', which is not a layer index");
      }
      if (layer >= c.num_layers) {
        f.fail("per_layer_config", "names layer " + key + " but num_hidden_layers is " + std::to_string(c.num_layers));
      }
      if (!override_.is_object()) f.fail("per_layer_config." + key, "must be an object");
      const Fields o(override_, f.path("per_layer_config." + key + "."), source);
      for (const auto& [attr, value] : override_.items()) {
        if (attr != "head_dim" && attr != "num_key_value_heads") {
          o.fail(attr, "is a per-layer override rowlm does not support (only head_dim and num_key_value_heads)");
        }
      }
      g[layer].head_dim = o.integer("head_dim", g[layer].head_dim);
      g[layer].kv_heads = o.integer("num_key_value_heads", g[layer].kv_heads);
    }
    return g;
  }
  const int global_head_dim = f.integer("global_head_dim", 512);
  const int global_kv = f.nullable_integer("num_global_key_value_heads", 0, 0, 1);
  for (int l = 0; l < c.num_layers; ++l) {
    if (c.layer_types[l] != LayerType::Full) continue;
    g[l].head_dim = global_head_dim;
    if (c.attention_k_eq_v && global_kv > 0) g[l].kv_heads = global_kv;
  }
  return g;
}


}  // namespace

Config parse_config(const std::string& json_text, const std::string& source) {
  const json top = config::parse_object(json_text, source);
  const Fields outer(top, "", source);

  Config c;
  c.quantization = decoder::QuantizationConfig::parse(top, source);
  if (!outer.has("model_type")) outer.fail("model_type", "is required");
  c.model_type = outer.string("model_type", "");
  const bool unified = c.model_type == "gemma4_unified";
  const bool assistant = c.model_type == "gemma4_assistant";
  const bool wrapped = c.model_type == "gemma4" || unified || assistant;
  if (!wrapped && c.model_type != "gemma4_text")
    outer.fail("model_type", "'" + c.model_type +
                                 "' is not supported (expected gemma4_text, gemma4, gemma4_unified or gemma4_assistant)");
  const config::TextSection text = config::text_section(top, outer, wrapped, c.model_type);
  if (wrapped) {
    const Fields nested(*text.object, text.prefix, source);
    const std::string inner = nested.string("model_type", unified ? "gemma4_unified_text" : "gemma4_text");
    if (inner != "gemma4_text" && inner != "gemma4_unified_text") {
      nested.fail("model_type", "'" + inner + "' is not a Gemma 4 text model");
    }
  }
  if (assistant) {
    AssistantFields a;
    a.backbone_hidden_size = outer.integer("backbone_hidden_size", a.backbone_hidden_size, 1);
    a.use_ordered_embeddings = outer.boolean("use_ordered_embeddings", false);
    if (a.use_ordered_embeddings) {
      a.num_centroids = outer.integer("num_centroids", a.num_centroids, 1);
      a.centroid_intermediate_top_k = outer.integer("centroid_intermediate_top_k", a.centroid_intermediate_top_k, 1);
      if (a.centroid_intermediate_top_k > a.num_centroids)
        outer.fail("centroid_intermediate_top_k", "(" + std::to_string(a.centroid_intermediate_top_k) +
                                                      ") exceeds num_centroids (" + std::to_string(a.num_centroids) + ")");
    }
    c.assistant = a;
  }
  const Fields f(*text.object, text.prefix, source);

  // Defaults are transformers 5.17's Gemma4TextConfig / Gemma4UnifiedTextConfig.
  c.vocab_size = f.integer("vocab_size");
  c.hidden_size = f.integer("hidden_size");
  c.intermediate_size = f.integer("intermediate_size");
  c.num_layers = f.integer("num_hidden_layers");
  c.num_heads = f.integer("num_attention_heads");
  c.num_kv_heads = f.integer("num_key_value_heads");
  c.head_dim = f.integer("head_dim");
  c.sliding_window = f.integer("sliding_window", unified ? 1024 : 512);
  c.max_position_embeddings = f.integer("max_position_embeddings", unified ? 262144 : 131072);
  c.rms_norm_eps = f.number("rms_norm_eps", 1e-6);
  if (!(c.rms_norm_eps > 0.0 && c.rms_norm_eps < 1.0)) f.fail("rms_norm_eps", "must be in (0, 1)");
  if (f.has_value("final_logit_softcapping")) {
    c.final_logit_softcapping = f.number("final_logit_softcapping", 0.0);
    if (!(c.final_logit_softcapping >= 0.0)) f.fail("final_logit_softcapping", "must be non-negative or null");
  }
  c.attention_k_eq_v = f.boolean("attention_k_eq_v", false);
  c.num_kv_shared_layers = f.integer("num_kv_shared_layers", 0, 0);
  // transformers' Gemma4AssistantConfig makes every layer shared when unset.
  if (assistant && c.num_kv_shared_layers == 0) c.num_kv_shared_layers = c.num_layers;
  c.use_double_wide_mlp = f.boolean("use_double_wide_mlp", false);
  // Tied embeddings may be declared on the text config or the outer one.
  c.tie_word_embeddings =
      f.has("tie_word_embeddings") ? f.boolean("tie_word_embeddings", true) : outer.boolean("tie_word_embeddings", true);

  if (f.string("hidden_activation", "gelu_pytorch_tanh") != "gelu_pytorch_tanh") {
    f.fail("hidden_activation", "'" + f.string("hidden_activation", "") + "' is not supported (gelu_pytorch_tanh only)");
  }
  if (f.boolean("attention_bias", false)) f.fail("attention_bias", "true is not supported (Gemma 4 has no biases)");
  if (f.has_value("use_bidirectional_attention") &&
      f.string("use_bidirectional_attention", "") == "all") {
    f.fail("use_bidirectional_attention", "\"all\" (a non-causal model) is not supported");
  }

  if (!unified) {  // the unified text model has neither per-layer embeddings nor MoE
    c.hidden_size_per_layer_input = f.nullable_integer("hidden_size_per_layer_input", 256, 0, 0);
    if (assistant && c.hidden_size_per_layer_input != 0) f.fail("hidden_size_per_layer_input", "must be 0 in an assistant");
    if (c.hidden_size_per_layer_input > 0) c.vocab_size_per_layer_input = f.integer("vocab_size_per_layer_input", 262144);
    c.enable_moe_block = f.boolean("enable_moe_block", false);
    if (c.enable_moe_block) {
      c.num_experts = f.integer("num_experts");
      c.top_k_experts = f.integer("top_k_experts");
      c.moe_intermediate_size = f.integer("moe_intermediate_size");
      if (c.top_k_experts > c.num_experts) {
        f.fail("top_k_experts", "(" + std::to_string(c.top_k_experts) + ") exceeds num_experts (" +
                                    std::to_string(c.num_experts) + ")");
      }
    }
  }

  // Special tokens: the text config's, else the outer config's.
  auto ids = [&](const std::string& key, std::vector<int> fallback) {
    return f.has(key) ? token_ids(f, key, fallback, c.vocab_size) : token_ids(outer, key, fallback, c.vocab_size);
  };
  const auto single_id = [&](const std::string& key, int fallback) {
    const std::vector<int> v = ids(key, {fallback});
    if (v.size() > 1) (f.has(key) ? f : outer).fail(key, "must be a single token id");
    return v.empty() ? -1 : v[0];
  };
  c.bos_token_id = single_id("bos_token_id", 2);
  c.pad_token_id = single_id("pad_token_id", 0);
  c.eos_token_ids = ids("eos_token_id", {1});

  c.layer_types = parse_layer_types(f, c.num_layers);
  const json* rope = f.find("rope_parameters");
  if (rope && !rope->is_null() && !rope->is_object()) f.fail("rope_parameters", "must be an object keyed by layer type");
  const bool any_sliding = std::count(c.layer_types.begin(), c.layer_types.end(), LayerType::Sliding) > 0;
  if (any_sliding) c.rope_sliding = parse_rope(f, rope, LayerType::Sliding, source);
  c.rope_full = parse_rope(f, rope, LayerType::Full, source);

  if (assistant) {  // Gemma4AssistantConfig.validate_architecture
    if (c.enable_moe_block) f.fail("enable_moe_block", "must be false in an assistant");
    if (c.use_double_wide_mlp) f.fail("use_double_wide_mlp", "must be false in an assistant");
    if (c.num_kv_shared_layers != c.num_layers)
      f.fail("num_kv_shared_layers", "(" + std::to_string(c.num_kv_shared_layers) +
                                         ") must be num_hidden_layers in an assistant: every layer reads the target's KV");
    if (c.assistant->use_ordered_embeddings && c.vocab_size % c.assistant->num_centroids != 0)
      outer.fail("num_centroids", "(" + std::to_string(c.assistant->num_centroids) + ") does not divide vocab_size (" +
                                      std::to_string(c.vocab_size) + ")");
  }
  // KV sharing: the last num_kv_shared_layers layers read the K/V of the
  // last earlier layer of their own type (an assistant's: the target's).
  if (c.num_kv_shared_layers >= c.num_layers && !assistant) {
    f.fail("num_kv_shared_layers", "(" + std::to_string(c.num_kv_shared_layers) + ") must be below num_hidden_layers (" +
                                       std::to_string(c.num_layers) + ")");
  }
  const int first_shared = c.first_kv_shared_layer();
  const std::vector<Geometry> geometry = resolve_geometry(f, c, source);

  check_product_fits(f, "intermediate_size", c.intermediate_size, 2);
  check_product_fits(f, "moe_intermediate_size", c.moe_intermediate_size, 2);
  check_product_fits(f, "hidden_size_per_layer_input", c.hidden_size_per_layer_input, c.num_layers);
  c.layers.resize(c.num_layers);
  for (int l = 0; l < c.num_layers; ++l) {
    LayerConfig& L = c.layers[l];
    L.index = l;
    L.type = c.layer_types[l];
    const bool full = L.type == LayerType::Full;
    L.head_dim = geometry[l].head_dim;
    L.kv_heads = geometry[l].kv_heads;
    L.k_eq_v = full && c.attention_k_eq_v;
    L.window = full ? 0 : c.sliding_window;
    const std::string where = "layer " + std::to_string(l) + " (" + type_name(L.type) + ")";
    if (c.num_heads % L.kv_heads != 0) {
      f.fail("num_attention_heads", "(" + std::to_string(c.num_heads) + ") is not divisible by the " +
                                        std::to_string(L.kv_heads) + " KV heads of " + where);
    }
    check_product_fits(f, "head_dim", c.num_heads, L.head_dim);
    if (L.head_dim % 2 != 0) f.fail("head_dim", "of " + where + " is odd (" + std::to_string(L.head_dim) + "); RoPE needs pairs");
    const bool shared = l >= first_shared && c.num_kv_shared_layers > 0;
    L.kv_source = assistant ? -1 : l;
    if (shared && !assistant) {
      L.kv_source = -1;
      for (int j = first_shared - 1; j >= 0; --j) {
        if (c.layer_types[j] == L.type) {
          L.kv_source = j;
          break;
        }
      }
      if (L.kv_source < 0) {
        f.fail("num_kv_shared_layers", "makes " + where + " share K/V, but no earlier " + type_name(L.type) +
                                           " layer exists before the shared region (layers " + std::to_string(first_shared) +
                                           "..)");
      }
      const LayerConfig& donor = c.layers[L.kv_source];
      if (donor.head_dim != L.head_dim || donor.kv_heads != L.kv_heads) {
        f.fail("per_layer_config", where + " shares K/V with layer " + std::to_string(donor.index) +
                                       " but their head_dim / KV heads differ");
      }
    }
    L.intermediate = c.intermediate_size * (shared && c.use_double_wide_mlp && !assistant ? 2 : 1);
  }

  // Summary fields for the full layers (all full layers agree in released
  // models; layers[] is what the forward reads).
  for (const LayerConfig& L : c.layers) {
    if (L.type != LayerType::Full) continue;
    c.global_head_dim = L.head_dim;
    c.num_global_kv_heads = L.kv_heads;
    break;
  }
  return c;
}

Config load_config(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  return parse_config(config::read_text(path), path);
}

}  // namespace rowlm::gemma4
