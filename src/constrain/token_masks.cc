#include "constrain/token_masks.h"

#include <algorithm>
#include <numeric>

#include "tokenizer/byte_level.h"
#include "tokenizer/decoders.h"

namespace rowlm::constrain {

namespace {

// The text `piece` adds after other text: decoders treat the first piece
// specially (Metaspace drops its leading marker, Strip trims), so the piece
// is decoded after itself and the first copy's text removed.
std::string continuation_text(const Tokenizer& tokenizer, std::string_view piece) {
  const std::string_view one[] = {piece};
  const std::string_view two[] = {piece, piece};
  const std::string first = tokenizer.decode_pieces(one);
  const std::string both = tokenizer.decode_pieces(two);
  if (both.size() >= first.size() && both.compare(0, first.size(), first) == 0) return both.substr(first.size());
  return first;
}

// Plain string text: no '"', '\\' or control character, whole UTF-8
// characters (the automaton's rules); its character count, or -1.
int64_t plain_text_chars(std::string_view b, uint8_t stop_start) {
  auto cont = [&](std::size_t i, uint8_t lo, uint8_t hi) {
    return i < b.size() && uint8_t(b[i]) >= lo && uint8_t(b[i]) <= hi;
  };
  auto tail = [&](std::size_t i, std::size_t n) {
    for (std::size_t k = 0; k < n; ++k)
      if (!cont(i + k, 0x80, 0xBF)) return false;
    return true;
  };
  int64_t chars = 0;
  for (std::size_t i = 0; i < b.size(); ++chars) {
    const uint8_t c = uint8_t(b[i]);
    if (c < 0x20 || c == '"' || c == '\\' || (stop_start != 0 && c == stop_start)) return -1;
    std::size_t n = 1;
    bool ok = true;
    if (c >= 0x80) {
      if (c >= 0xC2 && c <= 0xDF) n = 2, ok = tail(i + 1, 1);
      else if (c == 0xE0) n = 3, ok = cont(i + 1, 0xA0, 0xBF) && tail(i + 2, 1);
      else if (c == 0xED) n = 3, ok = cont(i + 1, 0x80, 0x9F) && tail(i + 2, 1);
      else if (c >= 0xE1 && c <= 0xEF) n = 3, ok = tail(i + 1, 2);
      else if (c == 0xF0) n = 4, ok = cont(i + 1, 0x90, 0xBF) && tail(i + 2, 2);
      else if (c == 0xF4) n = 4, ok = cont(i + 1, 0x80, 0x8F) && tail(i + 2, 2);
      else if (c >= 0xF1 && c <= 0xF3) n = 4, ok = tail(i + 1, 3);
      else return -1;
    }
    if (!ok) return -1;
    i += n;
  }
  return chars;
}

// The walk over `tokens` sorted by bytes, setting the accepted ones in `mask`.
void walk(const Automaton& automaton, const State& state, const TokenTable& table, const TokenTable::Sorted& tokens,
          TokenMask& mask) {
  // states[d]: the state after the current token's first d bytes, valid
  // for d <= valid. dead: the previous token's byte at this index was
  // rejected (npos: none), so every token sharing more bytes is rejected too.
  std::vector<State> states(1, state);
  std::size_t valid = 0;
  constexpr std::size_t kNone = SIZE_MAX;
  std::size_t dead = kNone;
  for (std::size_t i = 0; i < tokens.ids.size(); ++i) {
    const std::size_t common = tokens.shared[i];
    if (dead != kNone && common > dead) continue;
    const int32_t id = tokens.ids[i];
    const std::string& b = table.bytes(id);
    if (states.size() < b.size() + 1) states.resize(b.size() + 1);
    std::size_t d = std::min(common, valid);
    dead = kNone;
    for (; d < b.size(); ++d) {
      states[d + 1].frames = states[d].frames;  // reuses the vector's storage
      if (!automaton.feed(states[d + 1], uint8_t(b[d]))) {
        dead = d;
        break;
      }
    }
    valid = d;
    if (dead == kNone) {
      mask.words[std::size_t(id) >> 6] |= uint64_t(1) << (id & 63);
      ++mask.count;
    }
  }
}

}  // namespace

TokenTable::Sorted TokenTable::sorted_by_bytes(std::vector<int32_t> ids) const {
  Sorted out;
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return bytes_[std::size_t(a)] < bytes_[std::size_t(b)] || (bytes_[std::size_t(a)] == bytes_[std::size_t(b)] && a < b);
  });
  out.shared.assign(ids.size(), 0);
  for (std::size_t i = 1; i < ids.size(); ++i) {
    const std::string& a = bytes_[std::size_t(ids[i - 1])];
    const std::string& b = bytes_[std::size_t(ids[i])];
    const auto diff = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
    out.shared[i] = uint32_t(diff.first - a.begin());
  }
  out.ids = std::move(ids);
  return out;
}

