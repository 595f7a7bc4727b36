#pragma once
// A small strict JSON scanner over text held in memory. tokenizer.json files
// carry vocabularies of ~262k entries and ~515k merges; building a DOM for
// them costs seconds, so the loader walks the document with this scanner,
// reads the vocab and merges straight into the model's tables and hands only
// the small remaining values to nlohmann::json.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace rowlm::tok {

class JsonScanner {
 public:
  // `what` names the document in error messages (e.g. a file path).
  JsonScanner(std::string_view text, std::string what) : text_(text), what_(std::move(what)) {}

  void skip_ws() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\r' || text_[pos_] == '\t'))
      ++pos_;
  }
  // Next significant character, or '\0' at the end.
  char peek() {
    skip_ws();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }
  void expect(char c);
  bool consume(char c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }

  // Reads a string. The result views the document when the string has no
  // escapes, otherwise `scratch`.
  std::string_view string(std::string& scratch);
  int64_t integer();
  // Skips one value and returns its raw text.
  std::string_view skip_value();
  // For `{` ... `}` and `[` ... `]`: after the opening bracket was consumed,
  // returns false at the closing one (consumed) and otherwise consumes the
  // separating comma where one is due.
  bool next_member(char close, bool first);

  std::size_t pos() const { return pos_; }
  void seek(std::size_t pos) { pos_ = pos; }
  bool at_end() {
    skip_ws();
    return pos_ == text_.size();
  }
  [[noreturn]] void fail(const std::string& message) const;

 private:
  std::string_view skip_value(int depth);

  std::string_view text_;
  std::string what_;
  std::size_t pos_ = 0;
};

}  // namespace rowlm::tok
