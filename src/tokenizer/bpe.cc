#include "tokenizer/bpe.h"

#include <algorithm>
#include <cstdio>
#include <functional>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace rowlm::tok {

namespace {

constexpr uint64_t kEmptyKey = ~0ull;
constexpr std::size_t kCacheMaxWordBytes = 256;
constexpr std::size_t kCacheCapacity = 1 << 16;

uint64_t pair_key(int32_t left, int32_t right) { return (uint64_t(uint32_t(left)) << 32) | uint32_t(right); }

std::size_t pair_slot(uint64_t key, std::size_t mask) {
  uint64_t h = key * 0x9E3779B97F4A7C15ull;
  return std::size_t(h >> 20) & mask;
}

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

}  // namespace

// Words seen before, shared by every thread that encodes with this model.
// It stops growing when full, so a long-running server keeps a bounded set.
struct BpeModel::Cache {
  std::mutex mutex;
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> words;
};

BpeModel::BpeModel(Vocab vocab, BpeOptions options)
    : vocab_(std::move(vocab)), options_(std::move(options)), cache_(std::make_unique<Cache>()) {
  ascii_ids_.assign(128, -1);
  for (int c = 0; c < 128; ++c) {
    const char ch = char(c);
    if (auto id = vocab_.find(std::string_view(&ch, 1))) ascii_ids_[std::size_t(c)] = *id;
  }
  byte_ids_.assign(256, -1);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    if (auto id = vocab_.find(name)) byte_ids_[std::size_t(b)] = *id;
  }
  if (options_.unk_token && !vocab_.find(*options_.unk_token))
    throw Error("BPE model: unk_token '" + *options_.unk_token + "' is not in the vocab");
}

BpeModel::~BpeModel() = default;
BpeModel::BpeModel(BpeModel&&) noexcept = default;
BpeModel& BpeModel::operator=(BpeModel&&) noexcept = default;

int32_t BpeModel::unk_id() const { return *vocab_.find(*options_.unk_token); }

void BpeModel::add_merge(std::string_view left, std::string_view right, uint32_t rank) {
  auto describe = [&] {
    return "BPE merge " + std::to_string(rank) + " ('" + std::string(left) + "', '" + std::string(right) + "')";
  };
  const auto a = vocab_.find(left);
  if (!a) throw Error(describe() + ": '" + std::string(left) + "' is not in the vocab");
  const auto b = vocab_.find(right);
  if (!b) throw Error(describe() + ": '" + std::string(right) + "' is not in the vocab");
  const std::string& prefix = options_.continuing_subword_prefix;
  if (right.substr(0, prefix.size()) != prefix)
    throw Error(describe() + ": '" + std::string(right) + "' does not start with the continuing_subword_prefix");
  std::string merged;
  merged.reserve(left.size() + right.size());
  merged.append(left).append(right.substr(prefix.size()));
  const auto m = vocab_.find(merged);
  if (!m) throw Error(describe() + ": the merged piece '" + merged + "' is not in the vocab");
  pending_merges_.push_back({pair_key(*a, *b), Merge{rank, *m}});
}

void BpeModel::add_merges(const std::pair<std::string_view, std::string_view>* merges, std::size_t n,
                          uint32_t first_rank) {
  constexpr std::size_t kBatch = 256;
  std::vector<std::string> merged(kBatch);
  std::vector<std::string_view> keys(3 * kBatch);
  std::vector<int32_t> ids(3 * kBatch);
  const std::string& prefix = options_.continuing_subword_prefix;
  for (std::size_t base = 0; base < n; base += kBatch) {
    const std::size_t m = std::min(kBatch, n - base);
    for (std::size_t k = 0; k < m; ++k) {
      const auto& [left, right] = merges[base + k];
      merged[k].assign(left);
      if (right.substr(0, prefix.size()) == prefix) merged[k].append(right.substr(prefix.size()));
      keys[3 * k] = left, keys[3 * k + 1] = right, keys[3 * k + 2] = merged[k];
    }
    vocab_.find_many(keys.data(), 3 * m, ids.data());
    for (std::size_t k = 0; k < m; ++k) {
      if (ids[3 * k] < 0 || ids[3 * k + 1] < 0 || ids[3 * k + 2] < 0) {
        // Let the one-at-a-time path name the problem.
        add_merge(merges[base + k].first, merges[base + k].second, first_rank + uint32_t(base + k));
        continue;
      }
      pending_merges_.push_back({pair_key(ids[3 * k], ids[3 * k + 1]), Merge{first_rank + uint32_t(base + k), ids[3 * k + 2]}});
    }
  }
}

void BpeModel::finish_merges() {
  std::size_t cap = 16;
  while (cap < pending_merges_.size() * 2) cap <<= 1;
  merge_keys_.assign(cap, kEmptyKey);
  merge_values_.assign(cap, Merge{0, 0});
  const std::size_t mask = cap - 1;
  merge_count_ = 0;
  for (const auto& [key, value] : pending_merges_) {
    std::size_t slot = pair_slot(key, mask);
    while (merge_keys_[slot] != kEmptyKey && merge_keys_[slot] != key) slot = (slot + 1) & mask;
    if (merge_keys_[slot] == kEmptyKey) ++merge_count_;
    merge_keys_[slot] = key;
    merge_values_[slot] = value;  // a repeated pair keeps its later rank
  }
  pending_merges_.clear();
  pending_merges_.shrink_to_fit();
}

