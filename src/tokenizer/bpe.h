#pragma once
// The BPE model of tokenizer.json: a word becomes its characters' tokens
// (with byte fallback to <0xNN> pieces and unknown-token fusing), then the
// adjacent pair of lowest merge rank is merged, leftmost first, until no
// pair has a merge. Words up to 256 bytes are cached.

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/vocab.h"

namespace rowlm::tok {

struct BpeOptions {
  std::optional<std::string> unk_token;
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
};

class BpeModel {
 public:
  BpeModel(Vocab vocab, BpeOptions options);
  ~BpeModel();
  BpeModel(BpeModel&&) noexcept;
  BpeModel& operator=(BpeModel&&) noexcept;

  // Adds the merge of rank `rank` (its index in the file). Throws
  // rowlm::Error naming the merge if a part or the merged piece is not in
  // the vocab. A pair listed twice keeps its later rank.
  void add_merge(std::string_view left, std::string_view right, uint32_t rank);
  // add_merge() for the merges [first_rank, first_rank + n), faster.
  void add_merges(const std::pair<std::string_view, std::string_view>* merges, std::size_t n, uint32_t first_rank);
  // Builds the pair index; call once after the last add_merge().
  void finish_merges();

  // Appends the token ids of one pre-tokenized word.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  const Vocab& vocab() const { return vocab_; }
  std::size_t merge_count() const { return merge_count_; }

  // The merge for the pair (left, right), if any: {rank, merged id}.
  struct Merge {
    uint32_t rank;
    int32_t id;
  };
  std::optional<Merge> find_merge(int32_t left, int32_t right) const;

 private:
  struct Cache;
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;
  int32_t unk_id() const;

  Vocab vocab_;
  BpeOptions options_;
  std::vector<int32_t> ascii_ids_;  // id of each 1-byte piece, -1 if absent
  std::vector<int32_t> byte_ids_;   // id of <0xNN> for each byte, -1 if absent
  // Open-addressing table of merges keyed by (left << 32 | right).
  std::vector<uint64_t> merge_keys_;
  std::vector<Merge> merge_values_;
  std::vector<std::pair<uint64_t, Merge>> pending_merges_;
  std::size_t merge_count_ = 0;
  std::unique_ptr<Cache> cache_;
};

}  // namespace rowlm::tok
