#include "model/gguf_config.h"

#include <algorithm>

namespace rowlm::gguf_config {

json stop_ids(const gguf::File& f) {
  json ids = json::array();
  for (const char* k : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"})
    if (f.find(k)) {
      const int64_t id = f.get_int(k);
      if (std::find(ids.begin(), ids.end(), json(id)) == ids.end()) ids.push_back(id);
    }
  return ids;
}

void add_special_ids(const gguf::File& f, json& c) {
  if (f.find("tokenizer.ggml.bos_token_id")) c["bos_token_id"] = f.get_int("tokenizer.ggml.bos_token_id");
  if (f.find("tokenizer.ggml.padding_token_id")) c["pad_token_id"] = f.get_int("tokenizer.ggml.padding_token_id");
}

int64_t layer_value(const Keys& k, const std::string& key, int layer, int layers) {
  const gguf::Value* v = k.f.find(k.key(key));
  if (!v) k.fail(key, "is missing");
  if (v->type != gguf::ValueType::Array) return k.integer(key);
  const auto& a = k.f.get_ints(k.key(key));
  if (int(a.size()) != layers)
    k.fail(key, "has " + std::to_string(a.size()) + " entries for " + std::to_string(layers) + " layers");
  return a[std::size_t(layer)];
}

int64_t uniform_value(const Keys& k, const std::string& key, int layers) {
  const int64_t first = layer_value(k, key, 0, layers);
  for (int l = 1; l < layers; ++l)
    if (layer_value(k, key, l, layers) != first)
      k.fail(key, "differs between layers (" + k.arch + " layers share one value in rowlm)");
  return first;
}

int64_t vocab_size(const gguf::File& f) {
  const gguf::TensorInfo& embed = f.tensor("token_embd.weight");
  if (embed.ne.size() != 2) f.fail("GGUF tensor 'token_embd.weight' is not a matrix");
  return embed.ne[1];
}

double linear_rope_factor(const Keys& k) {
  // llama_model_loader: the type defaults to "linear", and a factor of 0
  // (or none) means no scaling.
  const std::string type = k.has("rope.scaling.type") ? k.f.get_string(k.key("rope.scaling.type")) : "linear";
  if (type == "none") return 1.0;
  if (type != "linear") k.fail("rope.scaling.type", "= '" + type + "' is not supported (supported: none, linear)");
  const double factor = k.number("rope.scaling.factor", 0.0);
  if (factor == 0.0) return 1.0;
  if (!(factor > 0.0)) k.fail("rope.scaling.factor", "must be positive");
  return factor;
}

}  // namespace rowlm::gguf_config
