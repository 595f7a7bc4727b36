#pragma once
// Structured outputs for one request: a sampling::TokenConstraint that
// allows exactly the tokens whose bytes continue a JSON text of the
// request's grammar, and the request's end-of-output tokens where that text
// is complete. What it allows depends only on the tokens it accepted, so
// rows of one batch never affect each other (batch invariance), and masks
// are shared through the MaskCache (a cache changes no result).
//
// ConstraintFactory is what an engine keeps: its tokenizer's TokenTable,
// built on the first constrained request, and one MaskCache.
//
// Threads: a JsonConstraint is used by one thread at a time (its
// Sampler's); ConstraintFactory::make may be called from any thread.

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "constrain/automaton.h"
#include "constrain/grammar.h"
#include "constrain/token_masks.h"
#include "sampling/token_constraint.h"
#include "tokenizer/tokenizer.h"

namespace rowlm::constrain {

class JsonConstraint final : public sampling::TokenConstraint {
 public:
  // `cache` outlives the constraint. `terminators` end the request (the
  // model's end-of-sequence ids, stop token ids): allowed exactly where the
  // text so far is a complete value, and then the only tokens allowed once
  // nothing else can follow.
  JsonConstraint(std::shared_ptr<const Grammar> grammar, MaskCache& cache, std::vector<int32_t> terminators);

  void mask(std::span<float> logits) override;
  void accept(int32_t token) override;
  void rollback(std::size_t n) override;

  // The text accepted so far is a complete value.
  bool complete() const { return automaton_.can_finish(states_.back()); }

 private:
  bool is_terminator(int32_t token) const;
  const TokenMask& current();

  std::shared_ptr<const Grammar> grammar_;
  Automaton automaton_;
  MaskCache& cache_;
  std::vector<int32_t> terminators_;
  std::vector<State> states_;              // [i]: after i accepted tokens
  std::shared_ptr<const TokenMask> mask_;  // of states_.back(), once fetched
};

class ConstraintFactory {
 public:
  // `tokenizer` outlives the factory; vocab_size is the model's.
  ConstraintFactory(const Tokenizer& tokenizer, int64_t vocab_size) : tokenizer_(tokenizer), vocab_size_(vocab_size) {}

  std::unique_ptr<JsonConstraint> make(std::shared_ptr<const Grammar> grammar, std::vector<int32_t> terminators);

 private:
  const Tokenizer& tokenizer_;
  const int64_t vocab_size_;
  std::once_flag built_;
  std::unique_ptr<MaskCache> cache_;
};

}  // namespace rowlm::constrain
