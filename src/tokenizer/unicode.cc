#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "core/error.h"

namespace rowlm::tok {

char32_t decode_utf8(std::string_view s, std::size_t i, std::size_t* len) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  const std::size_t n = utf8_len(b0);
  *len = n;
  if (n == 1) return b0;
  char32_t cp = b0 & (0x7F >> n);
  for (std::size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

namespace {

// Length of the well-formed sequence at s[i], or 0 with `*valid_prefix` set to
// the length of the longest ill-formed prefix that could still have become a
// well-formed sequence (Unicode's "maximal subpart", at least 1 byte).
std::size_t well_formed_at(std::string_view s, std::size_t i, std::size_t* valid_prefix) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  *valid_prefix = 1;
  if (b0 < 0x80) return 1;
  std::size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (std::size_t k = 1; k < need; ++k) {
    if (i + k >= s.size()) return 0;
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (b < lo || b > hi) return 0;
    lo = 0x80, hi = 0xBF;
    *valid_prefix = k + 1;
  }
  return need;
}

}  // namespace

std::size_t find_invalid_utf8(std::string_view s) {
  std::size_t i = 0, prefix = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const std::size_t n = well_formed_at(s, i, &prefix);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

void require_utf8(std::string_view s, const std::string& what) {
  const std::size_t bad = find_invalid_utf8(s);
  if (bad != std::string_view::npos)
    throw Error(what + " is not valid UTF-8 (bad byte at offset " + std::to_string(bad) + ")");
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  std::size_t i = 0, prefix = 0;
  while (i < bytes.size()) {
    const std::size_t n = well_formed_at(bytes, i, &prefix);
    if (n) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += prefix;
    }
  }
  return out;
}

std::size_t incomplete_utf8_tail(std::string_view bytes) {
  // A trailing proper prefix of a well-formed sequence starts at most 3 bytes
  // before the end, at a lead byte whose maximal subpart reaches the end.
  for (std::size_t back = 1; back <= 3 && back <= bytes.size(); ++back) {
    const std::size_t i = bytes.size() - back;
    const auto b = static_cast<unsigned char>(bytes[i]);
    if (b < 0x80) return 0;
    if (b < 0xC0) continue;  // continuation byte: look further back
    std::size_t prefix = 0;
    if (well_formed_at(bytes, i, &prefix) == 0 && prefix == back) return back;
    return 0;
  }
  return 0;
}

bool is_whitespace(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
  switch (c) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

bool is_numeric(char32_t c) {
  const auto cat = utf8proc_category(utf8proc_int32_t(c));
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}

bool is_word_char(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  if (c == 0x200C || c == 0x200D) return true;  // Join_Control
  switch (utf8proc_category(utf8proc_int32_t(c))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

std::string unicode_normalize(std::string_view s, NormalForm form) {
  // ASCII is invariant under every normal form.
  bool ascii = true;
  for (char ch : s) ascii &= static_cast<unsigned char>(ch) < 0x80;
  if (ascii) return std::string(s);
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::NFC: options |= UTF8PROC_COMPOSE; break;
    case NormalForm::NFD: options |= UTF8PROC_DECOMPOSE; break;
    case NormalForm::NFKC: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalForm::NFKD: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), utf8proc_ssize_t(s.size()), &out,
                   utf8proc_option_t(options));
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  if (n < 0) throw Error(std::string("Unicode normalization failed: ") + utf8proc_errmsg(n));
  return std::string(reinterpret_cast<const char*>(out), std::size_t(n));
}

std::string lowercase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      out += char(b >= 'A' && b <= 'Z' ? b + 32 : b);
      ++i;
      continue;
    }
    std::size_t len = 0;
    const char32_t c = decode_utf8(s, i, &len);
    i += len;
    if (c == 0x130) {  // the one unconditional multi-character lowercase mapping
      out += "i\xCC\x87";
      continue;
    }
    append_utf8(out, char32_t(utf8proc_tolower(utf8proc_int32_t(c))));
  }
  return out;
}

}  // namespace rowlm::tok
