#include "tokenizer/json_scan.h"

#include <cstring>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace rowlm::tok {

void JsonScanner::fail(const std::string& message) const {
  // Line and column make a hand-edited file easy to fix.
  std::size_t line = 1, col = 1;
  for (std::size_t i = 0; i < pos_ && i < text_.size(); ++i) {
    if (text_[i] == '\n') ++line, col = 1;
    else ++col;
  }
  throw Error(what_ + ": invalid JSON: " + message + " at line " + std::to_string(line) + ", column " +
              std::to_string(col));
}

void JsonScanner::expect(char c) {
  if (peek() != c) {
    if (pos_ >= text_.size()) fail(std::string("expected '") + c + "' but the text ended");
    fail(std::string("expected '") + c + "' but found '" + text_[pos_] + "'");
  }
  ++pos_;
}

bool JsonScanner::next_member(char close, bool first) {
  if (consume(close)) return false;
  if (!first) expect(',');
  return true;
}

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string_view JsonScanner::string(std::string& scratch) {
  expect('"');
  const std::size_t begin = pos_;
  unsigned char high = 0;  // any byte >= 0x80 means the UTF-8 needs checking
  // Fast path: find the closing quote; no backslash means no unescaping.
  while (pos_ < text_.size()) {
    const char c = text_[pos_];
    if (c == '"') {
      const std::string_view s = text_.substr(begin, pos_ - begin);
      if ((high & 0x80) && find_invalid_utf8(s) != std::string_view::npos) fail("string is not valid UTF-8");
      ++pos_;
      return s;
    }
    if (c == '\\') break;
    if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
    high |= static_cast<unsigned char>(c);
    ++pos_;
  }
  scratch.assign(text_.data() + begin, pos_ - begin);
  while (true) {
    if (pos_ >= text_.size()) fail("unterminated string");
    const char c = text_[pos_++];
    if (c == '"') {
      if (find_invalid_utf8(scratch) != std::string::npos) fail("string is not valid UTF-8");
      return scratch;
    }
    if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
    if (c != '\\') {
      scratch += c;
      continue;
    }
    if (pos_ >= text_.size()) fail("unterminated string");
    const char e = text_[pos_++];
    switch (e) {
      case '"': scratch += '"'; break;
      case '\\': scratch += '\\'; break;
      case '/': scratch += '/'; break;
      case 'b': scratch += '\b'; break;
      case 'f': scratch += '\f'; break;
      case 'n': scratch += '\n'; break;
      case 'r': scratch += '\r'; break;
      case 't': scratch += '\t'; break;
      case 'u': {
        auto read4 = [&]() -> char32_t {
          if (pos_ + 4 > text_.size()) fail("truncated \\u escape");
          char32_t v = 0;
          for (int k = 0; k < 4; ++k) {
            const int h = hex_value(text_[pos_ + k]);
            if (h < 0) fail("bad \\u escape");
            v = v * 16 + char32_t(h);
          }
          pos_ += 4;
          return v;
        };
        char32_t cp = read4();
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          if (pos_ + 2 > text_.size() || text_[pos_] != '\\' || text_[pos_ + 1] != 'u')
            fail("unpaired surrogate in \\u escape");
          pos_ += 2;
          const char32_t lo = read4();
          if (lo < 0xDC00 || lo > 0xDFFF) fail("unpaired surrogate in \\u escape");
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
          fail("unpaired surrogate in \\u escape");
        }
        append_utf8(scratch, cp);
        break;
      }
      default:
        fail(std::string("bad escape \\") + e);
    }
  }
}

int64_t JsonScanner::integer() {
  skip_ws();
  const std::size_t begin = pos_;
  bool negative = false;
  if (pos_ < text_.size() && text_[pos_] == '-') negative = true, ++pos_;
  int64_t v = 0;
  std::size_t digits = 0;
  while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
    if (v > (INT64_MAX - 9) / 10) fail("integer too large");
    v = v * 10 + (text_[pos_++] - '0');
    ++digits;
  }
  if (digits == 0 || (digits > 1 && text_[begin + negative] == '0')) {
    pos_ = begin;
    fail("expected an integer");
  }
  if (pos_ < text_.size() && (text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E')) {
    pos_ = begin;
    fail("expected an integer");
  }
  return negative ? -v : v;
}

std::string_view JsonScanner::skip_value() { return skip_value(0); }

std::string_view JsonScanner::skip_value(int depth) {
  if (depth > 256) fail("values nested too deeply");
  const char first = peek();
  const std::size_t begin = pos_;
  std::string scratch;
  switch (first) {
    case '"':
      string(scratch);
      break;
    case '{': {
      ++pos_;
      for (bool f = true; next_member('}', f); f = false) {
        string(scratch);
        expect(':');
        skip_value(depth + 1);
      }
      break;
    }
    case '[': {
      ++pos_;
      for (bool f = true; next_member(']', f); f = false) skip_value(depth + 1);
      break;
    }
    case '\0':
      fail("expected a value but the text ended");
    default: {
      // Numbers and literals: nlohmann::json checks their spelling later.
      while (pos_ < text_.size() && std::strchr("+-.0123456789eEtruefalsn", text_[pos_]) && text_[pos_] != '\0')
        ++pos_;
      if (pos_ == begin) fail(std::string("unexpected character '") + first + "'");
    }
  }
  return text_.substr(begin, pos_ - begin);
}

}  // namespace rowlm::tok