std::optional<BpeModel::Merge> BpeModel::find_merge(int32_t left, int32_t right) const {
  if (merge_keys_.empty()) return std::nullopt;
  const uint64_t key = pair_key(left, right);
  const std::size_t mask = merge_keys_.size() - 1;
  for (std::size_t slot = pair_slot(key, mask);; slot = (slot + 1) & mask) {
    if (merge_keys_[slot] == key) return merge_values_[slot];
    if (merge_keys_[slot] == kEmptyKey) return std::nullopt;
  }
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (auto id = vocab_.find(word)) {
      out.push_back(*id);
      return;
    }
  }
  const bool cacheable = word.size() < kCacheMaxWordBytes;
  if (cacheable) {
    std::lock_guard lock(cache_->mutex);
    if (auto it = cache_->words.find(word); it != cache_->words.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const std::size_t first = out.size();
  merge_word(word, out);
  if (cacheable) {
    std::lock_guard lock(cache_->mutex);
    if (cache_->words.size() < kCacheCapacity)
      cache_->words.emplace(std::string(word), std::vector<int32_t>(out.begin() + std::ptrdiff_t(first), out.end()));
  }
}

void BpeModel::merge_word(std::string_view w, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;
    int32_t prev, next;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(w.size());
  auto push = [&](int32_t id) {
    const int32_t n = int32_t(symbols.size());
    symbols.push_back({id, n - 1, n + 1});
  };

  const std::string& prefix = options_.continuing_subword_prefix;
  const std::string& suffix = options_.end_of_word_suffix;
  const bool plain = prefix.empty() && suffix.empty();
  int32_t pending_unk = -1;  // an unknown run waiting to be fused; -1: none
  std::string decorated;
  for (std::size_t i = 0; i < w.size();) {
    const std::size_t len = utf8_len(static_cast<unsigned char>(w[i]));
    std::string_view ch = w.substr(i, len);
    const bool is_first = i == 0, is_last = i + len >= w.size();
    i += len;
    if (!plain && ((!is_first && !prefix.empty()) || (is_last && !suffix.empty()))) {
      decorated.clear();
      if (!is_first) decorated += prefix;
      decorated += ch;
      if (is_last) decorated += suffix;
      ch = decorated;
    }
    std::optional<int32_t> id;
    if (ch.size() == 1 && static_cast<unsigned char>(ch[0]) < 0x80) {
      if (const int32_t a = ascii_ids_[static_cast<unsigned char>(ch[0])]; a >= 0) id = a;
    } else {
      id = vocab_.find(ch);
    }
    if (id) {
      if (pending_unk >= 0) push(pending_unk), pending_unk = -1;
      push(*id);
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (char b : ch) all &= byte_ids_[static_cast<unsigned char>(b)] >= 0;
      if (all) {
        // A pending unknown stays pending across byte-fallback pieces, as
        // tokenizers does.
        for (char b : ch) push(byte_ids_[static_cast<unsigned char>(b)]);
        continue;
      }
    }
    if (options_.unk_token) {
      if (pending_unk >= 0 && !options_.fuse_unk) push(pending_unk);
      if (pending_unk < 0 || !options_.fuse_unk) pending_unk = unk_id();
    }
  }
  if (pending_unk >= 0) push(pending_unk);
  if (symbols.empty()) return;
  symbols.back().next = -1;

  // Min-heap of candidate merges keyed by (rank, position): the lowest rank
  // first and, among equal ranks, the leftmost. Entries go stale when a
  // neighbour changes; they are checked when popped.
  std::vector<uint64_t> heap;
  heap.reserve(symbols.size());
  auto push_candidate = [&](int32_t pos) {
    const int32_t next = symbols[std::size_t(pos)].next;
    if (next < 0) return;
    if (auto m = find_merge(symbols[std::size_t(pos)].id, symbols[std::size_t(next)].id)) {
      heap.push_back((uint64_t(m->rank) << 32) | uint32_t(pos));
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  };
  for (int32_t pos = 0; pos + 1 < int32_t(symbols.size()); ++pos) {
    if (auto m = find_merge(symbols[std::size_t(pos)].id, symbols[std::size_t(pos) + 1].id))
      heap.push_back((uint64_t(m->rank) << 32) | uint32_t(pos));
  }
  std::make_heap(heap.begin(), heap.end(), std::greater<>());
  constexpr int32_t kRemoved = -2;
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const uint64_t top = heap.back();
    heap.pop_back();
    const auto rank = uint32_t(top >> 32);
    const auto pos = int32_t(uint32_t(top));
    Symbol& s = symbols[std::size_t(pos)];
    if (s.prev == kRemoved || s.next < 0) continue;
    const int32_t right = s.next;
    const auto m = find_merge(s.id, symbols[std::size_t(right)].id);
    if (!m || m->rank != rank) continue;  // stale
    s.id = m->id;
    Symbol& r = symbols[std::size_t(right)];
    s.next = r.next;
    if (r.next >= 0) symbols[std::size_t(r.next)].prev = pos;
    r.prev = kRemoved;
    if (s.prev >= 0) push_candidate(s.prev);
    push_candidate(pos);
  }
  for (int32_t pos = 0; pos >= 0; pos = symbols[std::size_t(pos)].next) out.push_back(symbols[std::size_t(pos)].id);
}

}  // namespace rowlm::tok
