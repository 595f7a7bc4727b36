#pragma once
// What a model path supplies besides its weights, whichever form it takes:
//   a model directory  tokenizer.json (+ tokenizer_config.json); the chat
//                      format from its template files or config.json;
//   a GGUF file        the tokenizer from tokenizer.ggml.* (gguf_vocab.h);
//                      the chat format from tokenizer.chat_template, else
//                      general.architecture.
// Every command and the engine take either through these two functions.

#include <optional>
#include <string>

#include "tokenizer/chat_format.h"
#include "tokenizer/tokenizer.h"

namespace rowlm {

// The model's tokenizer; nullopt when a directory has no tokenizer.json or a
// GGUF file no tokenizer.ggml.tokens. A path that is a tokenizer.json file is
// read as one. Bad files throw rowlm::Error naming them.
std::optional<Tokenizer> load_model_tokenizer(const std::string& path);

// The chat format the model's template or family implies; throws naming the
// path when neither decides.
tokenizer::ChatFormat model_chat_format(const std::string& path);

}  // namespace rowlm
