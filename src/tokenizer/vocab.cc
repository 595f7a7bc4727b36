#include "tokenizer/vocab.h"

#include <algorithm>
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
  if (id > kMaxId)
    throw Error("vocab: token '" + std::string(piece) + "' has the id " + std::to_string(id) +
                ", past the largest rowlm accepts (" + std::to_string(kMaxId) + ")");
  if (std::size_t(id) >= entries_.size()) entries_.resize(std::size_t(id) + 1);
  if (entries_[std::size_t(id)].length != kNoPiece) {
    if (this->piece(id) == piece) return;
    throw Error("vocab: id " + std::to_string(id) + " is given to both '" + std::string(*this->piece(id)) +
                "' and '" + std::string(piece) + "'");
  }
  if (arena_.size() + piece.size() >= kNoPiece) throw Error("vocab: the pieces exceed 4 GiB");
  entries_[std::size_t(id)] = {uint32_t(arena_.size()), uint32_t(piece.size())};
  arena_.append(piece);
  ++count_;
}

void Vocab::finish() {
  std::size_t cap = 16;
  while (cap < count_ * 2) cap <<= 1;
  slots_.assign(cap, Slot{});
  const std::size_t mask = cap - 1;
  for (int32_t id = 0; id < end_id(); ++id) {
    const auto p = piece(id);
    if (!p) continue;
    const uint64_t h = hash(*p);
    const auto tag = uint32_t(h >> 32);
    std::size_t slot = h & mask;
    while (true) {
      const Slot other = slots_[slot];
      if (other.id < 0) {
        slots_[slot] = {id, tag};
        break;
      }
      if (other.tag == tag && *piece(other.id) == *p) {
        // The same piece under two ids: keep the larger.
        slots_[slot].id = id;
        break;
      }
      slot = (slot + 1) & mask;
    }
  }
}

std::optional<int32_t> Vocab::find(std::string_view piece) const {
  if (slots_.empty()) return std::nullopt;
  const std::size_t mask = slots_.size() - 1;
  const uint64_t h = hash(piece);
  const auto tag = uint32_t(h >> 32);
  for (std::size_t slot = h & mask;; slot = (slot + 1) & mask) {
    const Slot s = slots_[slot];
    if (s.id < 0) return std::nullopt;
    if (s.tag != tag) continue;
    const Entry& e = entries_[std::size_t(s.id)];
    if (e.length == piece.size() && (e.length == 0 || std::memcmp(arena_.data() + e.offset, piece.data(), e.length) == 0))
      return s.id;
  }
}

void Vocab::find_many(const std::string_view* pieces, std::size_t n, int32_t* ids) const {
  constexpr std::size_t kBatch = 32;
  uint64_t hashes[kBatch];
  for (std::size_t base = 0; base < n; base += kBatch) {
    const std::size_t m = std::min(kBatch, n - base);
    const std::size_t mask = slots_.empty() ? 0 : slots_.size() - 1;
    for (std::size_t k = 0; k < m; ++k) {
      hashes[k] = hash(pieces[base + k]);
      if (!slots_.empty()) __builtin_prefetch(&slots_[hashes[k] & mask]);
    }
    for (std::size_t k = 0; k < m; ++k) {
      if (slots_.empty()) break;
      const Slot s = slots_[hashes[k] & mask];
      if (s.id >= 0) {
        const Entry& e = entries_[std::size_t(s.id)];
        __builtin_prefetch(&e);
      }
    }
    for (std::size_t k = 0; k < m; ++k) {
      if (slots_.empty()) break;
      const Slot s = slots_[hashes[k] & mask];
      if (s.id >= 0) __builtin_prefetch(arena_.data() + entries_[std::size_t(s.id)].offset);
    }
    for (std::size_t k = 0; k < m; ++k) {
      const auto id = find(pieces[base + k]);
      ids[base + k] = id ? *id : -1;
    }
  }
}

}  // namespace rowlm::tok
