#pragma once
// The pattern of Split, Replace (normalizer and decoder): {"String": s}
// matches s literally, {"Regex": r} is an Oniguruma-style regex.

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/json_fields.h"
#include "tokenizer/regex.h"

namespace rowlm::tok {

class Pattern {
 public:
  static Pattern from_json(const Json& j, const std::string& where);
  static Pattern literal(std::string s);

  // Appends the matches in `text`, left to right, non-overlapping. An empty
  // literal matches nothing.
  void find(std::string_view text, std::vector<Span>& out) const;
  std::string replace_all(std::string_view text, std::string_view content) const;

 private:
  std::string literal_;
  std::shared_ptr<const Regex> regex_;
};

}  // namespace rowlm::tok
