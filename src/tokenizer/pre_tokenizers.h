#pragma once
// tokenizer.json pre-tokenizers: Split, ByteLevel, Metaspace, Whitespace,
// WhitespaceSplit, Digits and Sequence. Each splits the plain-text pieces
// into smaller ones (the words the model sees); added-token pieces pass
// through untouched.

#include <memory>
#include <string>

#include "tokenizer/json_fields.h"
#include "tokenizer/pieces.h"
#include "tokenizer/regex.h"

namespace rowlm::tok {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void pre_tokenize(Pieces& pieces) const = 0;
};

// nullptr for a JSON null. Throws rowlm::Error naming an unknown type.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Json& j, const std::string& where = "pre_tokenizer");

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// Splits `piece` around `matches` (sorted, non-overlapping spans of its
// text) the way tokenizers' NormalizedString::split does, appending the
// non-empty results to `out`. `invert` swaps matches and the text between.
void split_piece(const Piece& piece, const std::vector<Span>& matches, bool invert, SplitBehavior behavior,
                 Pieces& out);

}  // namespace rowlm::tok
