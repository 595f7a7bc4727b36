#include "engine/model_files.h"

#include <filesystem>

#include "core/error.h"
#include "io/gguf.h"
#include "model/gguf_model.h"
#include "tokenizer/gguf_vocab.h"

namespace rowlm {
namespace {

std::optional<int64_t> optional_int(const gguf::File& f, const std::string& key) {
  if (!f.find(key)) return std::nullopt;
  return f.get_int(key);
}

GgufVocab read_vocab(const gguf::File& f) {
  GgufVocab v;
  v.model = f.get_string("tokenizer.ggml.model");
  if (f.find("tokenizer.ggml.pre")) v.pre = f.get_string("tokenizer.ggml.pre");
  v.tokens = f.get_strings("tokenizer.ggml.tokens");
  if (f.find("tokenizer.ggml.token_type")) v.types = f.get_ints("tokenizer.ggml.token_type");
  if (f.find("tokenizer.ggml.merges")) v.merges = f.get_strings("tokenizer.ggml.merges");
  if (f.find("tokenizer.ggml.scores")) v.scores = f.get_floats("tokenizer.ggml.scores");
  if (f.find("tokenizer.ggml.add_space_prefix")) v.add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix");
  v.bos = optional_int(f, "tokenizer.ggml.bos_token_id");
  v.eos = optional_int(f, "tokenizer.ggml.eos_token_id");
  v.unk = optional_int(f, "tokenizer.ggml.unknown_token_id");
  if (f.find("tokenizer.ggml.add_bos_token")) v.add_bos = f.get_bool("tokenizer.ggml.add_bos_token");
  return v;
}

}  // namespace

std::optional<Tokenizer> load_model_tokenizer(const std::string& path) {
  if (is_gguf_file(path)) {
    const gguf::File f = gguf::File::open(path);
    if (!f.find("tokenizer.ggml.tokens")) return std::nullopt;
    return tokenizer_from_gguf(read_vocab(f), path);
  }
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec) && !std::filesystem::exists(std::filesystem::path(path) / "tokenizer.json"))
    return std::nullopt;
  return Tokenizer::load(path);
}

tokenizer::ChatFormat model_chat_format(const std::string& path) {
  if (!is_gguf_file(path)) return tokenizer::ChatFormat::from_model_dir(path);
  const gguf::File f = gguf::File::open(path);
  const std::string chat_template =
      f.find("tokenizer.chat_template") ? f.get_string("tokenizer.chat_template") : std::string();
  std::string bos_token;
  if (f.find("tokenizer.ggml.bos_token_id") && f.find("tokenizer.ggml.tokens")) {
    const auto& tokens = f.get_strings("tokenizer.ggml.tokens");
    const int64_t id = f.get_int("tokenizer.ggml.bos_token_id");
    if (id >= 0 && id < int64_t(tokens.size())) bos_token = tokens[std::size_t(id)];
  }
  try {
    return tokenizer::ChatFormat::detect(chat_template, f.get_string("general.architecture"), bos_token);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what() + " with --chat-format");
  }
}

}  // namespace rowlm
