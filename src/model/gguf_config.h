#pragma once
// llama.cpp's GGUF metadata as the Hugging Face config.json a family reads
// (gguf_model.h): the helpers every architecture's translation shares, and
// the translations, one per architecture. Each reads what llama.cpp's
// loader reads, with llama.cpp's defaults where a key is optional, so a
// file means to rowlm what it means to llama.cpp; what transformers cannot
// express (or rowlm cannot run) is an error naming the key or tensor.
//
//   gguf_config_llama.cc   llama, qwen2, qwen3, qwen3moe
//   gguf_config_gemma.cc   gemma3, gemma4

#include <cstdint>
#include <string>

#include "io/gguf.h"
#include "model/config_fields.h"

namespace rowlm::gguf_config {

using config::json;

// Reads `<arch>.<key>`; absent keys give `fallback` where one is given.
struct Keys {
  const gguf::File& f;
  std::string arch;

  std::string key(const std::string& k) const { return arch + "." + k; }
  bool has(const std::string& k) const { return f.find(key(k)) != nullptr; }
  int64_t integer(const std::string& k) const { return f.get_int(key(k)); }
  int64_t integer(const std::string& k, int64_t fallback) const { return has(k) ? integer(k) : fallback; }
  double number(const std::string& k, double fallback) const { return has(k) ? f.get_float(key(k)) : fallback; }
  [[noreturn]] void fail(const std::string& k, const std::string& what) const {
    f.fail("GGUF metadata '" + key(k) + "' " + what);
  }
};

// The token ids of the tokenizer.ggml.* special tokens that end a turn.
json stop_ids(const gguf::File& f);

// bos_token_id / pad_token_id from tokenizer.ggml.*, where the file has them.
void add_special_ids(const gguf::File& f, json& config);

// A key that is one integer or one per layer (llama.cpp writes arrays when
// layers differ): the value of layer l.
int64_t layer_value(const Keys& k, const std::string& key, int layer, int layers);

// A key that may be an array but must hold one value for every layer.
int64_t uniform_value(const Keys& k, const std::string& key, int layers);

// The vocabulary size: token_embd.weight's rows (what llama.cpp uses).
int64_t vocab_size(const gguf::File& f);

// rope.scaling.type / rope.scaling.factor as llama.cpp reads them (type
// absent: linear; factor absent or 0: none) for the full-attention layers:
// 1.0 for no scaling, else the linear factor. Other types are refused.
double linear_rope_factor(const Keys& k);

json llama_lineage_config(const gguf::File& f, const std::string& arch);  // llama, qwen2, qwen3, qwen3moe
json gemma3_config(const gguf::File& f);
json gemma4_config(const gguf::File& f);

}  // namespace rowlm::gguf_config
