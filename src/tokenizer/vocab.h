#pragma once
// The token table: id -> piece and piece -> id, built once at load time.
// Pieces live in one arena and the reverse index is an open-addressing hash
// of ids, so 262k entries build in milliseconds and lookups allocate nothing.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rowlm::tok {

class Vocab {
 public:
  // Adds a piece with its id. Throws rowlm::Error if the id is negative or
  // already taken by another piece. If one piece gets two ids, find()
  // returns the larger.
  void add(std::string_view piece, int32_t id);
  // Builds the reverse index; call once after the last add().
  void finish();

  std::optional<int32_t> find(std::string_view piece) const;
  // Piece of `id`, or nullopt if no piece has that id.
  std::optional<std::string_view> piece(int32_t id) const {
    if (id < 0 || std::size_t(id) >= begin_.size() || begin_[std::size_t(id)] < 0) return std::nullopt;
    return std::string_view(arena_).substr(std::size_t(begin_[std::size_t(id)]), length_[std::size_t(id)]);
  }
  // One past the largest id.
  int32_t end_id() const { return int32_t(begin_.size()); }
  std::size_t size() const { return count_; }

 private:
  static uint64_t hash(std::string_view s);

  std::string arena_;
  std::vector<int64_t> begin_;    // by id; -1 where no piece has the id
  std::vector<uint32_t> length_;  // by id
  std::vector<int32_t> slots_;    // open addressing: id, or -1 for empty
  std::size_t count_ = 0;
};

}  // namespace rowlm::tok
