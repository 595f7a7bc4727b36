#pragma once
// rowlm's tokenizer: the Hugging Face tokenizer.json format (the pipeline of
// the `tokenizers` library: added tokens, normalizer, pre-tokenizer, BPE
// model, post-processor; decoder), giving the same ids and text as that
// library. Loading checks the file and reports problems as rowlm::Error
// naming the file and the component.
//
//   auto tok = rowlm::Tokenizer::load("models/gemma-3-1b");   // or .../tokenizer.json
//   std::vector<int32_t> ids = tok.encode("Hello");           // with <bos>
//   std::string text = tok.decode(ids);
//
// A Tokenizer is immutable after loading (its BPE word cache is internally
// synchronized), so one instance can serve many threads.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/added_tokens.h"

namespace rowlm {

namespace tok {
class Decoder;
}  // namespace tok

// What tokenizer_config.json says about special tokens, when it is present.
struct TokenizerSpecialTokens {
  std::optional<int32_t> bos, eos, pad, unk;
  std::optional<bool> add_bos_token, add_eos_token;
};

class Tokenizer {
 public:
  // `path` is a tokenizer.json file or a directory holding one. A
  // tokenizer_config.json beside it, if any, supplies special_tokens().
  static Tokenizer load(const std::filesystem::path& path);
  // Parses the text of a tokenizer.json. `overrides` (a JSON object or
  // null) replaces top-level entries of the document, and entries of its
  // "model" object when given as {"model": {...}}. `what` names the source
  // in error messages.
  static Tokenizer from_json(std::string_view json_text, const nlohmann::json* overrides = nullptr,
                             const std::string& what = "tokenizer.json");

  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // `text` must be UTF-8. With add_special_tokens the post-processor adds
  // its special tokens (e.g. <bos>); added tokens in the text are always
  // recognized.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // Throws rowlm::Error for an id that is not a token.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // One past the largest token id (model vocab and added tokens).
  int32_t vocab_size() const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string_view> id_to_token(int32_t id) const;
  // Special tokens are the added tokens marked "special" (skipped by
  // decode(..., skip_special_tokens=true)).
  bool is_special(int32_t id) const;
  std::optional<int32_t> special_token_id(std::string_view content) const;
  const std::vector<tok::AddedToken>& added_tokens() const;
  const TokenizerSpecialTokens& special_tokens() const;

  // The lower level of decode(), for streaming: the piece of `id` as the
  // decoder sees it (nullopt when skipped), and the decoder run on pieces.
  std::optional<std::string_view> decode_piece(int32_t id, bool skip_special_tokens) const;
  std::string decode_pieces(std::span<const std::string_view> pieces) const;
  const tok::Decoder* decoder() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rowlm
