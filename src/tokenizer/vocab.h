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
  // Ids are at most this: the table is dense, so an id is memory (a
  // hostile file's id of 300,000,000 asked for 2.4 GB); the largest real
  // vocabularies are below a million.
  static constexpr int32_t kMaxId = (int32_t(1) << 24) - 1;
  // Adds a piece with its id. Throws rowlm::Error if the id is negative,
  // above kMaxId or already taken by another piece. If one piece gets two
  // ids, find() returns the larger.
  void add(std::string_view piece, int32_t id);
  // Builds the reverse index; call once after the last add().
  void finish();

  std::optional<int32_t> find(std::string_view piece) const;
  // find() for many pieces at once (-1 for a miss): the lookups overlap their
  // memory accesses, which makes loading large merge lists several times
  // faster than one find() after another.
  void find_many(const std::string_view* pieces, std::size_t n, int32_t* ids) const;
  // Piece of `id`, or nullopt if no piece has that id.
  std::optional<std::string_view> piece(int32_t id) const {
    if (id < 0 || std::size_t(id) >= entries_.size() || entries_[std::size_t(id)].length == kNoPiece) return std::nullopt;
    return std::string_view(arena_.data() + entries_[std::size_t(id)].offset, entries_[std::size_t(id)].length);
  }
  // One past the largest id.
  int32_t end_id() const { return int32_t(entries_.size()); }
  std::size_t size() const { return count_; }

 private:
  static uint64_t hash(std::string_view s);
  static constexpr uint32_t kNoPiece = ~0u;

  struct Entry {
    uint32_t offset = 0;          // into arena_
    uint32_t length = kNoPiece;   // kNoPiece where no piece has the id
  };
  // A slot holds an id and the high bits of its piece's hash, so most
  // mismatches are rejected without touching the arena.
  struct Slot {
    int32_t id = -1;  // -1: empty
    uint32_t tag = 0;
  };
  std::string arena_;
  std::vector<Entry> entries_;  // by id
  std::vector<Slot> slots_;
  std::size_t count_ = 0;
};

}  // namespace rowlm::tok
