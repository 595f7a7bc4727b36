#include "constrain/json_constraint.h"

#include <algorithm>
#include <limits>
#include <string>

namespace rowlm::constrain {

JsonConstraint::JsonConstraint(std::shared_ptr<const Grammar> grammar, MaskCache& cache,
                               std::vector<int32_t> terminators)
    : grammar_(std::move(grammar)), automaton_(*grammar_), cache_(cache), terminators_(std::move(terminators)) {
  states_.push_back(automaton_.initial());
}

JsonConstraint::JsonConstraint(std::shared_ptr<const Grammar> grammar, MaskCache& cache, CallTokens calls)
    : grammar_(std::move(grammar)), automaton_(*grammar_), cache_(cache), terminators_{calls.close}, calls_(calls) {
  states_.emplace_back();  // dormant
}

bool JsonConstraint::is_terminator(int32_t token) const {
  return std::find(terminators_.begin(), terminators_.end(), token) != terminators_.end();
}

const TokenMask& JsonConstraint::current() {
  if (!mask_) mask_ = cache_.get(grammar_, automaton_, states_.back());
  return *mask_;
}

void JsonConstraint::mask(std::span<float> logits) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (dormant()) return;
  const TokenMask& m = current();
  ROWLM_CHECK(int64_t(logits.size()) == cache_.table().vocab_size(), "logits row and token table differ in size");
  const bool can_end = complete();
  if (m.count == 0 && !can_end) throw Error("structured output: no token can continue the JSON text");
  // Terminators have no bytes, so the mask never holds them: keep their
  // logits aside and put them back where the value is complete.
  std::vector<std::pair<int32_t, float>> kept;
  if (can_end)
    for (int32_t t : terminators_)
      if (t >= 0 && std::size_t(t) < logits.size()) kept.emplace_back(t, logits[std::size_t(t)]);
  // Whole words first: most are all allowed or all forbidden.
  const std::size_t n = logits.size();
  for (std::size_t w = 0; w < m.words.size(); ++w) {
    const uint64_t bits = m.words[w];
    if (bits == ~uint64_t(0)) continue;
    float* row = logits.data() + w * 64;
    const std::size_t len = std::min<std::size_t>(64, n - w * 64);
    if (bits == 0) {
      std::fill(row, row + len, kNegInf);
      continue;
    }
    for (std::size_t j = 0; j < len; ++j) row[j] = (bits >> j & 1) ? row[j] : kNegInf;
  }
  for (const auto& [t, v] : kept) logits[std::size_t(t)] = v;
}

sampling::Allowed JsonConstraint::allowed(int64_t vocab, std::span<uint64_t> words) {
  if (dormant()) return sampling::Allowed::All;
  const TokenMask& m = current();
  ROWLM_CHECK(vocab == cache_.table().vocab_size() && words.size() == m.words.size(),
              "allowed: the vocabulary and the token table differ in size");
  const bool can_end = complete();
  if (m.count == 0 && !can_end) return sampling::Allowed::None;
  std::copy(m.words.begin(), m.words.end(), words.begin());
  // Terminators have no bytes, so the mask never holds them (mask() keeps them where the value is complete).
  if (can_end)
    for (int32_t t : terminators_)
      if (t >= 0 && t < vocab) words[std::size_t(t) >> 6] |= uint64_t(1) << (t & 63);
  return sampling::Allowed::Some;
}

void JsonConstraint::accept(int32_t token) {
  State next = states_.back();
  if (dormant()) {
    if (token == calls_->open) next = automaton_.initial();
  } else if (is_terminator(token)) {
    if (!complete()) throw Error("structured output: token " + std::to_string(token) + " ends the output before the JSON value is complete");
    if (calls_) next.frames.clear();  // the call is closed
  } else {
    const bool known = token >= 0 && token < cache_.table().vocab_size();
    const std::string empty;
    const std::string& bytes = known ? cache_.table().bytes(token) : empty;
    if (bytes.empty() || !automaton_.feed(next, bytes))
      throw Error("structured output: token " + std::to_string(token) + " cannot continue the JSON text");
  }
  states_.push_back(std::move(next));
  mask_.reset();
}

void JsonConstraint::rollback(std::size_t n) {
  ROWLM_CHECK(n < states_.size(), "structured output: rollback past the first token");
  states_.resize(states_.size() - n);
  if (n) mask_.reset();
}

void JsonConstraint::begin_with(std::span<const int32_t> tokens) {
  for (int32_t t : tokens) accept(t);
  states_.erase(states_.begin(), states_.end() - 1);
}

MaskCache& ConstraintFactory::cache_for(const Grammar& grammar) {
  const Syntax syntax = grammar.syntax();
  const uint8_t stop_start = grammar.string_stop().empty() ? 0 : uint8_t(grammar.string_stop()[0]);
  std::lock_guard lock(mu_);
  std::unique_ptr<MaskCache>& cache = caches_[{syntax, stop_start}];
  if (!cache) {
    std::optional<int32_t> quote;
    if (syntax == Syntax::kGemma4) {
      quote = tokenizer_.token_to_id(kGemma4QuoteText);
      if (!quote || *quote >= vocab_size_)
        throw Error("tool calls: the tokenizer has no token " + std::string(kGemma4QuoteText) + " to quote strings with");
    }
    cache = std::make_unique<MaskCache>(std::make_shared<const TokenTable>(tokenizer_, vocab_size_, quote, stop_start));
  }
  return *cache;
}

std::unique_ptr<JsonConstraint> ConstraintFactory::make(std::shared_ptr<const Grammar> grammar,
                                                        std::vector<int32_t> terminators) {
  MaskCache& cache = cache_for(*grammar);
  return std::make_unique<JsonConstraint>(std::move(grammar), cache, std::move(terminators));
}

std::unique_ptr<JsonConstraint> ConstraintFactory::make(const ToolCallRules& rules) {
  auto id = [&](const std::string& text) {
    const std::optional<int32_t> t = tokenizer_.token_to_id(text);
    if (!t || *t >= vocab_size_) throw Error("tool calls: the tokenizer has no token " + text);
    return *t;
  };
  const CallTokens calls(id(rules.open), id(rules.close));
  auto c = std::make_unique<JsonConstraint>(rules.grammar, cache_for(*rules.grammar), calls);
  c->begin_with(rules.forced);
  return c;
}

}  // namespace rowlm::constrain
