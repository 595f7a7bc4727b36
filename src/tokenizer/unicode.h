#pragma once
// UTF-8 and Unicode helpers with the exact semantics the Hugging Face
// `tokenizers` library (Rust) uses, so that rowlm's pipeline agrees with it
// byte for byte: Rust's char predicates, from_utf8_lossy's replacement
// policy, and Unicode normalization / lowercasing through utf8proc.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace rowlm::tok {

// Decodes the code point starting at s[i] (s must be valid UTF-8) and
// returns its length in bytes through `len`.
char32_t decode_utf8(std::string_view s, std::size_t i, std::size_t* len);
// Length of the UTF-8 sequence introduced by lead byte `b` (1 for ASCII and,
// defensively, for continuation bytes).
inline std::size_t utf8_len(unsigned char b) {
  return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}
void append_utf8(std::string& out, char32_t cp);

// Offset of the first invalid byte, or npos when `s` is valid UTF-8
// (shortest forms only, no surrogates, at most U+10FFFF).
std::size_t find_invalid_utf8(std::string_view s);
// Throws rowlm::Error naming `what` and the byte offset if `s` is not UTF-8.
void require_utf8(std::string_view s, const std::string& what);

// Rust's String::from_utf8_lossy: every maximal ill-formed subpart becomes
// one U+FFFD.
std::string utf8_lossy(std::string_view bytes);
// Length of a trailing proper prefix of a well-formed sequence (0 to 3): the
// bytes a lossy decoder cannot settle until more input arrives.
std::size_t incomplete_utf8_tail(std::string_view bytes);

// Rust char::is_whitespace (the Unicode White_Space property).
bool is_whitespace(char32_t c);
// Rust char::is_numeric (general categories Nd, Nl, No).
bool is_numeric(char32_t c);
// Rust regex / Oniguruma \w: letters, marks, decimal digits, connector
// punctuation.
bool is_word_char(char32_t c);

enum class NormalForm { NFC, NFD, NFKC, NFKD };
std::string unicode_normalize(std::string_view s, NormalForm form);
// Rust char::to_lowercase applied per character (no final-sigma context).
std::string lowercase(std::string_view s);

}  // namespace rowlm::tok
