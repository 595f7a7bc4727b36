#include "sampling/sampler.h"

#include <random>
#include <string>

#include "core/error.h"
#include "sampling/logits_processor.h"

namespace rowlm::sampling {

namespace {

uint64_t resolve_seed(const std::optional<uint64_t>& seed) {
  if (seed) return *seed;
  std::random_device device;  // the one non-deterministic input, drawn once per request
  return uint64_t(device()) << 32 | device();
}

}  // namespace

int32_t draw_token(std::span<const float> probs, double u) {
  ROWLM_CHECK(!probs.empty(), "draw_token from an empty distribution");
  ROWLM_CHECK(u >= 0 && u < 1, "draw_token needs u in [0, 1)");
  double total = 0;
  for (float q : probs) total += q;
  ROWLM_CHECK(total > 0, "draw_token from a distribution with no mass");
  const double target = u * total;
  double cumulative = 0;
  int32_t last_positive = -1;
  for (std::size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0) continue;
    cumulative += probs[i];
    last_positive = int32_t(i);
    if (cumulative > target) return last_positive;
  }
  return last_positive;  // u * total rounded up to the full sum
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

std::vector<float> Sampler::processed(std::span<const float> logits) const {
  if (int64_t(logits.size()) != vocab_size_)
    throw Error("logits row has " + std::to_string(logits.size()) + " entries, the vocabulary " +
                std::to_string(vocab_size_));
  std::vector<float> row(logits.begin(), logits.end());
  process_logits(row, params_, history_);
  return row;
}

void Sampler::next_token_probs(std::span<const float> logits, std::span<float> probs) const {
  ROWLM_CHECK(int64_t(probs.size()) == vocab_size_, "next_token_probs: output is not vocab-sized");
  const std::vector<float> row = processed(logits);
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
  if (params_.greedy()) {
    token = argmax(processed(logits));
  } else {
    const std::vector<float> probs = next_token_probs(logits);
    token = draw_token(probs, uniform01(seed_, uint64_t(step()), stream));
  }
  return chosen(logits, token);
}

SampledToken Sampler::chosen(std::span<const float> logits, int32_t token) const {
  ROWLM_CHECK(token >= 0 && token < vocab_size_, "chosen token outside the vocabulary");
  SampledToken out{token, std::nullopt};
  if (params_.logprobs) out.logprobs = raw_logprobs(logits, token, *params_.logprobs);
  return out;
}

void Sampler::accept(int32_t token) {
  ROWLM_CHECK(token >= 0 && token < vocab_size_, "accepted token outside the vocabulary");
  history_.push(token);
}

void Sampler::rollback(std::size_t n) {
  ROWLM_CHECK(n <= history_.generated().size(), "rollback past the first generated token");
  for (std::size_t i = 0; i < n; ++i) history_.pop();
}

}  // namespace rowlm::sampling
