#include "constrain/automaton.h"

#include <algorithm>

namespace rowlm::constrain {

namespace {

enum FrameKind : uint8_t { kRoot, kObject, kArray, kString, kNumber, kLiteral, kCall };

// A string's text must not hold the grammar's string stop (Gemma 4's quote
// token's text, a call's closing text): its bytes matched so far at the end
// of the text are a string frame's `pos`. Its first byte occurs in it once,
// so a byte that breaks the match restarts it at 0, or at 1 on that byte.

// Whether a byte may be in a plain-text token (TokenTable's rule for a
// grammar whose string stop begins with `stop_start`, 0 for none).
bool plain_byte(uint8_t c, uint8_t stop_start) {
  return c >= 0x20 && c != '"' && c != '\\' && (stop_start == 0 || c != stop_start);
}

// Root phases.
enum : uint8_t { kRootStart, kRootValue, kRootDone };
// Object phases: after '{', after ',', inside a known key, inside a free key
// (a string frame above), before ':', before the value, inside the value,
// after it.
enum : uint8_t { kObjOpen, kObjComma, kObjKey, kObjFreeKey, kObjColon, kObjBeforeValue, kObjValue, kObjAfterValue };
// Array phases.
enum : uint8_t { kArrOpen, kArrComma, kArrValue, kArrAfterValue };
// Number phases (JSON's number grammar).
enum : uint8_t { kNumStart, kNumMinus, kNumZero, kNumInt, kNumDot, kNumFrac, kNumExp, kNumExpSign, kNumExpDigits };
// String `sub`: 0 plain; 1 after '\'; 2..5 the \u escape's hex digits; for a
// multi-byte character, the first continuation byte's range (UTF-8's rules
// against overlong forms and surrogates).
enum : uint8_t { kStrPlain = 0, kStrEscape = 1, kStrHex1 = 2, kStrHex4 = 5, kCont_A0_BF = 10, kCont_80_9F, kCont_90_BF,
                 kCont_80_8F };

bool is_ws(uint8_t c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// The count that saturates at `cap`: past it, no bound depends on the exact value.
uint32_t bump(uint32_t count, uint32_t min, uint32_t max) {
  const uint32_t cap = max != kUnbounded ? max : min;
  return std::min(count + 1, cap);
}

bool all_seen(uint64_t seen, std::size_t n) { return n >= 64 ? seen == ~uint64_t(0) : seen == (uint64_t(1) << n) - 1; }

// Whether some literal of the sorted list starts with lits[i] and is longer.
bool extended(const std::vector<std::string>& lits, uint32_t i) {
  return i + 1 < lits.size() && lits[i + 1].size() > lits[i].size() &&
         lits[i + 1].compare(0, lits[i].size(), lits[i]) == 0;
}

// Whether an integer whose text so far is `digits` digits of magnitude m
// (negative if neg) can still end within [lo, hi]: as it is, or with up to
// kMaxIntegerDigits digits in all when it may go on (no leading 0).
bool integer_reachable(bool neg, int64_t m, uint32_t digits, bool extend, int64_t lo, int64_t hi) {
  int64_t scale = 1;
  for (uint32_t k = digits;; ++k) {
    // Magnitudes [m * scale, m * scale + scale - 1] (k = digits: m alone).
    const int64_t a = m * scale, b = k == digits ? m : m * scale + scale - 1;
    const int64_t vlo = neg ? -b : a, vhi = neg ? -a : b;
    if (vlo <= hi && vhi >= lo) return true;
    if (!extend || k + 1 > uint32_t(kMaxIntegerDigits)) return false;
    scale *= 10;
  }
}

}  // namespace

std::string State::key() const {
  return std::string(reinterpret_cast<const char*>(frames.data()), frames.size() * sizeof(Frame));
}

State Automaton::initial() const {
  Frame root;
  root.kind = kRoot;
  root.node = g_.root();
  root.phase = kRootStart;
  return State{{root}};
}

bool Automaton::push(State& s, Frame f) const {
  if (s.frames.size() >= kMaxFrames) return false;
  s.frames.push_back(f);
  return true;
}

void Automaton::complete(State& s) const {
  s.frames.pop_back();
  Frame& p = s.frames.back();
  if (p.kind == kCall) {  // the arguments are written: the markup's suffix, or the call's end
    if (g_.call_suffix().empty()) return complete(s);
    p.phase = 2;
    p.pos = 0;
    return;
  }
  p.ws = 0;
  if (p.kind == kRoot) p.phase = kRootDone;
  else if (p.kind == kObject) p.phase = p.phase == kObjFreeKey ? kObjColon : kObjAfterValue;
  else p.phase = kArrAfterValue;
}

bool Automaton::can_end(const Frame& f) const {
  if (f.kind == kNumber) {
    const Node& n = g_.node(f.node);
    if (n.kind == NodeKind::Integer && n.bounded()) {
      if (f.phase != kNumZero && f.phase != kNumInt) return false;
      const int64_t v = f.sub ? -int64_t(f.seen) : int64_t(f.seen);
      return v >= n.minimum && v <= n.maximum;
    }
    return f.phase == kNumZero || f.phase == kNumInt || f.phase == kNumFrac || f.phase == kNumExpDigits;
  }
  if (f.kind == kLiteral) return f.pos == g_.node(f.node).literals[f.lit].size();
  return false;
}

bool Automaton::match_literal(Frame& f, const std::vector<std::string>& lits, uint8_t c, uint64_t skip) const {
  const std::string& current = lits[f.lit];
  for (std::size_t j = f.lit; j < lits.size(); ++j) {
    const std::string& l = lits[j];
    // Sorted: the literals sharing the matched prefix are contiguous.
    if (j != f.lit && l.compare(0, f.pos, current, 0, f.pos) != 0) break;
    if (j < 64 && (skip >> j & 1)) continue;
    if (l.size() > f.pos && uint8_t(l[f.pos]) == c) {
      f.lit = uint32_t(j);
      ++f.pos;
      return true;
    }
  }
  return false;
}

bool Automaton::open_value(State& s, uint32_t node, uint8_t c) const {
  const Node& n = g_.node(node);
  Frame f;
  f.node = node;
  switch (n.kind) {
    case NodeKind::Any: {
      uint32_t pick;
      if (c == '{' || c == '[') {
        // A container needs its own frame and one for a key or item.
        if (s.frames.size() + 2 >= kMaxFrames) return false;
        pick = c == '{' ? Grammar::kAnyObject : Grammar::kAnyArray;
      } else if (c == quote()) {
        pick = Grammar::kAnyString;
      } else if (c == '-' || is_digit(c)) {
        pick = Grammar::kAnyNumber;
      } else if (c == 't' || c == 'f' || c == 'n') {
        pick = Grammar::kAnyLiteral;
      } else {
        return false;
      }
      return open_value(s, pick, c);
    }
    case NodeKind::Object:
      if (c != '{') return false;
      f.kind = kObject;
      f.phase = kObjOpen;
      return push(s, f);
    case NodeKind::Array:
      if (c != '[') return false;
      f.kind = kArray;
      f.phase = kArrOpen;
      return push(s, f);
    case NodeKind::String:
      if (c != quote()) return false;
      f.kind = kString;
      return push(s, f);
    case NodeKind::Integer:
    case NodeKind::Number:
      if (c != '-' && !is_digit(c)) return false;
      f.kind = kNumber;
      f.phase = kNumStart;
      return push(s, f) && step(s, c) == Step::kConsumed;
    case NodeKind::Literals:
      f.kind = kLiteral;
      return push(s, f) && step(s, c) == Step::kConsumed;
    case NodeKind::Union:
      for (uint32_t alt : n.alternatives) {
        const Node& a = g_.node(alt);
        const bool starts = a.kind == NodeKind::Object   ? c == '{'
                            : a.kind == NodeKind::Array  ? c == '['
                            : a.kind == NodeKind::String ? c == quote()
                            : a.kind == NodeKind::Literals
                                ? std::any_of(a.literals.begin(), a.literals.end(),
                                              [&](const std::string& l) { return uint8_t(l[0]) == c; })
                                : c == '-' || is_digit(c);
        if (starts) return open_value(s, alt, c);
      }
      return false;
    case NodeKind::Call:
      f.kind = kCall;
      return push(s, f) && step(s, c) == Step::kConsumed;
  }
  return false;
}

Automaton::Step Automaton::step(State& s, uint8_t c) const {
  constexpr Step kOk = Step::kConsumed, kNo = Step::kRejected;
  Frame& f = s.frames.back();
  const Node& n = g_.node(f.node);
  // Whitespace in a gap between JSON tokens, up to kMaxWhitespace in a row.
  auto space = [&]() { return f.ws < kMaxWhitespace ? (++f.ws, kOk) : kNo; };
  switch (f.kind) {
    case kRoot:
      if (f.phase != kRootStart) return kNo;
      f.phase = kRootValue;
      return open_value(s, f.node, c) ? kOk : kNo;

    case kObject: {
      const bool required_done = (f.seen & n.required) == n.required;
      const bool key_left = n.free_keys || !all_seen(f.seen, n.properties.size());
      switch (f.phase) {
        case kObjOpen:
        case kObjComma:
          if (is_ws(c)) return space();
          if (c == '}' && f.phase == kObjOpen && required_done) return complete(s), kOk;
          // JSON's keys open with '"'; Gemma 4's with their first byte.
          if ((!gemma4() || n.free_keys) && c != quote()) return kNo;
          f.ws = 0;
          if (n.free_keys) {
            f.phase = kObjFreeKey;
            Frame key;
            key.kind = kString;
            key.node = Grammar::kAnyString;
            return push(s, key) ? kOk : kNo;
          }
          if (n.keys.empty()) return kNo;
          f.phase = kObjKey;
          f.lit = 0;
          f.pos = 0;
          [[fallthrough]];
        case kObjKey:
          if (!match_literal(f, n.keys, c, f.seen)) return kNo;
          if (f.pos == n.keys[f.lit].size()) {  // the closing quote (Gemma 4: ':'): keys are never prefixes of others
            f.count = f.lit;
            f.seen |= uint64_t(1) << f.lit;
            f.phase = gemma4() ? kObjBeforeValue : kObjColon;
            f.lit = f.pos = 0;
          }
          return kOk;
        case kObjColon:
          if (is_ws(c)) return space();
          if (c != ':') return kNo;
          f.phase = kObjBeforeValue;
          f.ws = 0;
          return kOk;
        case kObjBeforeValue: {
          if (is_ws(c)) return space();
          const uint32_t value = n.free_keys ? Grammar::kAnyValue : n.properties[f.count].value;
          f.phase = kObjValue;
          f.ws = 0;
          return open_value(s, value, c) ? kOk : kNo;
        }
        case kObjAfterValue:
          if (is_ws(c)) return space();
          if (c == ',' && key_left) {
            f.phase = kObjComma;
            f.ws = 0;
            return kOk;
          }
          if (c == '}' && required_done) return complete(s), kOk;
          return kNo;
        default:
          return kNo;
      }
    }

    case kArray:
      switch (f.phase) {
        case kArrOpen:
        case kArrComma:
          if (is_ws(c)) return space();
          if (c == ']' && f.phase == kArrOpen && n.min_items == 0) return complete(s), kOk;
          if (n.max_items == 0) return kNo;
          f.phase = kArrValue;
          f.ws = 0;
          f.count = bump(f.count, n.min_items, n.max_items);
          return open_value(s, n.items, c) ? kOk : kNo;
        case kArrAfterValue:
          if (is_ws(c)) return space();
          if (c == ',' && (n.max_items == kUnbounded || f.count < n.max_items)) {
            f.phase = kArrComma;
            f.ws = 0;
            return kOk;
          }
          if (c == ']' && f.count >= n.min_items) return complete(s), kOk;
          return kNo;
        default:
          return kNo;
      }

    case kString: {
      if (f.utf8 > 0) {
        uint8_t lo = 0x80, hi = 0xBF;
        if (f.sub == kCont_A0_BF) lo = 0xA0;
        else if (f.sub == kCont_80_9F) hi = 0x9F;
        else if (f.sub == kCont_90_BF) lo = 0x90;
        else if (f.sub == kCont_80_8F) hi = 0x8F;
        if (c < lo || c > hi) return kNo;
        --f.utf8;
        f.sub = kStrPlain;
        f.pos = 0;
        return kOk;
      }
      if (f.sub == kStrEscape) {
        if (c == 'u') return f.sub = kStrHex1, kOk;
        if (c != '"' && c != '\\' && c != '/' && c != 'b' && c != 'f' && c != 'n' && c != 'r' && c != 't') return kNo;
        f.sub = kStrPlain;
        return kOk;
      }
      if (f.sub >= kStrHex1 && f.sub <= kStrHex4) {
        // No \uD800-\uDFFF: a lone surrogate is not text, and pairs are
        // written as the UTF-8 character instead.
        if (!is_hex(c) || (f.sub == kStrHex1 && (c == 'd' || c == 'D'))) return kNo;
        f.sub = f.sub == kStrHex4 ? uint8_t(kStrPlain) : uint8_t(f.sub + 1);
        return kOk;
      }
      if (c == quote()) return f.count >= n.min_length ? (complete(s), kOk) : kNo;
      // Gemma 4: no escapes; tab, newline and carriage return are text.
      if (c < 0x20 && !(gemma4() && (c == '\t' || c == '\n' || c == '\r'))) return kNo;
      if (const std::string& stop = g_.string_stop(); !stop.empty()) {
        const uint32_t matched = uint8_t(stop[f.pos]) == c ? f.pos + 1 : uint8_t(stop[0]) == c ? 1 : 0;
        if (matched == stop.size()) return kNo;
        f.pos = matched;
      }
      if (n.max_length != kUnbounded && f.count >= n.max_length) return kNo;
      if (c >= 0x80) {
        if (c >= 0xC2 && c <= 0xDF) f.utf8 = 1;
        else if (c == 0xE0) f.utf8 = 2, f.sub = kCont_A0_BF;
        else if (c == 0xED) f.utf8 = 2, f.sub = kCont_80_9F;
        else if (c >= 0xE1 && c <= 0xEF) f.utf8 = 2;
        else if (c == 0xF0) f.utf8 = 3, f.sub = kCont_90_BF;
        else if (c == 0xF4) f.utf8 = 3, f.sub = kCont_80_8F;
        else if (c >= 0xF1 && c <= 0xF3) f.utf8 = 3;
        else return kNo;
      } else if (c == '\\' && !gemma4()) {
        f.sub = kStrEscape;
      }
      f.count = bump(f.count, n.min_length, n.max_length);
      return kOk;
    }

    case kNumber: {
      const bool integer = n.kind == NodeKind::Integer;
      const bool digit = is_digit(c);
      const bool exp = !integer && (c == 'e' || c == 'E');
      auto pop = [&]() { return can_end(f) ? (complete(s), Step::kPopped) : kNo; };
      // Bounded integers keep their sign (sub) and magnitude (seen), and
      // take a digit only if some value within the bounds can still follow.
      const bool bounded = integer && n.bounded();
      auto reachable = [&](int64_t m, uint32_t digits, bool extend) {
        return !bounded || integer_reachable(f.sub != 0, m, digits, extend, n.minimum, n.maximum);
      };
      switch (f.phase) {
        case kNumStart:
          if (c == '-') {
            if (bounded && n.minimum > -1) return kNo;
            f.sub = 1;
            return f.phase = kNumMinus, kOk;
          }
          [[fallthrough]];
        case kNumMinus:
          if (c == '0') return reachable(0, 1, false) ? (f.phase = kNumZero, kOk) : kNo;
          if (!digit || !reachable(c - '0', 1, true)) return kNo;
          f.phase = kNumInt;
          f.count = 1;
          if (bounded) f.seen = uint64_t(c - '0');
          return kOk;
        case kNumZero:
        case kNumInt:
          if (digit && f.phase == kNumInt && f.count < uint32_t(kMaxIntegerDigits) &&
              reachable(int64_t(f.seen) * 10 + (c - '0'), f.count + 1, true)) {
            if (bounded) f.seen = f.seen * 10 + uint64_t(c - '0');
            return ++f.count, kOk;
          }
          if (c == '.' && !integer) return f.phase = kNumDot, kOk;
          if (exp) return f.phase = kNumExp, kOk;
          return pop();
        case kNumDot:
          if (!digit) return kNo;
          f.phase = kNumFrac;
          f.count = 1;
          return kOk;
        case kNumFrac:
          if (digit && f.count < uint32_t(kMaxFractionDigits)) return ++f.count, kOk;
          if (exp) return f.phase = kNumExp, kOk;
          return pop();
        case kNumExp:
          if (c == '+' || c == '-') return f.phase = kNumExpSign, kOk;
          [[fallthrough]];
        case kNumExpSign:
          if (!digit) return kNo;
          f.phase = kNumExpDigits;
          f.count = 1;
          return kOk;
        case kNumExpDigits:
          if (digit && f.count < uint32_t(g_.for_calls() ? kMaxCallExponentDigits : kMaxExponentDigits)) return ++f.count, kOk;
          return pop();
        default:
          return kNo;
      }
    }

    case kLiteral:
      if (match_literal(f, n.literals, c, 0)) {
        if (f.pos == n.literals[f.lit].size() && !extended(n.literals, f.lit)) complete(s);
        return kOk;
      }
      return can_end(f) ? (complete(s), Step::kPopped) : kNo;

    case kCall:
      // The tool's prefix, then (once it is whole and the byte does not
      // extend it into a longer one) its arguments.
      if (f.phase == 0) {
        if (match_literal(f, n.literals, c, 0)) return kOk;
        if (f.pos != n.literals[f.lit].size()) return kNo;
        f.phase = 1;
        f.pos = 0;
        return open_value(s, n.alternatives[f.lit], c) ? kOk : kNo;
      }
      if (f.phase == 2) {  // the suffix
        const std::string& suffix = g_.call_suffix();
        if (uint8_t(suffix[f.pos]) != c) return kNo;
        if (++f.pos == suffix.size()) complete(s);
        return kOk;
      }
      return kNo;
  }
  return kNo;
}

bool Automaton::feed(State& s, uint8_t byte) const {
  for (;;) {
    if (s.frames.empty()) return false;
    const Step r = step(s, byte);
    if (r != Step::kPopped) return r == Step::kConsumed;
  }
}

bool Automaton::feed(State& s, std::string_view bytes) const {
  for (char c : bytes)
    if (!feed(s, uint8_t(c))) return false;
  return true;
}

bool Automaton::can_finish(const State& s) const {
  if (s.frames.size() == 1) return s.frames[0].phase == kRootDone;
  return s.frames.size() == 2 && s.frames[0].phase == kRootValue && can_end(s.frames[1]);
}

std::optional<uint32_t> Automaton::string_room(const State& s) const {
  const Frame& f = s.frames.back();
  if (f.kind != kString || f.sub != kStrPlain || f.utf8 != 0) return std::nullopt;
  // Plain text can complete the string stop where the rest of it is plain.
  if (const std::string& stop = g_.string_stop(); f.pos > 0) {
    const uint8_t start = uint8_t(stop[0]);
    if (std::all_of(stop.begin() + f.pos, stop.end(), [&](char c) { return plain_byte(uint8_t(c), start); }))
      return std::nullopt;
  }
  const uint32_t max = g_.node(f.node).max_length;
  return max == kUnbounded ? kUnbounded : max - std::min(f.count, max);
}

bool Automaton::finished(const State& s) const { return s.frames.size() == 1 && s.frames[0].phase == kRootDone; }

}  // namespace rowlm::constrain
