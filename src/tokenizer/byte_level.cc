#include "tokenizer/byte_level.h"

#include "tokenizer/unicode.h"

namespace rowlm::tok {

const ByteLevelAlphabet& ByteLevelAlphabet::get() {
  static const ByteLevelAlphabet alphabet;  // immutable after construction
  return alphabet;
}

ByteLevelAlphabet::ByteLevelAlphabet() {
  byte_of_.fill(-1);
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const int cp = printable ? b : next++;
    append_utf8(chars_[std::size_t(b)], char32_t(cp));
    byte_of_[std::size_t(cp)] = b;
  }
}

bool ByteLevelAlphabet::decode(std::string_view piece, std::string& out) const {
  const std::size_t start = out.size();
  for (std::size_t i = 0; i < piece.size();) {
    std::size_t len = 0;
    const char32_t c = decode_utf8(piece, i, &len);
    i += len;
    if (c >= byte_of_.size() || byte_of_[c] < 0) {
      out.resize(start);
      out.append(piece);
      return false;
    }
    out += char(byte_of_[c]);
  }
  return true;
}

}  // namespace rowlm::tok
