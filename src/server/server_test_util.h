#pragma once
// What the server module's tests share: the bundled model's tokenizer and
// vocabulary size.

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace rowlm::server::testing {

constexpr int64_t kTinyVocab = 8192;  // models/rowlm-tiny

inline const Tokenizer& tiny_tokenizer() {
  static const Tokenizer tok = Tokenizer::load(std::string(ROWLM_SOURCE_DIR) + "/models/rowlm-tiny");
  return tok;
}

}  // namespace rowlm::server::testing
