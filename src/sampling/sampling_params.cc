#include "sampling/sampling_params.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "sampling/utf8_check.h"

namespace rowlm::sampling {

namespace {

[[noreturn]] void bad(const std::string& field, const std::string& why) {
  throw InvalidParameter(field, "sampling parameter '" + field + "' " + why);
}

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

void check_range(const char* field, float v, double lo, double hi) {
  if (!std::isfinite(v) || v < lo || v > hi)
    bad(field, "is " + num(v) + ", must be in [" + num(lo) + ", " + num(hi) + "]");
}

void check_id(const std::string& field, int32_t id, int64_t vocab_size) {
  if (id < 0 || id >= vocab_size)
    bad(field, "has token id " + std::to_string(id) + ", outside the vocabulary [0, " +
                   std::to_string(vocab_size) + ")");
}

}  // namespace

void SamplingParams::validate(int64_t vocab_size) const {
  ROWLM_CHECK(vocab_size > 0, "vocab_size must be positive");
  if (!std::isfinite(temperature) || temperature < 0)
    bad("temperature", "is " + num(temperature) + ", must be a finite number >= 0");
  if (top_k < -1) bad("top_k", "is " + std::to_string(top_k) + ", must be >= 0 (0 or -1: no limit)");
  if (!std::isfinite(top_p) || top_p <= 0 || top_p > 1)
    bad("top_p", "is " + num(top_p) + ", must be in (0, 1]");
  check_range("min_p", min_p, 0, 1);
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0)
    bad("repetition_penalty", "is " + num(repetition_penalty) + ", must be a finite number > 0");
  check_range("presence_penalty", presence_penalty, -2, 2);
  check_range("frequency_penalty", frequency_penalty, -2, 2);
  for (const auto& [id, bias] : logit_bias) {
    check_id("logit_bias", id, vocab_size);
    if (!std::isfinite(bias) || bias < -100 || bias > 100)
      bad("logit_bias", "for token " + std::to_string(id) + " is " + num(bias) +
                            ", must be in [-100, 100]");
  }
  if (max_tokens && *max_tokens < 1)
    bad("max_tokens", "is " + std::to_string(*max_tokens) + ", must be >= 1");
  for (int32_t id : stop_token_ids) check_id("stop_token_ids", id, vocab_size);
  for (std::size_t i = 0; i < stop.size(); ++i) {
    const std::string field = "stop[" + std::to_string(i) + "]";
    if (stop[i].empty()) bad(field, "is empty");
    if (!is_valid_utf8(stop[i])) bad(field, "is not valid UTF-8");
  }
  if (logprobs && (*logprobs < 0 || *logprobs > kMaxTopLogprobs))
    bad("logprobs", "is " + std::to_string(*logprobs) + ", must be in [0, " +
                        std::to_string(kMaxTopLogprobs) + "]");
}

}  // namespace rowlm::sampling