void TokenTable::sort_tokens() {
  std::vector<int32_t> all, other;
  for (std::size_t id = 0; id < bytes_.size(); ++id) {
    if (bytes_[id].empty()) continue;
    all.push_back(int32_t(id));
    const int64_t chars = plain_text_chars(bytes_[id], stop_start_);
    if (chars >= 0) plain_.emplace_back(uint32_t(chars), int32_t(id));
    else other.push_back(int32_t(id));
  }
  std::sort(plain_.begin(), plain_.end());
  all_ = sorted_by_bytes(std::move(all));
  not_plain_ = sorted_by_bytes(std::move(other));
}

TokenMask compute_mask(const Automaton& automaton, const State& state, const TokenTable& table) {
  const std::string& stop = automaton.grammar().string_stop();
  ROWLM_CHECK(table.stop_start() == (stop.empty() ? 0 : uint8_t(stop[0])),
              "token table: built for another grammar's string stop");
  TokenMask mask;
  mask.words.assign((std::size_t(table.vocab_size()) + 63) / 64, 0);
  if (const std::optional<uint32_t> room = automaton.string_room(state)) {
    for (const auto& [chars, id] : table.plain_by_chars()) {
      if (chars > *room) break;
      mask.words[std::size_t(id) >> 6] |= uint64_t(1) << (id & 63);
      ++mask.count;
    }
    walk(automaton, state, table, table.not_plain(), mask);
  } else {
    walk(automaton, state, table, table.all(), mask);
  }
  return mask;
}


TokenTable::TokenTable(const Tokenizer& tokenizer, int64_t vocab_size, std::optional<int32_t> quote_token,
                       uint8_t stop_start)
    : bytes_(std::size_t(vocab_size)), stop_start_(stop_start) {
  tok::Decoder::Traits traits;
  if (const tok::Decoder* d = tokenizer.decoder()) d->collect_traits(traits);
  const int64_t known = std::min<int64_t>(vocab_size, tokenizer.vocab_size());
  for (int32_t id = 0; id < known; ++id) {
    if (tokenizer.is_special(id)) continue;
    std::optional<std::string_view> piece;
    try {
      piece = tokenizer.decode_piece(id, /*skip_special_tokens=*/true);
    } catch (const Error&) {
      continue;  // a hole in the vocabulary
    }
    if (!piece) continue;
    std::string& out = bytes_[std::size_t(id)];
    if (traits.byte_fallback && tok::byte_fallback_value(*piece)) {
      out.assign(1, char(*tok::byte_fallback_value(*piece)));
    } else if (traits.byte_level) {
      tok::ByteLevelAlphabet::get().decode(*piece, out);
    } else {
      out = continuation_text(tokenizer, *piece);
    }
    if (quote_token && out.find(char(kQuoteByte)) != std::string::npos) out.clear();
  }
  if (quote_token) {
    ROWLM_CHECK(*quote_token >= 0 && *quote_token < vocab_size, "token table: quote token out of range");
    bytes_[std::size_t(*quote_token)] = std::string(1, char(kQuoteByte));
  }
  sort_tokens();
}

TokenTable::TokenTable(std::vector<std::string> bytes, uint8_t stop_start)
    : bytes_(std::move(bytes)), stop_start_(stop_start) {
  sort_tokens();
}

MaskCache::MaskCache(std::shared_ptr<const TokenTable> table, std::size_t budget_bytes)
    : table_(std::move(table)), budget_(budget_bytes) {}

std::shared_ptr<const TokenMask> MaskCache::get(const std::shared_ptr<const Grammar>& grammar,
                                                const Automaton& automaton, const State& state) {
  std::string key = state.key();
  std::lock_guard lock(mu_);
  PerGrammar& per = grammars_[grammar.get()];
  if (!per.grammar) per.grammar = grammar;
  if (auto it = per.masks.find(key); it != per.masks.end()) {
    ++hits_;
    return it->second;
  }
  ++misses_;
  auto mask = std::make_shared<const TokenMask>(compute_mask(automaton, state, *table_));
  const std::size_t bytes = mask->words.size() * sizeof(uint64_t) + key.size();
  if (bytes_ + bytes > budget_) {
    // Start over; grammars no request holds any more go with their masks.
    for (auto it = grammars_.begin(); it != grammars_.end();) {
      it->second.masks.clear();
      if (it->second.grammar.use_count() == 1 && it->first != grammar.get()) it = grammars_.erase(it);
      else ++it;
    }
    bytes_ = 0;
  }
  bytes_ += bytes;
  grammars_[grammar.get()].masks.emplace(std::move(key), mask);
  return mask;
}

std::size_t MaskCache::misses() const {
  std::lock_guard lock(mu_);
  return misses_;
}

std::size_t MaskCache::hits() const {
  std::lock_guard lock(mu_);
  return hits_;
}

}  // namespace rowlm::constrain
