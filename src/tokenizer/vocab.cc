#include "tokenizer/vocab.h"

#include <bit>
#include <cstring>

#include "core/error.h"

namespace rowlm::tok {

uint64_t Vocab::hash(std::string_view s) {
  // FNV-1a over 8-byte words, then a final avalanche: short keys dominate.
  uint64_t h = 0xcbf29ce484222325ull ^ s.size();
  std::size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  uint64_t tail = 0;
  if (i < s.size()) std::memcpy(&tail, s.data() + i, s.size() - i);
  h = (h ^ tail) * 0x9E3779B97F4A7C15ull;
  h ^= h >> 32;
  h *= 0xD6E8FEB86659FD93ull;
  h ^= h >> 32;
  return h;
}

void Vocab::add(std::string_view piece, int32_t id) {
  if (id < 0) throw Error("vocab: token '" + std::string(piece) + "' has a negative id " + std::to_string(id));
  if (std::size_t(id) >= begin_.size()) {
    begin_.resize(std::size_t(id) + 1, -1);
    length_.resize(std::size_t(id) + 1, 0);
  }
  if (begin_[std::size_t(id)] >= 0) {
    if (this->piece(id) == piece) return;
    throw Error("vocab: id " + std::to_string(id) + " is given to both '" + std::string(*this->piece(id)) +
                "' and '" + std::string(piece) + "'");
  }
  begin_[std::size_t(id)] = int64_t(arena_.size());
  length_[std::size_t(id)] = uint32_t(piece.size());
  arena_.append(piece);
  ++count_;
}

void Vocab::finish() {
  std::size_t cap = 16;
  while (cap < count_ * 2) cap <<= 1;
  slots_.assign(cap, -1);
  const std::size_t mask = cap - 1;
  for (int32_t id = 0; id < end_id(); ++id) {
    const auto p = piece(id);
    if (!p) continue;
    std::size_t slot = hash(*p) & mask;
    while (true) {
      const int32_t other = slots_[slot];
      if (other < 0) {
        slots_[slot] = id;
        break;
      }
      if (*piece(other) == *p) {
        // The same piece under two ids: the later one wins, as in a hash map
        // filled in file order. Ids are visited in order here, so keep the
        // larger, which matches files written in id order.
        slots_[slot] = id;
        break;
      }
      slot = (slot + 1) & mask;
    }
  }
}

std::optional<int32_t> Vocab::find(std::string_view piece) const {
  if (slots_.empty()) return std::nullopt;
  const std::size_t mask = slots_.size() - 1;
  std::size_t slot = hash(piece) & mask;
  while (true) {
    const int32_t id = slots_[slot];
    if (id < 0) return std::nullopt;
    const std::size_t b = std::size_t(begin_[std::size_t(id)]);
    const std::size_t n = length_[std::size_t(id)];
    if (n == piece.size() && std::memcmp(arena_.data() + b, piece.data(), n) == 0) return id;
    slot = (slot + 1) & mask;
  }
}

}  // namespace rowlm::tok
