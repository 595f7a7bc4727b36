#pragma once
// Which tokens can continue a structured output, over the whole vocabulary.
//
// TokenTable: the bytes each token adds to the output text, computed once
// per tokenizer, with the tokens sorted by those bytes. compute_mask walks
// the sorted list once, keeping the automaton's state after each prefix:
// a token sharing k bytes with the previous one restarts from the state
// after those k bytes, and every token behind a rejected prefix is skipped
// on one comparison, so the walk costs about one automaton step per distinct
// prefix byte that the state accepts, not per vocabulary byte. Inside a
// string's text, where most tokens are accepted, the plain-text tokens are
// taken by their character count instead and only the others walked.
// MaskCache keeps each state's mask: decoding revisits the same states
// (inside a string, between a key and its value), and a cached mask costs
// one pass over the logits row.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "constrain/automaton.h"
#include "constrain/grammar.h"
#include "tokenizer/tokenizer.h"

namespace rowlm::constrain {

class TokenTable {
 public:
  // Ids [0, vocab_size) (the model's vocabulary, which may be larger than
  // the tokenizer's). Special tokens, ids the tokenizer lacks and tokens
  // whose text is empty get no bytes: no mask allows them. With
  // `quote_token` (grammars of Syntax::kGemma4), that special token is the
  // byte kQuoteByte, and no other token has that byte (a byte-fallback
  // token may). The table serves grammars whose string stop starts with
  // `stop_start` (0: none): tokens holding that byte are not plain text.
  TokenTable(const Tokenizer& tokenizer, int64_t vocab_size, std::optional<int32_t> quote_token = std::nullopt,
             uint8_t stop_start = 0);
  // For tests: the bytes of each id.
  explicit TokenTable(std::vector<std::string> bytes, uint8_t stop_start = 0);

  uint8_t stop_start() const { return stop_start_; }

  int64_t vocab_size() const { return int64_t(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[std::size_t(id)]; }
  // The ids with bytes, sorted by them, with how many leading bytes each
  // shares with the one before it.
  struct Sorted {
    std::vector<int32_t> ids;
    std::vector<uint32_t> shared;  // leading bytes shared with the one before
  };
  const Sorted& all() const { return all_; }
  const std::vector<int32_t>& sorted() const { return all_.ids; }
  // Plain-text tokens (Automaton::string_room) as (characters, id),
  // ascending; and the other tokens, sorted like all().
  const std::vector<std::pair<uint32_t, int32_t>>& plain_by_chars() const { return plain_; }
  const Sorted& not_plain() const { return not_plain_; }

 private:
  void sort_tokens();
  Sorted sorted_by_bytes(std::vector<int32_t> ids) const;
  std::vector<std::string> bytes_;
  uint8_t stop_start_ = 0;
  Sorted all_, not_plain_;
  std::vector<std::pair<uint32_t, int32_t>> plain_;
};

// A set of token ids, a bit each.
struct TokenMask {
  std::vector<uint64_t> words;
  std::size_t count = 0;  // ids in the set
  bool test(int32_t id) const { return words[std::size_t(id) >> 6] >> (id & 63) & 1; }
};

// The tokens whose bytes the automaton accepts from `state` (all of them).
TokenMask compute_mask(const Automaton& automaton, const State& state, const TokenTable& table);

// Masks by (grammar, state), up to a byte budget; past it the cache starts
// over. Thread-safe; masks stay valid while their holders keep them.
class MaskCache {
 public:
  explicit MaskCache(std::shared_ptr<const TokenTable> table, std::size_t budget_bytes = std::size_t(64) << 20);

  const TokenTable& table() const { return *table_; }
  std::shared_ptr<const TokenMask> get(const std::shared_ptr<const Grammar>& grammar, const Automaton& automaton,
                                       const State& state);
  // Masks computed and found so far.
  std::size_t misses() const;
  std::size_t hits() const;

 private:
  struct PerGrammar {
    std::shared_ptr<const Grammar> grammar;  // keeps the key's pointer meaning one grammar
    std::unordered_map<std::string, std::shared_ptr<const TokenMask>> masks;
  };
  const std::shared_ptr<const TokenTable> table_;
  const std::size_t budget_;
  mutable std::mutex mu_;
  std::unordered_map<const Grammar*, PerGrammar> grammars_;
  std::size_t bytes_ = 0, hits_ = 0, misses_ = 0;
};

}  // namespace rowlm::constrain
