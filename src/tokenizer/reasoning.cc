#include "tokenizer/reasoning.h"

#include <algorithm>

namespace rowlm::tokenizer {

namespace {

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// The length of the longest tail of `text` that is a proper prefix of
// `marker` (text that may still grow into the marker).
std::size_t partial_marker_tail(std::string_view text, std::string_view marker) {
  std::size_t keep = std::min(marker.size() - 1, text.size());
  while (keep > 0 && !text.ends_with(marker.substr(0, keep))) --keep;
  return keep;
}

}  // namespace

ReasoningMarkup reasoning_markup(ReasoningSyntax syntax) {
  if (syntax == ReasoningSyntax::kGemma4Channel) return {"<|channel>thought", "<channel|>", "<channel|>"};
  return {"<think>", "</think>", "\n</think>\n\n"};
}

std::optional<ReasoningSyntax> reasoning_syntax_of(const ChatFormat& format) {
  if (!format.supports_thinking()) return std::nullopt;
  return format.family() == ChatFamily::kGemma4 ? ReasoningSyntax::kGemma4Channel : ReasoningSyntax::kThinkTags;
}

bool prompt_opens_reasoning(ReasoningSyntax syntax, std::string_view prompt) {
  while (!prompt.empty() && is_space(prompt.back())) prompt.remove_suffix(1);
  return prompt.ends_with(reasoning_markup(syntax).open);
}

ReasoningStream::ReasoningStream(ReasoningSyntax syntax, bool starts_inside)
    : markup_(reasoning_markup(syntax)), state_(starts_inside ? State::kReasoningStart : State::kStart) {}

ReasoningSplit ReasoningStream::push(std::string_view text) {
  ReasoningSplit out;
  held_ += text;
  while (true) {
    switch (state_) {
      case State::kStart: {
        // Leading whitespace, then the opener, or else it is all answer.
        std::size_t lead = 0;
        while (lead < held_.size() && is_space(held_[lead])) ++lead;
        const std::string_view rest = std::string_view(held_).substr(lead);
        if (rest.starts_with(markup_.open)) {
          held_.erase(0, lead + markup_.open.size());
          state_ = State::kReasoningStart;
          continue;
        }
        if (markup_.open.starts_with(rest)) return out;  // may still become the opener
        out.content += held_;
        held_.clear();
        state_ = State::kContent;
        return out;
      }
      case State::kReasoningStart:
      case State::kContentStart: {
        std::size_t lead = 0;
        while (lead < held_.size() && is_space(held_[lead])) ++lead;
        held_.erase(0, lead);
        if (held_.empty()) return out;
        state_ = state_ == State::kReasoningStart ? State::kReasoning : State::kContent;
        continue;
      }
      case State::kReasoning: {
        if (const std::size_t k = held_.find(markup_.close); k != std::string::npos) {
          std::size_t end = k;
          while (end > 0 && is_space(held_[end - 1])) --end;  // whitespace before the closer
          out.reasoning += held_.substr(0, end);
          held_.erase(0, k + markup_.close.size());
          state_ = State::kContentStart;
          continue;
        }
        // Hold what may start the closer, and the whitespace before it
        // (dropped if the closer follows).
        std::size_t keep = partial_marker_tail(held_, markup_.close);
        while (keep < held_.size() && is_space(held_[held_.size() - keep - 1])) ++keep;
        out.reasoning += held_.substr(0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return out;
      }
      case State::kContent:
        out.content += held_;
        held_.clear();
        return out;
    }
  }
}

ReasoningSplit ReasoningStream::finish() {
  ReasoningSplit out;
  // Held text never became a marker: it is what the state says it is.
  // (Whitespace held at the start of a span or of the answer is dropped.)
  if (state_ == State::kStart) out.content = std::move(held_);
  else if (state_ == State::kReasoning) out.reasoning = std::move(held_);
  held_.clear();
  return out;
}

ReasoningSplit split_reasoning(ReasoningSyntax syntax, std::string_view text, bool starts_inside) {
  ReasoningStream stream(syntax, starts_inside);
  ReasoningSplit out = stream.push(text);
  ReasoningSplit rest = stream.finish();
  out.reasoning += rest.reasoning;
  out.content += rest.content;
  return out;
}

}  // namespace rowlm::tokenizer
