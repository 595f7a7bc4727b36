#include "model/gguf_model.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/gguf_affine.h"
#include "model/gemma4.h"
#include "model/llama_style.h"

namespace rowlm {
namespace {

using config::json;

// Reads `<arch>.<key>`; absent keys give `fallback` unless it is null.
struct Keys {
  const gguf::File& f;
  std::string arch;

  std::string key(const std::string& k) const { return arch + "." + k; }
  bool has(const std::string& k) const { return f.find(key(k)) != nullptr; }
  int64_t integer(const std::string& k) const { return f.get_int(key(k)); }
  int64_t integer(const std::string& k, int64_t fallback) const { return has(k) ? integer(k) : fallback; }
  double number(const std::string& k, double fallback) const { return has(k) ? f.get_float(key(k)) : fallback; }
};

// The token ids of the tokenizer.ggml.* special tokens that end a turn.
json stop_ids(const gguf::File& f) {
  json ids = json::array();
  for (const char* k : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"})
    if (f.find(k)) {
      const int64_t id = f.get_int(k);
      if (std::find(ids.begin(), ids.end(), json(id)) == ids.end()) ids.push_back(id);
    }
  return ids;
}

void refuse_rope_scaling(const Keys& k) {
  if (k.has("rope.scaling.type")) {
    const std::string type = k.f.get_string(k.key("rope.scaling.type"));
    if (type != "none") k.f.fail("GGUF metadata '" + k.key("rope.scaling.type") + "' = '" + type + "' is not supported");
  }
}

json qwen3_config(const gguf::File& f) {
  const Keys k{f, "qwen3"};
  refuse_rope_scaling(k);
  const gguf::TensorInfo& embed = f.tensor("token_embd.weight");
  if (embed.ne.size() != 2) f.fail("GGUF tensor 'token_embd.weight' is not a matrix");
  const int64_t hidden = k.integer("embedding_length");
  const int64_t heads = k.integer("attention.head_count");
  const int64_t head_dim = k.integer("attention.key_length", heads > 0 ? hidden / heads : 0);
  if (k.integer("attention.value_length", head_dim) != head_dim)
    f.fail("GGUF metadata '" + k.key("attention.value_length") + "' differs from attention.key_length");
  json c = {
      {"model_type", "qwen3"},
      {"vocab_size", embed.ne[1]},
      {"hidden_size", hidden},
      {"intermediate_size", k.integer("feed_forward_length")},
      {"num_hidden_layers", k.integer("block_count")},
      {"num_attention_heads", heads},
      {"num_key_value_heads", k.integer("attention.head_count_kv", heads)},
      {"head_dim", head_dim},
      {"max_position_embeddings", k.integer("context_length")},
      {"rms_norm_eps", k.number("attention.layer_norm_rms_epsilon", 1e-6)},
      // llama.cpp's default base when the key is absent.
      {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", k.number("rope.freq_base", 10000.0)}}},
      {"tie_word_embeddings", f.find_tensor("output.weight") == nullptr},
      {"attention_bias", f.find_tensor("blk.0.attn_q.bias") != nullptr},
      {"eos_token_id", stop_ids(f)},
  };
  if (f.find("tokenizer.ggml.bos_token_id")) c["bos_token_id"] = f.get_int("tokenizer.ggml.bos_token_id");
  return c;
}

// A key that is one integer or one per layer (llama.cpp writes arrays when
// layers differ): the value of layer l.
int64_t layer_value(const Keys& k, const std::string& key, int layer, int layers) {
  const gguf::Value* v = k.f.find(k.key(key));
  if (!v) k.f.fail("GGUF metadata '" + k.key(key) + "' is missing");
  if (v->type != gguf::ValueType::Array) return k.integer(key);
  const auto& a = k.f.get_ints(k.key(key));
  if (int(a.size()) != layers)
    k.f.fail("GGUF metadata '" + k.key(key) + "' has " + std::to_string(a.size()) + " entries for " +
             std::to_string(layers) + " layers");
  return a[std::size_t(layer)];
}

// The fraction of rotated dimensions of full layers: llama.cpp's converter
// stores proportional RoPE as rope_freqs.weight, one factor per pair, 1 for
// the rotated pairs and 1e30 for the rest (Gemma4Model.generate_extra_tensors).
double rotated_fraction(const gguf::File& f) {
  const gguf::TensorInfo* t = f.find_tensor("rope_freqs.weight");
  if (!t) return 1.0;
  if (t->ne.size() != 1 || t->type != gguf::GgmlType::F32)
    f.fail("GGUF tensor 'rope_freqs.weight' must be an F32 vector");
  std::vector<float> v(std::size_t(t->numel()));
  std::memcpy(v.data(), t->bytes.data(), v.size() * sizeof(float));
  std::size_t rotated = 0;
  while (rotated < v.size() && v[rotated] == 1.0f) ++rotated;
  for (std::size_t i = rotated; i < v.size(); ++i)
    if (!(v[i] >= 1e29f)) f.fail("GGUF tensor 'rope_freqs.weight' is not 1 for rotated pairs then 1e30");
  return double(rotated) / double(v.size());
}

json gemma4_config(const gguf::File& f) {
  const Keys k{f, "gemma4"};
  refuse_rope_scaling(k);
  if (k.integer("expert_count", 0) > 0) f.fail("GGUF gemma4 files with experts (MoE) are not supported yet");
  const gguf::TensorInfo& embed = f.tensor("token_embd.weight");
  if (embed.ne.size() != 2) f.fail("GGUF tensor 'token_embd.weight' is not a matrix");
  const int layers = int(k.integer("block_count"));
  std::vector<bool> sliding(std::size_t(layers), false);
  if (k.has("attention.sliding_window_pattern")) {
    const auto& p = f.get_ints(k.key("attention.sliding_window_pattern"));
    if (int(p.size()) != layers) f.fail("GGUF metadata '" + k.key("attention.sliding_window_pattern") + "' needs one entry per layer");
    for (int l = 0; l < layers; ++l) sliding[std::size_t(l)] = p[std::size_t(l)] != 0;
  }
  const int64_t head_dim_full = k.integer("attention.key_length");
  const int64_t head_dim_swa = k.integer("attention.key_length_swa", head_dim_full);
  if (k.integer("attention.value_length", head_dim_full) != head_dim_full ||
      k.integer("attention.value_length_swa", head_dim_swa) != head_dim_swa)
    f.fail("GGUF metadata: gemma4 value_length must equal key_length");
  json layer_types = json::array(), per_layer_config = json::object();
  bool k_eq_v = false;
  const int64_t first_shared = layers - k.integer("attention.shared_kv_layers", 0);
  for (int l = 0; l < layers; ++l) {
    const bool s = sliding[std::size_t(l)];
    layer_types.push_back(s ? "sliding_attention" : "full_attention");
    per_layer_config[std::to_string(l)] = {{"head_dim", s ? head_dim_swa : head_dim_full},
                                    {"num_key_value_heads", layer_value(k, "attention.head_count_kv", l, layers)}};
    const std::string blk = "blk." + std::to_string(l) + ".";
    if (!s && l < first_shared && f.find_tensor(blk + "attn_k.weight") && !f.find_tensor(blk + "attn_v.weight"))
      k_eq_v = true;
  }
  const int64_t ff0 = layer_value(k, "feed_forward_length", 0, layers);
  bool double_wide = false;
  for (int l = 0; l < layers; ++l) {
    const int64_t ff = layer_value(k, "feed_forward_length", l, layers);
    if (ff == 2 * ff0 && l >= first_shared) double_wide = true;
    else if (ff != ff0) f.fail("GGUF metadata '" + k.key("feed_forward_length") + "' differs between layers other than as a double-wide MLP");
  }
  const int64_t swa_rot = k.integer("rope.dimension_count_swa", head_dim_swa);
  if (swa_rot != head_dim_swa)
    f.fail("GGUF metadata '" + k.key("rope.dimension_count_swa") + "': partial RoPE on sliding layers is not supported");
  json full_rope = {{"rope_type", "default"}, {"rope_theta", k.number("rope.freq_base", 1e6)}};
  if (f.find_tensor("rope_freqs.weight"))
    full_rope = {{"rope_type", "proportional"}, {"rope_theta", k.number("rope.freq_base", 1e6)},
                 {"partial_rotary_factor", rotated_fraction(f)}};
  json c = {
      {"model_type", "gemma4_text"},
      {"vocab_size", embed.ne[1]},
      {"hidden_size", k.integer("embedding_length")},
      {"intermediate_size", ff0},
      {"use_double_wide_mlp", double_wide},
      {"num_hidden_layers", layers},
      {"num_attention_heads", k.integer("attention.head_count")},
      {"num_key_value_heads", layer_value(k, "attention.head_count_kv", 0, layers)},
      {"head_dim", head_dim_swa},
      {"per_layer_config", per_layer_config},
      {"attention_k_eq_v", k_eq_v},
      {"layer_types", layer_types},
      {"sliding_window", k.integer("attention.sliding_window", 512)},
      {"rms_norm_eps", k.number("attention.layer_norm_rms_epsilon", 1e-6)},
      {"max_position_embeddings", k.integer("context_length")},
      {"rope_parameters",
       {{"sliding_attention", {{"rope_type", "default"}, {"rope_theta", k.number("rope.freq_base_swa", 1e4)}}},
        {"full_attention", full_rope}}},
      {"num_kv_shared_layers", layers - first_shared},
      {"hidden_size_per_layer_input", k.integer("embedding_length_per_layer_input", 0)},
      {"tie_word_embeddings", f.find_tensor("output.weight") == nullptr},
      {"enable_moe_block", false},
      {"eos_token_id", stop_ids(f)},
  };
  if (k.has("final_logit_softcapping")) c["final_logit_softcapping"] = k.number("final_logit_softcapping", 0.0);
  else c["final_logit_softcapping"] = nullptr;
  if (const gguf::TensorInfo* ple = f.find_tensor("per_layer_token_embd.weight"); ple && ple->ne.size() == 2)
    c["vocab_size_per_layer_input"] = ple->ne[1];
  if (f.find("tokenizer.ggml.bos_token_id")) c["bos_token_id"] = f.get_int("tokenizer.ggml.bos_token_id");
  if (f.find("tokenizer.ggml.padding_token_id")) c["pad_token_id"] = f.get_int("tokenizer.ggml.padding_token_id");
  return c;
}

}  // namespace

bool is_gguf_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::string_view(magic, 4) == "GGUF";
}

std::string supported_gguf_architectures() { return "gemma4, qwen3"; }

config::json gguf_hf_config(const gguf::File& f) {
  const std::string arch = f.get_string("general.architecture");
  if (arch == "qwen3") return qwen3_config(f);
  if (arch == "gemma4") return gemma4_config(f);
  f.fail("GGUF architecture '" + arch + "' is not supported (supported: " + supported_gguf_architectures() + ")");
}

std::vector<TensorFormat> gguf_tensor_formats(const std::string& path) {
  const gguf::File file = gguf::File::open(path);
  std::vector<TensorFormat> out;
  for (const gguf::TensorInfo& t : file.tensors()) {
    std::string format = gguf::ggml_type_name(t.type_code);
    if (const auto layout = gguf::affine_layout(t.type))
      format += " -> q" + std::to_string(layout->bits) + "/" + std::to_string(layout->group_size);
    out.push_back({t.name, format, t.shape(), t.bytes.size()});
  }
  std::sort(out.begin(), out.end(), [](const TensorFormat& a, const TensorFormat& b) { return a.name < b.name; });
  return out;
}

std::unique_ptr<Model> load_gguf_model(const std::string& path, Backend& backend) {
  const gguf::File file = gguf::File::open(path);
  const config::json hf = gguf_hf_config(file);
  const std::string source = path + " (metadata as config.json)";
  if (hf["model_type"] == "gemma4_text") {
    const gemma4::Config config = gemma4::parse_config(hf.dump(), source);
    return gemma4::make_model(config, gemma4::load_gguf_weights(file, config), backend, path);
  }
  const llama_style::Config config = llama_style::parse_config(hf.dump(), source);
  return llama_style::make_model(config, llama_style::load_gguf_weights(file, config), backend, path);
}

}  // namespace rowlm
