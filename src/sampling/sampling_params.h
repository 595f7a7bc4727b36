#pragma once
// Per-request sampling parameters, with the ranges they are checked against.
// Field names follow OpenAI's / vLLM's request schema so the server and the
// batch CLI map them one to one.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace rowlm::sampling {

// The most alternatives a request may ask for per position (OpenAI's
// top_logprobs limit, and vLLM's default max_logprobs).
inline constexpr int32_t kMaxTopLogprobs = 20;

// A parameter out of range: field() names it ("temperature", "stop[1]");
// what() says why.
class InvalidParameter : public Error {
 public:
  InvalidParameter(std::string field, const std::string& message) : Error(message), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

struct SamplingParams {
  // Softmax temperature; 0 means greedy (argmax, ties to the lowest id).
  float temperature = 1.0f;
  // Keep the k most likely tokens; 0 (or -1, vLLM's spelling) keeps all.
  int32_t top_k = 0;
  // Nucleus: keep the most likely tokens whose mass reaches top_p; in (0, 1].
  float top_p = 1.0f;
  // Keep tokens at least min_p times as likely as the most likely; in [0, 1].
  float min_p = 0.0f;
  // HF/CTRL repetition penalty over every id seen (prompt and generated):
  // positive logits are divided by it, negative ones multiplied. 1 = off.
  float repetition_penalty = 1.0f;
  // OpenAI penalties over generated ids: logit -= presence * [count > 0]
  // + frequency * count. Each in [-2, 2].
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // Added to the logit of each id before anything else; values in [-100, 100].
  std::map<int32_t, float> logit_bias;
  // Keys the counter-based generator. Unset: the sampler draws one from the
  // operating system once, and reports it.
  std::optional<uint64_t> seed;
  // Most tokens to generate; unset: until a stop or the end of the context.
  std::optional<int32_t> max_tokens;
  // Generation ends when one of these ids is sampled (in addition to the
  // model's own end-of-sequence ids, which the engine adds).
  std::vector<int32_t> stop_token_ids;
  // Generation ends when the decoded text contains one of these; the stop
  // string itself is never part of the output.
  std::vector<std::string> stop;
  // Unset: no log-probabilities. n >= 0: the chosen token's log-probability
  // plus the n most likely alternatives, n <= kMaxTopLogprobs.
  std::optional<int32_t> logprobs;

  bool greedy() const { return temperature == 0.0f; }

  // Throws InvalidParameter for the first field out of range. vocab_size is
  // the model's; ids in logit_bias and stop_token_ids must lie below it.
  void validate(int64_t vocab_size) const;
};

}  // namespace rowlm::sampling
