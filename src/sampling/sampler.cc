#include "sampling/sampler.h"

#include <algorithm>
#include <random>
#include <string>
#include <unordered_map>

#include "core/error.h"
#include "sampling/logits_processor.h"

namespace rowlm::sampling {

namespace {

uint64_t resolve_seed(const std::optional<uint64_t>& seed) {
  if (seed) return *seed;
  std::random_device device;  // the one non-deterministic input, drawn once per request
  return uint64_t(device()) << 32 | device();
}

void check_row_size(std::span<const float> logits, int64_t vocab_size) {
  if (int64_t(logits.size()) != vocab_size)
    throw Error("logits row has " + std::to_string(logits.size()) + " entries, the vocabulary " +
                std::to_string(vocab_size));
}

}  // namespace

// The inverse-CDF walk over masses grouped in kMassBlock-entry blocks whose
// sums are block_mass: whole blocks are passed on their sums, and only the
// block that holds the target is walked entry by entry (a row is 262k
// entries and a serial walk is slow).
int32_t walk_masses(std::span<const float> mass, std::span<const double> block_mass, double total, double u) {
  ROWLM_CHECK(total > 0, "draw_token from a distribution with no mass");
  const double target = u * total;
  double cumulative = 0;
  for (std::size_t b = 0; b < block_mass.size(); ++b) {
    if (cumulative + block_mass[b] <= target) {
      cumulative += block_mass[b];
      continue;
    }
    const std::size_t end = std::min(mass.size(), (b + 1) * kMassBlock);
    for (std::size_t i = b * kMassBlock; i < end; ++i) {
      if (mass[i] <= 0) continue;
      cumulative += mass[i];
      if (cumulative > target) return int32_t(i);
    }
  }
  // Rounding kept the sum at or below u * total: take the last possible token.
  for (std::size_t i = mass.size(); i-- > 0;)
    if (mass[i] > 0) return int32_t(i);
  return 0;  // unreachable: total > 0
}

int32_t draw_token(std::span<const float> probs, double u) {
  ROWLM_CHECK(!probs.empty(), "draw_token from an empty distribution");
  ROWLM_CHECK(u >= 0 && u < 1, "draw_token needs u in [0, 1)");
  const std::size_t blocks = (probs.size() + kMassBlock - 1) / kMassBlock;
  std::vector<double> block_mass(blocks, 0.0);
  double total = 0;
  for (std::size_t b = 0; b < blocks; ++b) {
    double lane[8] = {};  // independent adds
    const std::size_t end = std::min(probs.size(), (b + 1) * kMassBlock);
    for (std::size_t i = b * kMassBlock; i < end; ++i) lane[i % 8] += probs[i];
    for (double x : lane) block_mass[b] += x;
    total += block_mass[b];
  }
  return walk_masses(probs, block_mass, total, u);
}

Sampler::Sampler(SamplingParams params, int64_t vocab_size, std::span<const int32_t> prompt_ids)
    : params_(std::move(params)), vocab_size_(vocab_size), seed_(0), history_(prompt_ids) {
  params_.validate(vocab_size);
  for (int32_t id : history_.prompt_ids())
    if (id < 0 || id >= vocab_size)
      throw Error("prompt token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                  std::to_string(vocab_size) + ")");
  seed_ = resolve_seed(params_.seed);
}

std::span<const float> Sampler::processed(std::span<const float> logits) const {
  check_row_size(logits, vocab_size_);
  row_.assign(logits.begin(), logits.end());
  if (constraint_) constraint_->mask(row_);
  process_logits(row_, params_, history_);
  return row_;
}

void Sampler::next_token_probs(std::span<const float> logits, std::span<float> probs) const {
  ROWLM_CHECK(int64_t(probs.size()) == vocab_size_, "next_token_probs: output is not vocab-sized");
  const std::span<const float> row = processed(logits);
  if (params_.greedy()) {
    std::fill(probs.begin(), probs.end(), 0.0f);
    probs[argmax(row)] = 1.0f;
  } else {
    softmax(row, probs);
  }
}

std::vector<float> Sampler::next_token_probs(std::span<const float> logits) const {
  std::vector<float> probs(vocab_size_);
  next_token_probs(logits, probs);
  return probs;
}

SampledToken Sampler::sample(std::span<const float> logits, RandomStream stream) const {
  int32_t token;
  if (!constraint_ && greedy_leaves_row_unchanged(params_)) {
    check_row_size(logits, vocab_size_);
    token = checked_argmax(logits);  // no copy: nothing would change the row
  } else if (params_.greedy()) {
    token = argmax(processed(logits));
  } else {
    // Drawn from the unnormalized masses: normalizing first would change no
    // token's share, only cost a pass over the row.
    const std::span<const float> row = processed(logits);
    probs_.resize(vocab_size_);
    const double total = exp_masses(row, probs_, block_mass_, /*max=*/0.0f).total;
    token = walk_masses(probs_, block_mass_, total, uniform01(seed_, uint64_t(step()), stream));
  }
  return chosen(logits, token);
}

bool Sampler::argmax_is_enough() const {
  return !constraint_ && greedy_leaves_row_unchanged(params_) && !params_.logprobs;
}

SampledToken Sampler::sample_argmax(int32_t code) const {
  ROWLM_CHECK(argmax_is_enough(), "sample_argmax for a row that needs more than its argmax");
  const int32_t token = token_from_argmax_code(code);
  ROWLM_CHECK(token < vocab_size_, "argmax code outside the vocabulary");
  return {token, std::nullopt};
}

std::optional<RowSampling> Sampler::device_plan(std::vector<RowSamplingEdit>& edits, std::vector<uint64_t>& masks) {
  RowSampling r;
  if (constraint_) {
    const std::size_t words = std::size_t((vocab_size_ + 63) / 64), begin = masks.size();
    masks.resize(begin + words);
    const Allowed a = constraint_->allowed(vocab_size_, std::span(masks).subspan(begin, words));
    if (a == Allowed::None) {
      masks.resize(begin);
      return std::nullopt;
    }
    if (a == Allowed::All) masks.resize(begin);
    else r.mask_begin = int32_t(begin);
  }
  r.edits_begin = int32_t(edits.size());
  std::unordered_map<int32_t, std::size_t> at;  // id -> its edit
  auto edit = [&](int32_t id) -> RowSamplingEdit& {
    const auto [it, added] = at.try_emplace(id, edits.size());
    if (added) edits.push_back(RowSamplingEdit{id});
    return edits[it->second];
  };
  for (const auto& [id, bias] : params_.logit_bias) {
    RowSamplingEdit& e = edit(id);
    e.has_bias = 1;
    e.bias = bias;
  }
  if (params_.repetition_penalty != 1.0f) {
    for (int32_t id : history_.prompt_ids()) edit(id).repeated = 1;
    for (const auto& [id, count] : history_.generated_counts()) edit(id).repeated = 1;
  }
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f)
    for (const auto& [id, count] : history_.generated_counts()) edit(id).count = count;
  r.edits_end = int32_t(edits.size());
  r.repetition_penalty = params_.repetition_penalty;
  r.presence = params_.presence_penalty;
  r.frequency = params_.frequency_penalty;
  r.temperature = params_.temperature;
  r.top_k = params_.top_k;
  r.top_p = params_.top_p;
  if (params_.top_p < 1.0f) r.top_p_log_tail = top_p_log_tail(params_.top_p, vocab_size_);
  // Temperature leaves the row's max at 0 and top-k keeps it (logits_processor.h).
  if (params_.min_p > 0.0f) r.min_p_floor = min_p_floor(0.0f, params_.min_p);
  if (!params_.greedy()) r.u = uniform01(seed_, uint64_t(step()), RandomStream::kSample);
  r.logprobs = params_.logprobs ? *params_.logprobs : -1;
  return r;
}

