#pragma once
// GPT-2's byte-level alphabet: every byte is shown as a printable character
// (printable Latin-1 bytes as themselves, the rest as U+0100 onwards), so a
// vocab of strings can hold arbitrary bytes.

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace rowlm::tok {

class ByteLevelAlphabet {
 public:
  static const ByteLevelAlphabet& get();

  // The UTF-8 text of the character standing for byte `b`.
  std::string_view encode(unsigned char b) const { return chars_[b]; }
  // Appends the bytes of `piece` to `out` if every character of it is in the
  // alphabet; otherwise appends the piece's own UTF-8 and returns false.
  bool decode(std::string_view piece, std::string& out) const;

 private:
  ByteLevelAlphabet();
  std::array<std::string, 256> chars_;
  std::array<int, 324> byte_of_;  // by code point below 324; -1 if unused
};

}  // namespace rowlm::tok
