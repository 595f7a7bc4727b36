#pragma once
// tokenizer.json decoders: Replace, ByteFallback, Fuse, Strip, ByteLevel,
// Metaspace and Sequence. Like tokenizers, a decoder maps the list of token
// pieces to a new list; the decoded text is their concatenation.

#include <memory>
#include <optional>
#include <string_view>
#include <string>
#include <vector>

#include "tokenizer/json_fields.h"

namespace rowlm::tok {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& pieces) const = 0;

  // What a streaming decoder must know to settle text early.
  struct Traits {
    bool byte_fallback = false;  // <0xNN> runs decode together
    bool byte_level = false;     // pieces are byte-level text, UTF-8 decoded jointly
  };
  virtual void collect_traits(Traits& traits) const { (void)traits; }
};

// nullptr for a JSON null. Throws rowlm::Error naming an unknown type.
std::unique_ptr<Decoder> make_decoder(const Json& j, const std::string& where = "decoder");

// The byte a <0xNN> piece stands for, parsed as tokenizers' ByteFallback does.
std::optional<unsigned char> byte_fallback_value(std::string_view piece);

}  // namespace rowlm::tok
