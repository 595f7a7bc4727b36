#pragma once
// tokenizer.json normalizers: Replace, Prepend, NFC, NFD, NFKC, NFKD,
// Lowercase, Strip and Sequence.

#include <memory>
#include <string>

#include "tokenizer/json_fields.h"

namespace rowlm::tok {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};

// nullptr for a JSON null. Throws rowlm::Error naming an unknown type.
std::unique_ptr<Normalizer> make_normalizer(const Json& j, const std::string& where = "normalizer");

}  // namespace rowlm::tok