SampledToken Sampler::sampled_on_device(int32_t token, const RowLogprobStats* stats) const {
  token_from_argmax_code(token);  // sample()'s error for a row it refuses
  ROWLM_CHECK(token < vocab_size_, "a token sampled on the device is outside the vocabulary");
  SampledToken out{token, std::nullopt};
  if (params_.logprobs) {
    ROWLM_CHECK(stats && stats->count == std::min<int64_t>(*params_.logprobs, vocab_size_),
                "a row sampled on the device came back without the logprobs it asked for");
    out.logprobs = raw_logprobs(*stats);
  }
  return out;
}

SampledToken Sampler::chosen(std::span<const float> logits, int32_t token) const {
  ROWLM_CHECK(token >= 0 && token < vocab_size_, "chosen token outside the vocabulary");
  SampledToken out{token, std::nullopt};
  if (params_.logprobs) out.logprobs = raw_logprobs(logits, token, *params_.logprobs);
  return out;
}

void Sampler::accept(int32_t token) {
  ROWLM_CHECK(token >= 0 && token < vocab_size_, "accepted token outside the vocabulary");
  if (constraint_) constraint_->accept(token);
  history_.push(token);
}

void Sampler::rollback(std::size_t n) {
  ROWLM_CHECK(n <= history_.generated().size(), "rollback past the first generated token");
  if (constraint_) constraint_->rollback(n);
  for (std::size_t i = 0; i < n; ++i) history_.pop();
}

}  // namespace rowlm::sampling
