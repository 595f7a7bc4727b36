#pragma once
// A model's reasoning ("thinking") split from its answer, whole or as it
// streams. Two markups:
//
//   kGemma4Channel  <|channel>thought\n ... <channel|>answer   (Gemma 4 with
//                   <|think|> in the system turn)
//   kThinkTags      <think>\n ... \n</think>\n\nanswer           (Qwen 3)
//
// A reply holds reasoning only when it begins with the opener (whitespace
// before it allowed), or when the prompt itself ended with the opener (then
// the reply starts inside the span, as some Qwen 3 templates make it). The
// span ends at the closer; whitespace right after the opener, before the
// closer and right after it is dropped. An unclosed span is all reasoning.
// Everything else is the answer, verbatim: a reply that does not start with
// the opener is all answer, whatever markup it holds later.
//
// Threads: a ReasoningStream is one reply's; use it from one thread.

#include <optional>
#include <string>
#include <string_view>

#include "tokenizer/chat_format.h"

namespace rowlm::tokenizer {

enum class ReasoningSyntax { kGemma4Channel, kThinkTags };

struct ReasoningMarkup {
  std::string_view open;   // what begins the span
  std::string_view close;  // what ends it
  // What the server writes to end the span when the reasoning budget is
  // spent, so that the answer begins.
  std::string_view forced_close;
};

ReasoningMarkup reasoning_markup(ReasoningSyntax syntax);

// The markup of the format's thinking mode; nullopt when it has none.
std::optional<ReasoningSyntax> reasoning_syntax_of(const ChatFormat& format);

// Whether a prompt ends inside a reasoning span (it ends with the opener,
// trailing whitespace aside): the reply then starts as reasoning.
bool prompt_opens_reasoning(ReasoningSyntax syntax, std::string_view prompt);

struct ReasoningSplit {
  std::string reasoning;
  std::string content;
};

// Streaming: push() each piece of generated text, in order, and get what of
// it is now known to be reasoning or answer; text that may still be the
// start of a marker is held until the next push() or finish(). The
// concatenated results of every push() and finish() equal
// split_reasoning(all the text), however the text was cut.
class ReasoningStream {
 public:
  ReasoningStream(ReasoningSyntax syntax, bool starts_inside);
  ReasoningSplit push(std::string_view text);
  ReasoningSplit finish();
  // Whether the text so far left a span open (reasoning began and has not
  // been closed): the answer has not begun.
  bool in_reasoning() const { return state_ == State::kReasoning || state_ == State::kReasoningStart; }

 private:
  enum class State { kStart, kReasoningStart, kReasoning, kContentStart, kContent };
  ReasoningMarkup markup_;
  State state_;
  std::string held_;  // text that may be the start of a marker (or of the opener, with leading space)
};

ReasoningSplit split_reasoning(ReasoningSyntax syntax, std::string_view text, bool starts_inside = false);

}  // namespace rowlm::tokenizer
