#pragma once
// rowlm's tokenizer from a GGUF file's tokenizer.ggml.* metadata. GGUF keeps
// the vocabulary, token types and merges but not the Hugging Face pipeline
// around them; llama.cpp names that pipeline by tokenizer.ggml.model and
// tokenizer.ggml.pre. This builds the tokenizer.json those names stand for
// (the pipeline each model family's own tokenizer.json has) and loads it
// with Tokenizer::from_json: one tokenizer, read from either source.
//
//   model "gpt2" (byte-level BPE): pre "qwen2" (Qwen 2/3: NFC, Qwen's split,
//     byte-level), "llama-bpe" (Llama 3's split, merges ignored for whole
//     words), "gpt-2" / "default" (GPT-2's byte-level split);
//   model "gemma4", or "llama" with add_space_prefix false (SentencePiece-
//     style BPE: spaces as "▁", split after each, byte fallback, <unk>;
//     Gemma's pipeline); model "llama" otherwise (add_space_prefix true or,
//     as llama.cpp reads it, absent: Llama 2's and Mistral's pipeline, "▁"
//     before the text, no split, the decoded text's first space dropped).
//     Without merges (llama.cpp writes tokenizer.model's pieces and
//     scores), the merges are derived from the scores as Hugging Face's
//     converter derives the tokenizer.json's.
//
// Token types (llama.cpp's llama_token_type): NORMAL and BYTE go to the
// BPE vocabulary, CONTROL and UNKNOWN become special added tokens (which
// SentencePiece vocabularies also keep in the BPE vocabulary), USER_DEFINED
// non-special ones, UNUSED (ids the converter padded) is left out. With
// add_bos_token the post-processor prepends the bos token.
//
// Errors (unknown model or pre, missing merges, ids out of range) name
// `source` and the key.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace rowlm {

struct GgufVocab {
  std::string model;                // tokenizer.ggml.model
  std::string pre;                  // tokenizer.ggml.pre ("" if absent)
  std::vector<std::string> tokens;  // tokenizer.ggml.tokens, by id
  std::vector<int64_t> types;       // tokenizer.ggml.token_type (empty: all NORMAL)
  std::vector<std::string> merges;  // tokenizer.ggml.merges, "left right"
  std::vector<double> scores;       // tokenizer.ggml.scores, by id (empty if absent)
  std::optional<int64_t> bos, eos, unk;
  std::optional<bool> add_bos;      // tokenizer.ggml.add_bos_token
  std::optional<bool> add_space_prefix;  // tokenizer.ggml.add_space_prefix
};

// llama.cpp's llama_token_type values.
enum class GgufTokenType : int64_t { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

// The tokenizer.json document (as text) for `vocab`.
std::string gguf_tokenizer_json(const GgufVocab& vocab, const std::string& source);
Tokenizer tokenizer_from_gguf(const GgufVocab& vocab, const std::string& source);

}  // namespace rowlm
