#include "tokenizer/stream_decoder.h"

#include <span>

#include "tokenizer/byte_level.h"
#include "tokenizer/unicode.h"

namespace rowlm {

namespace {

// Pieces kept before the pending ones as decoding context, and the window
// size at which the window is moved up.
constexpr std::size_t kContextPieces = 4;
constexpr std::size_t kMaxWindow = 16;

}  // namespace

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {
  if (const tok::Decoder* d = tokenizer_.decoder()) d->collect_traits(traits_);
}

std::string StreamDecoder::decode_range(std::size_t begin, std::size_t end) const {
  return tokenizer_.decode_pieces(std::span<const std::string_view>(pieces_.data() + begin, end - begin));
}

std::size_t StreamDecoder::final_piece_count() const {
  std::size_t end = pieces_.size();
  // A run of <0xNN> pieces decodes as a unit (an invalid run turns into one
  // U+FFFD per byte), so it stays open until a piece of another kind.
  if (traits_.byte_fallback)
    while (end > settled_ && tok::byte_fallback_value(pieces_[end - 1])) --end;
  // Byte-level text is UTF-8 decoded as a whole: hold back the pieces that
  // carry the start of an incomplete trailing character.
  if (traits_.byte_level && end > settled_) {
    const auto& alphabet = tok::ByteLevelAlphabet::get();
    std::vector<std::size_t> piece_end;  // byte offset after each piece
    std::string bytes;
    for (std::size_t i = settled_; i < end; ++i) {
      alphabet.decode(pieces_[i], bytes);
      piece_end.push_back(bytes.size());
    }
    const std::size_t tail = tok::incomplete_utf8_tail(bytes);
    if (tail > 0) {
      const std::size_t tail_begin = bytes.size() - tail;
      std::size_t i = 0;
      while (piece_end[i] <= tail_begin) ++i;  // the piece holding the tail's first byte
      end = settled_ + i;
    }
  }
  return end;
}

std::string StreamDecoder::emit_through(std::size_t end) {
  if (end <= settled_) return {};
  std::string text = decode_range(window_, end);
  std::string out;
  if (text.compare(0, window_text_.size(), window_text_) == 0) {
    out = text.substr(window_text_.size());
  } else {
    // The new pieces changed the context's text (a decoder step spanning the
    // boundary): decode from the beginning instead.
    window_ = 0;
    text = decode_range(0, end);
    out = text.size() > emitted_ ? text.substr(emitted_) : std::string();
  }
  settled_ = end;
  window_text_ = std::move(text);
  emitted_ += out.size();
  if (settled_ - window_ > kMaxWindow) {
    // Keep a few emitted pieces as context; their text must be non-empty so
    // that start-of-text steps (Strip) cannot reach into later pieces.
    for (std::size_t c = settled_ - kContextPieces; c > window_; --c) {
      std::string context = decode_range(c, settled_);
      if (!context.empty()) {
        window_ = c;
        window_text_ = std::move(context);
        break;
      }
    }
  }
  return out;
}

std::string StreamDecoder::push(int32_t id) {
  if (auto piece = tokenizer_.decode_piece(id, skip_special_tokens_)) pieces_.push_back(*piece);
  return emit_through(final_piece_count());
}

std::string StreamDecoder::finish() { return emit_through(pieces_.size()); }

}  // namespace rowlm
