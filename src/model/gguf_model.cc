#include "model/gguf_model.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "model/qwen3.h"

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

}  // namespace

bool is_gguf_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::string_view(magic, 4) == "GGUF";
}

std::string supported_gguf_architectures() { return "qwen3"; }

config::json gguf_hf_config(const gguf::File& f) {
  const std::string arch = f.get_string("general.architecture");
  if (arch == "qwen3") return qwen3_config(f);
  f.fail("GGUF architecture '" + arch + "' is not supported (supported: " + supported_gguf_architectures() + ")");
}

std::unique_ptr<Model> load_gguf_model(const std::string& path, Backend& backend) {
  const gguf::File file = gguf::File::open(path);
  const config::json hf = gguf_hf_config(file);
  const std::string source = path + " (metadata as config.json)";
  const qwen3::Config config = qwen3::parse_config(hf.dump(), source);
  return qwen3::make_model(config, qwen3::load_gguf_weights(file, config), backend, path);
}

}  // namespace rowlm
