#pragma once
// Incremental detokenization: token ids go in one at a time and only text
// that no later token can change comes out, so a stream never shows half a
// UTF-8 character, a byte-fallback run before it is complete, or a marker
// that later decodes differently. The concatenation of everything push()
// and finish() return equals Tokenizer::decode() of all the ids.
//
// Each step decodes a short window: a few already-emitted context pieces
// plus the pending ones, and returns what the window's text gained. Context
// pieces carry the decoder's first-token behaviour (Metaspace dropping the
// leading marker, Strip at the start), so the new text is decoded as a
// continuation, as in the full decode.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/decoders.h"
#include "tokenizer/tokenizer.h"

namespace rowlm {

class StreamDecoder {
 public:
  // `tokenizer` must outlive the decoder.
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false);

  // Adds one token and returns the text that became final (often empty).
  // Throws rowlm::Error for an id that is not a token.
  std::string push(int32_t id);
  // Returns the text still held back, as if the stream ended here.
  std::string finish();

  // Everything returned so far, in bytes.
  std::size_t emitted_bytes() const { return emitted_; }

 private:
  std::size_t final_piece_count() const;
  std::string emit_through(std::size_t end);
  std::string decode_range(std::size_t begin, std::size_t end) const;

  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  tok::Decoder::Traits traits_;
  std::vector<std::string_view> pieces_;  // every piece so far (skipped ids have none)
  std::size_t window_ = 0;                // first piece of the decode window
  std::size_t settled_ = 0;               // pieces_[0, settled_) are emitted
  std::string window_text_;               // decode of pieces_[window_, settled_)
  std::size_t emitted_ = 0;
};

}  // namespace rowlm
