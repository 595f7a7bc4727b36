#pragma once
// Structured outputs for one request: a sampling::TokenConstraint that
// allows exactly the tokens whose bytes continue a JSON text of the
// request's grammar, and the request's end-of-output tokens where that text
// is complete. What it allows depends only on the tokens it accepted, so
// rows of one batch never affect each other (batch invariance), and masks
// are shared through the MaskCache (a cache changes no result).
//
// Tool calls (strict function tools): the same constraint, dormant (every
// token allowed) until the token that opens a call; then the call's text is
// held to a Grammar::for_tool_calls, and the token that closes the call,
// allowed exactly where it is complete, makes it dormant again.
//
// ConstraintFactory is what an engine keeps: its tokenizer's TokenTable,
// built on the first constrained request, and one MaskCache (and another
// pair for each tool-call markup: Gemma 4's quote token is a byte, and a
// markup's string stop changes which tokens are plain text).
//
// Threads: a JsonConstraint is used by one thread at a time (its
// Sampler's); ConstraintFactory::make may be called from any thread.

#include <cstdint>
#include <memory>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <span>
#include <string>
#include <vector>

#include "constrain/automaton.h"
#include "constrain/grammar.h"
#include "constrain/token_masks.h"
#include "sampling/token_constraint.h"
#include "tokenizer/tokenizer.h"

namespace rowlm::constrain {

// What a request's tool calls are held to (engine Request::tool_calls).
struct ToolCallRules {
  std::shared_ptr<const Grammar> grammar;  // Grammar::for_tool_calls
  std::string open, close;                 // the tokens that open and close a call ("<|tool_call>", "<tool_call|>")
  // Tokens the prompt already ends with, as if generated (tool_choice
  // forcing a call: "<|tool_call>call:"); the output continues them.
  std::vector<int32_t> forced;
};

// The tokens around a call.
struct CallTokens {
  explicit CallTokens(int32_t open_token, int32_t close_token) : open(open_token), close(close_token) {}
  int32_t open, close;
};

class JsonConstraint final : public sampling::TokenConstraint {
 public:
  // The whole output is one value. `cache` outlives the constraint.
  // `terminators` end the request (the model's end-of-sequence ids, stop
  // token ids): allowed exactly where the text so far is a complete value,
  // and then the only tokens allowed once nothing else can follow.
  JsonConstraint(std::shared_ptr<const Grammar> grammar, MaskCache& cache, std::vector<int32_t> terminators);
  // Tool calls in free text, as the header says; calls.close plays the
  // terminator's part inside a call.
  JsonConstraint(std::shared_ptr<const Grammar> grammar, MaskCache& cache, CallTokens calls);

  void mask(std::span<float> logits) override;
  // mask()'s set from the cached mask's words, without a row.
  sampling::Allowed allowed(int64_t vocab, std::span<uint64_t> words) override;
  void accept(int32_t token) override;
  void rollback(std::size_t n) override;

  // Accepts `tokens` for good: rollback() never goes back past them.
  void begin_with(std::span<const int32_t> tokens);

  // Outside a tool call (always false for a whole-output value).
  bool dormant() const { return states_.back().frames.empty(); }
  // The text accepted so far is a complete value (or no call is open).
  bool complete() const { return dormant() || automaton_.can_finish(states_.back()); }

 private:
  bool is_terminator(int32_t token) const;
  const TokenMask& current();

  std::shared_ptr<const Grammar> grammar_;
  Automaton automaton_;
  MaskCache& cache_;
  std::vector<int32_t> terminators_;
  std::optional<CallTokens> calls_;
  // [i]: after i accepted tokens; no frames: dormant.
  std::vector<State> states_;
  std::shared_ptr<const TokenMask> mask_;  // of states_.back(), once fetched
};

class ConstraintFactory {
 public:
  // `tokenizer` outlives the factory; vocab_size is the model's.
  ConstraintFactory(const Tokenizer& tokenizer, int64_t vocab_size) : tokenizer_(tokenizer), vocab_size_(vocab_size) {}

  std::unique_ptr<JsonConstraint> make(std::shared_ptr<const Grammar> grammar, std::vector<int32_t> terminators);
  // Throws rowlm::Error when the tokenizer lacks one of the rules' tokens
  // (or Gemma 4's quote token), or the forced tokens are not a valid start.
  std::unique_ptr<JsonConstraint> make(const ToolCallRules& rules);

 private:
  MaskCache& cache_for(const Grammar& grammar);

  const Tokenizer& tokenizer_;
  const int64_t vocab_size_;
  std::mutex mu_;
  // By the grammars' syntax and string stop's first byte: they decide the table.
  std::map<std::pair<Syntax, uint8_t>, std::unique_ptr<MaskCache>> caches_;
};

}  // namespace rowlm::constrain
