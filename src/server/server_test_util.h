#pragma once
// What the server module's tests share: the bundled model's tokenizer and
// vocabulary size, and the bad-field tables' "remove it".

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace rowlm::server::testing {

constexpr int64_t kTinyVocab = 8192;  // models/rowlm-tiny

// In the bad-field tables: the field is removed rather than replaced.
inline const nlohmann::json kRemove = nlohmann::json::value_t::discarded;

inline const Tokenizer& tiny_tokenizer() {
  static const Tokenizer tok = Tokenizer::load(std::string(ROWLM_SOURCE_DIR) + "/models/rowlm-tiny");
  return tok;
}

}  // namespace rowlm::server::testing
