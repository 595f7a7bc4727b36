#include "sampling/logits_processor.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"

namespace rowlm::sampling {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Eight independent running maxima, so the loop is not one long dependency
// chain (a 262k-entry row is scanned several times per token).
float max_value(std::span<const float> v) {
  float lane[8];
  std::fill(lane, lane + 8, kNegInf);
  std::size_t i = 0;
  for (; i + 8 <= v.size(); i += 8)
    for (int j = 0; j < 8; ++j) lane[j] = v[i + j] > lane[j] ? v[i + j] : lane[j];
  float m = kNegInf;
  for (; i < v.size(); ++i) m = v[i] > m ? v[i] : m;
  for (float x : lane) m = x > m ? x : m;
  return m;
}

void check_row(std::span<const float> logits) {
  ROWLM_CHECK(!logits.empty(), "empty logits row");
  // One branch-free pass on the bits (vectorizes); the slow search for the
  // culprit runs only on failure. -inf is allowed: it marks removed tokens.
  constexpr uint32_t kInfBits = 0x7f800000u;
  bool bad = false, any_finite = false;
  for (float x : logits) {
    const uint32_t magnitude = std::bit_cast<uint32_t>(x) & 0x7fffffffu;
    bad |= (magnitude > kInfBits) | (std::bit_cast<uint32_t>(x) == kInfBits);  // NaN, +inf
    any_finite |= magnitude < kInfBits;
  }
  if (bad) {
    for (std::size_t i = 0; i < logits.size(); ++i)
      if (std::isnan(logits[i]) || (logits[i] > 0 && std::isinf(logits[i])))
        throw Error("logits row holds " + std::string(std::isnan(logits[i]) ? "NaN" : "+inf") +
                    " at token " + std::to_string(i));
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
  // The k-th largest value: a min-heap of the k largest seen, which most
  // entries of a long row fail to enter after one comparison.
  std::vector<float> heap(logits.begin(), logits.begin() + k);
  std::make_heap(heap.begin(), heap.end(), std::greater<float>());
  for (std::size_t i = std::size_t(k); i < logits.size(); ++i) {
    if (logits[i] <= heap.front()) continue;
    std::pop_heap(heap.begin(), heap.end(), std::greater<float>());
    heap.back() = logits[i];
    std::push_heap(heap.begin(), heap.end(), std::greater<float>());
  }
  remove_below(logits, heap.front());
}

// Rows shorter than this sort their candidates directly; a mass histogram
// pays off only on long rows.
constexpr std::size_t kBucketedTopPMinSize = 4096;

// Order-preserving map of a float to an unsigned key (larger value, larger key).
uint32_t sortable_key(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

void keep_top_p(std::span<float> logits, float p) {
  if (p >= 1.0f) return;
  const float m = max_value(logits);
  std::vector<int32_t> ids;  // the candidates for the boundary, sorted below
  double above = 0;          // mass of the tokens known to be more likely than all of ids
  double total = 0;
  if (logits.size() < kBucketedTopPMinSize) {
    for (std::size_t i = 0; i < logits.size(); ++i) {
      if (logits[i] == kNegInf) continue;
      ids.push_back(int32_t(i));
      total += std::exp(logits[i] - m);
    }
  } else {
    // One pass buckets every token's mass by the top 16 bits of its value's
    // sortable key (128 buckets per octave); walking the buckets from the
    // most likely finds the one holding the boundary, and only that bucket's
    // tokens are sorted. O(vocab), where sorting the row would not be.
    constexpr int kShift = 16;
    std::vector<double> bucket_mass(std::size_t(1) << (32 - kShift), 0.0);
    uint32_t lo = ~0u, hi = 0;
    for (float x : logits) {
      if (x == kNegInf) continue;
      const uint32_t b = sortable_key(x) >> kShift;
      const double w = std::exp(x - m);
      bucket_mass[b] += w;
      total += w;
      lo = std::min(lo, b), hi = std::max(hi, b);
    }
    const double target = double(p) * total;
    uint32_t boundary = hi;
    for (; boundary > lo && above + bucket_mass[boundary] < target; --boundary) above += bucket_mass[boundary];
    for (std::size_t i = 0; i < logits.size(); ++i)
      if (logits[i] != kNegInf && sortable_key(logits[i]) >> kShift == boundary) ids.push_back(int32_t(i));
  }
  const double target = double(p) * total;
  std::sort(ids.begin(), ids.end(), MoreLikely{logits});
  for (int32_t i : ids) {
    above += std::exp(logits[i] - m);
    if (above >= target) return remove_below(logits, logits[i]);
  }
  // Rounding left the target just out of reach: keep everything.
}

void keep_min_p(std::span<float> logits, float min_p) {
  if (min_p <= 0.0f) return;
  // p_i >= min_p * p_max  <=>  l_i - l_max >= log(min_p): no exponentials.
  const double m = max_value(logits), log_min_p = std::log(double(min_p));
  for (float& x : logits)
    if (double(x) - m < log_min_p) x = kNegInf;
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
  const float m = max_value(values);
  for (std::size_t i = 0; i < values.size(); ++i)
    if (values[i] == m) return int32_t(i);
  return 0;  // every value is NaN; rows are checked before they get here
}

bool greedy_leaves_row_unchanged(const SamplingParams& params) {
  return params.greedy() && params.logit_bias.empty() && params.repetition_penalty == 1.0f &&
         params.presence_penalty == 0.0f && params.frequency_penalty == 0.0f;
}

int32_t checked_argmax(std::span<const float> logits) {
  ROWLM_CHECK(!logits.empty(), "empty logits row");
  // One read of the row instead of a copy, a check and two argmax passes.
  // Vector lanes (GCC/Clang vector extensions; SSE2 on any x86-64, the
  // compiler's lowering elsewhere) each keep their largest value and its
  // first index, and the bits check_row tests; strict > keeps the first
  // index, so the lanes' merge below gives the lowest index among equals.
  using F4 = float __attribute__((vector_size(16)));
  using I4 = int32_t __attribute__((vector_size(16)));
  constexpr int kWidth = 4, kVectors = 4, kStep = kWidth * kVectors;
  constexpr int32_t kInfBits = 0x7f800000;
  F4 best[kVectors];
  I4 at[kVectors], index[kVectors], bad[kVectors], finite[kVectors];
  for (int v = 0; v < kVectors; ++v) {
    best[v] = F4{} + kNegInf;
    bad[v] = finite[v] = I4{};
    for (int l = 0; l < kWidth; ++l) index[v][l] = v * kWidth + l;
    at[v] = index[v];
  }
  const float* p = logits.data();
  const std::size_t n = logits.size();
  std::size_t i = 0;
  for (; i + kStep <= n; i += kStep) {
    for (int v = 0; v < kVectors; ++v) {
      F4 x;
      std::memcpy(&x, p + i + std::size_t(v * kWidth), sizeof x);
      const I4 bits = reinterpret_cast<I4>(x), magnitude = bits & 0x7fffffff;
      bad[v] |= (magnitude > kInfBits) | (bits == kInfBits);  // NaN, +inf
      finite[v] |= magnitude < kInfBits;
      const I4 larger = x > best[v];
      best[v] = reinterpret_cast<F4>((reinterpret_cast<I4>(x) & larger) | (reinterpret_cast<I4>(best[v]) & ~larger));
      at[v] = (index[v] & larger) | (at[v] & ~larger);
      index[v] += kStep;
    }
  }
  bool any_bad = false, any_finite = false;
  float m = kNegInf;
  int32_t token = 0;
  for (int v = 0; v < kVectors; ++v)
    for (int l = 0; l < kWidth; ++l) {
      any_bad |= bad[v][l] != 0;
      any_finite |= finite[v][l] != 0;
      if (best[v][l] > m || (best[v][l] == m && at[v][l] < token)) m = best[v][l], token = at[v][l];
    }
  for (; i < n; ++i) {  // the tail: later indices, so only a larger value wins
    const float x = p[i];
    any_bad |= std::isnan(x) || x == std::numeric_limits<float>::infinity();
    any_finite |= std::isfinite(x);
    if (x > m) m = x, token = int32_t(i);
  }
  if (any_bad || !any_finite) check_row(logits);  // throws, naming the culprit
  return token;
}

void softmax(std::span<const float> logits, std::span<float> probs) {
  ROWLM_CHECK(probs.size() == logits.size(), "softmax: output size differs from input size");
  const float m = max_value(logits);
  ROWLM_CHECK(std::isfinite(m), "softmax of a row with no finite value");
  double lane[8] = {};  // independent partial sums: no serial add chain
  std::size_t i = 0;
  for (; i + 8 <= logits.size(); i += 8) {
    for (int j = 0; j < 8; ++j) {
      const float x = logits[i + j];
      const float e = x == kNegInf ? 0.0f : std::exp(x - m);
      probs[i + j] = e;
      lane[j] += e;
    }
  }
  double total = 0;
  for (; i < logits.size(); ++i) total += probs[i] = logits[i] == kNegInf ? 0.0f : std::exp(logits[i] - m);
  for (double x : lane) total += x;
  const float inv = float(1.0 / total);
  for (float& q : probs) q *= inv;
}

}  // namespace rowlm::sampling
