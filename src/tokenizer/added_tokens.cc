#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/unicode.h"

namespace rowlm::tok {

int32_t AddedTokenMatcher::child(int32_t node, unsigned char b) const {
  const auto& edges = nodes_[std::size_t(node)].edges;
  auto it = std::lower_bound(edges.begin(), edges.end(), b,
                             [](const std::pair<unsigned char, int32_t>& e, unsigned char v) { return e.first < v; });
  return it != edges.end() && it->first == b ? it->second : -1;
}

void AddedTokenMatcher::add(std::string_view pattern, std::size_t token_index) {
  if (pattern.empty()) return;
  int32_t node = 0;
  for (char ch : pattern) {
    const auto b = static_cast<unsigned char>(ch);
    int32_t next = child(node, b);
    if (next < 0) {
      next = int32_t(nodes_.size());
      nodes_.emplace_back();
      auto& edges = nodes_[std::size_t(node)].edges;
      edges.insert(std::lower_bound(edges.begin(), edges.end(), std::make_pair(b, int32_t(-1))), {b, next});
    }
    node = next;
  }
  // The first token listed for a pattern keeps it.
  if (nodes_[std::size_t(node)].token_index < 0) nodes_[std::size_t(node)].token_index = int32_t(token_index);
  std::fill(std::begin(root_children_), std::end(root_children_), -1);
  for (const auto& [b, n] : nodes_[0].edges) root_children_[b] = n;
  root_ready_ = true;
}

std::optional<std::pair<std::size_t, std::size_t>> AddedTokenMatcher::longest_at(std::string_view text,
                                                                                  std::size_t pos) const {
  int32_t node = root_children_[static_cast<unsigned char>(text[pos])];
  std::optional<std::pair<std::size_t, std::size_t>> best;
  for (std::size_t i = pos + 1; node >= 0; ++i) {
    if (const int32_t t = nodes_[std::size_t(node)].token_index; t >= 0) best = {{i - pos, std::size_t(t)}};
    if (i >= text.size()) break;
    node = child(node, static_cast<unsigned char>(text[i]));
  }
  return best;
}

namespace {

// tokenizers tests \w on the last char before / first char after a match.
bool ends_with_word(std::string_view s) {
  if (s.empty()) return false;
  std::size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  std::size_t len = 0;
  return is_word_char(decode_utf8(s, i, &len));
}

bool starts_with_word(std::string_view s) {
  if (s.empty()) return false;
  std::size_t len = 0;
  return is_word_char(decode_utf8(s, 0, &len));
}

}  // namespace

std::vector<AddedTokenMatcher::Split> AddedTokenMatcher::split(std::string_view text,
                                                               const std::vector<AddedToken>& tokens) const {
  std::vector<Split> out;
  if (text.empty()) return out;
  if (!root_ready_) {
    out.push_back({0, text.size(), -1});
    return out;
  }
  std::size_t start_offset = 0;
  for (std::size_t pos = 0; pos < text.size();) {
    if (root_children_[static_cast<unsigned char>(text[pos])] < 0) {
      ++pos;
      continue;
    }
    const auto match = longest_at(text, pos);
    if (!match) {
      ++pos;
      continue;
    }
    std::size_t start = pos, stop = pos + match->first;
    pos = stop;  // matching resumes after this match even if it is discarded
    const AddedToken& token = tokens[match->second];
    if (token.single_word) {
      const bool space_before = start == 0 || !ends_with_word(text.substr(0, start));
      const bool space_after = stop == text.size() || !starts_with_word(text.substr(stop));
      if (!space_before || !space_after) continue;
    }
    if (token.lstrip) {
      std::size_t new_start = start;
      while (new_start > 0) {
        std::size_t i = new_start - 1;
        while (i > 0 && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) --i;
        std::size_t len = 0;
        if (!is_whitespace(decode_utf8(text, i, &len))) break;
        new_start = i;
      }
      start = std::max(new_start, start_offset);
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        std::size_t len = 0;
        if (!is_whitespace(decode_utf8(text, stop, &len))) break;
        stop += len;
      }
    }
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, token.id});
    start_offset = stop;
  }
  if (start_offset < text.size()) out.push_back({start_offset, text.size(), -1});
  return out;
}

}  // namespace rowlm::tok
