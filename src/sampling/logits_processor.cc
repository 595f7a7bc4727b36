#include "sampling/logits_processor.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"

namespace rowlm::sampling {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

float max_value(std::span<const float> v) {
  float m = kNegInf;
  for (float x : v) m = std::max(m, x);
  return m;
}

void check_row(std::span<const float> logits) {
  ROWLM_CHECK(!logits.empty(), "empty logits row");
  bool any_finite = false;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const float x = logits[i];
    if (std::isnan(x) || x == std::numeric_limits<float>::infinity())
      throw Error("logits row holds " + std::string(std::isnan(x) ? "NaN" : "+inf") + " at token " +
                  std::to_string(i));
    any_finite |= std::isfinite(x);
  }
  if (!any_finite) throw Error("logits row has no finite value");
}

// (value desc, index asc): the order in which filters consider tokens.
struct MoreLikely {
  std::span<const float> v;
  bool operator()(int32_t a, int32_t b) const { return v[a] > v[b] || (v[a] == v[b] && a < b); }
};

void remove_below(std::span<float> logits, float threshold) {
  for (float& x : logits)
    if (x < threshold) x = kNegInf;
}

}  // namespace

void apply_logit_bias(std::span<float> logits, const SamplingParams& params) {
  for (const auto& [id, bias] : params.logit_bias) {
    ROWLM_CHECK(id >= 0 && std::size_t(id) < logits.size(), "logit_bias id outside the row");
    logits[id] += bias;
  }
}

void apply_repetition_penalty(std::span<float> logits, const TokenHistory& history, float penalty) {
  if (penalty == 1.0f) return;
  auto penalize = [&](int32_t id) {
    ROWLM_CHECK(id >= 0 && std::size_t(id) < logits.size(), "token id outside the logits row");
    float& x = logits[id];
    x = x > 0 ? x / penalty : x * penalty;
  };
  for (int32_t id : history.prompt_ids()) penalize(id);
  for (const auto& [id, count] : history.generated_counts())
    if (!history.in_prompt(id)) penalize(id);  // each seen id once
}

void apply_presence_frequency(std::span<float> logits, const TokenHistory& history, float presence,
                              float frequency) {
  if (presence == 0.0f && frequency == 0.0f) return;
  for (const auto& [id, count] : history.generated_counts()) {
    ROWLM_CHECK(id >= 0 && std::size_t(id) < logits.size(), "token id outside the logits row");
    logits[id] -= presence + frequency * float(count);
  }
}

void apply_temperature(std::span<float> logits, float temperature) {
  ROWLM_CHECK(temperature > 0, "apply_temperature needs a positive temperature");
  const float m = max_value(logits);
  for (float& x : logits) x = (x - m) / temperature;
}

void keep_top_k(std::span<float> logits, int32_t k) {
  if (k <= 0 || std::size_t(k) >= logits.size()) return;
  std::vector<float> sorted(logits.begin(), logits.end());
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<float>());
  remove_below(logits, sorted[k - 1]);
}

void keep_top_p(std::span<float> logits, float p) {
  if (p >= 1.0f) return;
  std::vector<int32_t> ids;
  ids.reserve(logits.size());
  for (std::size_t i = 0; i < logits.size(); ++i)
    if (logits[i] != kNegInf) ids.push_back(int32_t(i));
  const double m = max_value(logits);
  double total = 0;
  for (int32_t i : ids) total += std::exp(double(logits[i]) - m);
  const double target = double(p) * total;
  // The nucleus is usually small: sort a growing head instead of the row.
  const MoreLikely order{logits};
  std::size_t head = std::min<std::size_t>(1024, ids.size());
  while (true) {
    std::partial_sort(ids.begin(), ids.begin() + head, ids.end(), order);
    double mass = 0;
    for (std::size_t j = 0; j < head; ++j) {
      mass += std::exp(double(logits[ids[j]]) - m);
      if (mass >= target) return remove_below(logits, logits[ids[j]]);
    }
    if (head == ids.size()) return;  // rounding left the target just out of reach: keep all
    head = std::min(head * 4, ids.size());
  }
}

void keep_min_p(std::span<float> logits, float min_p) {
  if (min_p <= 0.0f) return;
  const double m = max_value(logits);
  for (float& x : logits)
    if (std::exp(double(x) - m) < double(min_p)) x = kNegInf;
}

void process_logits(std::span<float> logits, const SamplingParams& params, const TokenHistory& history) {
  check_row(logits);
  apply_logit_bias(logits, params);
  apply_repetition_penalty(logits, history, params.repetition_penalty);
  apply_presence_frequency(logits, history, params.presence_penalty, params.frequency_penalty);
  if (params.greedy()) return;
  apply_temperature(logits, params.temperature);
  keep_top_k(logits, params.top_k);
  keep_top_p(logits, params.top_p);
  keep_min_p(logits, params.min_p);
}

int32_t argmax(std::span<const float> values) {
  ROWLM_CHECK(!values.empty(), "argmax of an empty row");
  int32_t best = 0;
  for (std::size_t i = 1; i < values.size(); ++i)
    if (values[i] > values[best]) best = int32_t(i);
  return best;
}

void softmax(std::span<const float> logits, std::span<float> probs) {
  ROWLM_CHECK(probs.size() == logits.size(), "softmax: output size differs from input size");
  const double m = max_value(logits);
  ROWLM_CHECK(std::isfinite(m), "softmax of a row with no finite value");
  double total = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const float e = float(std::exp(double(logits[i]) - m));
    probs[i] = e;
    total += e;
  }
  const double inv = 1.0 / total;
  for (float& q : probs) q = float(q * inv);
}

}  // namespace rowlm::sampling
