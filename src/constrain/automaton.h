#pragma once
// The byte automaton of a Grammar: a stack of frames, one per JSON value
// being written (plus the document's root), advanced one byte at a time.
// It accepts exactly the compact-or-spaced JSON texts of values the grammar
// admits (or their Gemma 4 form, grammar.h's Syntax; or a tool call's text),
// in valid UTF-8 (no surrogate escapes), and every state it reaches
// can still be completed: a rejected byte is the only dead end, so a token
// whose bytes all pass leaves the output completable.
//
// A State is a small value (frames are 32 bytes of plain data): copying one
// is how a walk tries a byte without losing where it was. key() is its
// identity for caching (two states with the same key accept the same bytes).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "constrain/grammar.h"

namespace rowlm::constrain {

// Frames of the deepest state; a value of type Any nested deeper is written
// as a scalar only.
inline constexpr std::size_t kMaxFrames = 32;

struct Frame {
  uint64_t seen = 0;   // object: a bit per property already written
  uint32_t node = 0;   // grammar node
  uint32_t count = 0;  // string: code points; array: items; number: digits; object: the current property
  uint32_t lit = 0;    // literal or key: the first candidate still matching
  uint32_t pos = 0;    // literal or key: bytes matched
  uint8_t kind = 0;    // FrameKind
  uint8_t phase = 0;
  uint8_t ws = 0;      // whitespace characters in the current gap
  uint8_t sub = 0;     // string: escape progress or the next continuation byte's range
  uint8_t utf8 = 0;    // string: continuation bytes still due
  uint8_t pad[3] = {};
};
static_assert(sizeof(Frame) == 32);

struct State {
  std::vector<Frame> frames;
  // The bytes of the frames: equal keys, equal futures.
  std::string key() const;
};

class Automaton {
 public:
  // `grammar` outlives the automaton.
  explicit Automaton(const Grammar& grammar) : g_(grammar) {}

  // The state before any byte.
  State initial() const;
  // Advances `s` by one byte; false (s then unspecified) if the byte cannot
  // continue any text the grammar admits.
  bool feed(State& s, uint8_t byte) const;
  // Advances by every byte of `bytes` (false at the first rejected one).
  bool feed(State& s, std::string_view bytes) const;
  // The text so far is a complete value (end of output allowed here).
  bool can_finish(const State& s) const;
  // Nothing but the end of output can follow.
  bool finished(const State& s) const;
  // Inside a string's text, between characters: the most characters the
  // string may still take (kUnbounded: no limit). Nullopt anywhere else
  // (and in a Gemma 4 string whose text ends in the quote token's first
  // three bytes). From such a state, bytes of plain text (no '"', '\\' or
  // control character; whole UTF-8 characters) are accepted exactly when
  // their characters fit.
  std::optional<uint32_t> string_room(const State& s) const;

  const Grammar& grammar() const { return g_; }

 private:
  enum class Step { kConsumed, kRejected, kPopped };
  Step step(State& s, uint8_t c) const;
  bool open_value(State& s, uint32_t node, uint8_t c) const;
  bool push(State& s, Frame f) const;
  void complete(State& s) const;
  bool can_end(const Frame& f) const;
  bool match_literal(Frame& f, const std::vector<std::string>& lits, uint8_t c, uint64_t skip) const;
  bool gemma4() const { return g_.syntax() == Syntax::kGemma4; }
  // The byte that opens and closes strings.
  uint8_t quote() const { return gemma4() ? kQuoteByte : uint8_t('"'); }

  const Grammar& g_;
};

}  // namespace rowlm::constrain
