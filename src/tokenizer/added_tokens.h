#pragma once
// Added tokens: strings matched in the input before the model sees it
// (special tokens like <bos>, chat markers, and user-added pieces), with
// tokenizers' options lstrip, rstrip, single_word and normalized.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rowlm::tok {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
};

// Finds added tokens leftmost-longest, as an Aho-Corasick automaton with
// that match kind would: scan for the earliest start, take the longest
// pattern there, resume after it.
class AddedTokenMatcher {
 public:
  // `pattern` (non-empty) stands for `tokens[token_index]`.
  void add(std::string_view pattern, std::size_t token_index);
  bool empty() const { return nodes_.size() <= 1; }

  struct Split {
    std::size_t begin, end;
    int32_t token = -1;  // id of the matched added token; -1 for plain text
  };
  // Splits `text` into plain stretches and added-token matches, applying
  // each token's single_word, lstrip and rstrip. Empty text gives no splits.
  std::vector<Split> split(std::string_view text, const std::vector<AddedToken>& tokens) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> edges;  // sorted by byte
    int32_t token_index = -1;
  };
  int32_t child(int32_t node, unsigned char b) const;
  // Longest pattern starting at `pos`: {length, token index}.
  std::optional<std::pair<std::size_t, std::size_t>> longest_at(std::string_view text, std::size_t pos) const;

  std::vector<Node> nodes_ = std::vector<Node>(1);
  int32_t root_children_[256];
  bool root_ready_ = false;
};

}  // namespace rowlm::tok
