#include "sampling/logits_processor.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "backend/argmax_code.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/row_argmax.h"
#include "core/error.h"
#include "core/isa.h"

namespace rowlm::sampling {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();


// The row's scan by the kernels, in kMassBlock blocks (`blocks`), combined.
cpu::RowScan scan(std::span<const float> v, std::vector<cpu::RowScan>& blocks) {
  return cpu::scan_row(row_kernels(), v, int64_t(kMassBlock), blocks);
}
cpu::RowScan scan(std::span<const float> v) {
  std::vector<cpu::RowScan> blocks;
  return scan(v, blocks);
}

float max_value(std::span<const float> v) { return scan(v).max; }

// The first index holding `max` (the row's largest value, from `blocks`);
// 0 when no entry equals it (a row of NaN).
int32_t first_index_of_max(std::span<const float> v, const std::vector<cpu::RowScan>& blocks, float max) {
  return int32_t(cpu::first_index_of(v, blocks, int64_t(kMassBlock), max));
}

void check_scanned(std::span<const float> logits, const cpu::RowScan& all) {
  // The culprit is searched for only on failure.
  if (all.bad || !all.any_finite) token_from_argmax_code(cpu::argmax_code(row_kernels(), logits));
}

// (value desc, index asc): the order in which filters consider tokens.
struct MoreLikely {
  std::span<const float> v;
  bool operator()(int32_t a, int32_t b) const { return v[a] > v[b] || (v[a] == v[b] && a < b); }
};

void remove_below(std::span<float> logits, float threshold) {
  row_kernels().remove_below(logits.data(), int64_t(logits.size()), threshold);
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
  row_kernels().shift_divide(logits.data(), int64_t(logits.size()), max_value(logits), temperature);
}

void keep_top_k(std::span<float> logits, int32_t k) {
  if (k <= 0 || std::size_t(k) >= logits.size()) return;
  // The k-th largest value: a min-heap of the k largest seen, which most
  // entries of a long row fail to enter after one comparison.
  // The kernels' vector search finds the next entry that enters.
  std::vector<float> heap(logits.begin(), logits.begin() + k);
  std::make_heap(heap.begin(), heap.end(), std::greater<float>());
  const int64_t n = int64_t(logits.size());
  for (int64_t i = k; (i += row_kernels().first_above(logits.data() + i, n - i, heap.front())) < n; ++i) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<float>());
    heap.back() = logits[std::size_t(i)];
    std::push_heap(heap.begin(), heap.end(), std::greater<float>());
  }
  remove_below(logits, heap.front());
}

// Order-preserving map of a float to an unsigned key (larger value, larger key).
uint32_t sortable_key(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

void keep_top_p(std::span<float> logits, float p) {
  if (p >= 1.0f) return;
  std::vector<float> mass(logits.size());
  std::vector<double> block_mass;
  const float max = exp_masses(logits, mass, block_mass).max;
  // Masses in fixed point (top_p_mass): their sums are exact, so any order
  // of summing, the GPU's included, gives the same kept set.
  uint64_t total = 0;
  for (float m : mass) total += top_p_mass(m);
  const uint64_t target = top_p_target(p, total);
  std::vector<int32_t> ids;  // the candidates for the boundary, sorted below
  uint64_t above = 0;        // mass of the tokens known to be more likely than all of ids
  const int64_t n = int64_t(logits.size());
  if (n < kTopPBucketedMinSize) {
    for (std::size_t i = 0; i < logits.size(); ++i)
      if (logits[i] != kNegInf) ids.push_back(int32_t(i));
  } else {
    // Only the tokens above top_p_floor can hold the boundary (found by the
    // kernels' vector search; a few hundred of a 262k row on a language
    // model's logits). One pass buckets each of those tokens' mass by the
    // top 16 bits of its value's sortable key (128 buckets per octave);
    // walking the buckets from the most likely finds the one holding the
    // boundary, and only that bucket's tokens are sorted. O(vocab), where
    // sorting the row would not be.
    const float floor = top_p_floor(p, n, total, max);
    auto for_each_above_floor = [&](auto&& f) {
      for (int64_t i = 0; (i += row_kernels().first_above(logits.data() + i, n - i, floor)) < n; ++i) f(i);
    };
    constexpr int kShift = 16;
    std::vector<uint64_t> bucket_mass(std::size_t(1) << (32 - kShift), 0);
    uint32_t lo = ~0u, hi = 0;
    for_each_above_floor([&](int64_t i) {
      const uint32_t b = sortable_key(logits[std::size_t(i)]) >> kShift;
      bucket_mass[b] += top_p_mass(mass[std::size_t(i)]);
      lo = std::min(lo, b), hi = std::max(hi, b);
    });
    uint32_t boundary = hi;
    for (; boundary > lo && above + bucket_mass[boundary] < target; --boundary) above += bucket_mass[boundary];
    for_each_above_floor([&](int64_t i) {
      if (sortable_key(logits[std::size_t(i)]) >> kShift == boundary) ids.push_back(int32_t(i));
    });
  }
  std::sort(ids.begin(), ids.end(), MoreLikely{logits});
  for (int32_t i : ids) {
    above += top_p_mass(mass[std::size_t(i)]);
    if (above >= target) return remove_below(logits, logits[i]);
  }
  // The tokens above the floor hold less than the target (rounding): keep everything.
}

double top_p_log_tail(float p, int64_t n) { return std::log((1.0 - double(p)) / double(n)); }

uint64_t top_p_mass(float mass) { return uint64_t(mass * 0x1p36f); }

uint64_t top_p_target(float p, uint64_t total) { return uint64_t(double(p) * double(total)); }

float top_p_floor(float p, int64_t n, uint64_t total, float max) {
  if (n < kTopPBucketedMinSize || p > 0.999f) return kNegInf;
  // Tokens at or below the floor hold less than (1 − p)/e of the mass
  // together: fewer than n of them, each below e^floor <= (1 − p)·total /
  // (n·e), with total bounded below by its highest set bit (exact, so every
  // backend finds the same floor) and the 2^−36 of top_p_mass.
  const int msb = 63 - std::countl_zero(total);
  return float(double(max) + top_p_log_tail(p, n) + 0.69314718055994530942 * double(msb - 36) - 1.0);
}

float min_p_floor(float max, float min_p) {
  // p_i >= min_p * p_max  <=>  l_i >= l_max + log(min_p): no exponentials.
  // The bound in double, then the smallest float at or above it: a float is
  // below that float exactly when it is below the bound.
  const double bound = double(max) + std::log(double(min_p));
  float t = float(bound);
  if (double(t) < bound) t = std::nextafter(t, std::numeric_limits<float>::infinity());
  return t;
}

void keep_min_p(std::span<float> logits, float min_p) {
  if (min_p <= 0.0f) return;
  remove_below(logits, min_p_floor(max_value(logits), min_p));
}

void process_logits(std::span<float> logits, const SamplingParams& params, const TokenHistory& history) {
  ROWLM_CHECK(!logits.empty(), "empty logits row");
  const cpu::RowScan first = scan(logits);
  check_scanned(logits, first);
  apply_logit_bias(logits, params);
  apply_repetition_penalty(logits, history, params.repetition_penalty);
  apply_presence_frequency(logits, history, params.presence_penalty, params.frequency_penalty);
  if (params.greedy()) return;
  // The check's max is still the row's where no bias or penalty changed it.
  ROWLM_CHECK(params.temperature > 0, "apply_temperature needs a positive temperature");
  const float m = penalties_leave_row_unchanged(params) ? first.max : max_value(logits);
  row_kernels().shift_divide(logits.data(), int64_t(logits.size()), m, params.temperature);
  keep_top_k(logits, params.top_k);
  keep_top_p(logits, params.top_p);
  keep_min_p(logits, params.min_p);
}

int32_t argmax(std::span<const float> values) {
  ROWLM_CHECK(!values.empty(), "argmax of an empty row");
  std::vector<cpu::RowScan> blocks;
  const float m = scan(values, blocks).max;
  return first_index_of_max(values, blocks, m);  // 0 if every value is NaN; rows are checked before
}

bool penalties_leave_row_unchanged(const SamplingParams& params) {
  return params.logit_bias.empty() && params.repetition_penalty == 1.0f && params.presence_penalty == 0.0f &&
         params.frequency_penalty == 0.0f;
}

bool greedy_leaves_row_unchanged(const SamplingParams& params) {
  return params.greedy() && penalties_leave_row_unchanged(params);
}

int32_t checked_argmax(std::span<const float> logits) {
  ROWLM_CHECK(!logits.empty(), "empty logits row");
  // One vector read of the row instead of a copy, a check and two argmax
  // passes: the scan's block maxima say which block holds the first
  // largest value, and only that block is searched.
  return token_from_argmax_code(cpu::argmax_code(row_kernels(), logits));
}

int32_t token_from_argmax_code(int32_t code) {
  if (code >= 0) return code;
  if (code == argmax_code::kNoFinite) throw Error("logits row has no finite value");
  const argmax_code::Bad b = argmax_code::bad(code);
  throw Error("logits row holds " + std::string(b.nan ? "NaN" : "+inf") + " at token " + std::to_string(b.index));
}

const cpu::Kernels& row_kernels() { return cpu::kernels_for(cpu::isa_from_env()); }

RowMasses exp_masses(std::span<const float> logits, std::span<float> mass, std::vector<double>& block_mass,
                     std::optional<float> max) {
  ROWLM_CHECK(mass.empty() || mass.size() == logits.size(), "exp_masses: output size differs from input size");
  const cpu::Kernels& k = row_kernels();
  const int64_t n = int64_t(logits.size());
  const float m = max ? *max : max_value(logits);
  ROWLM_CHECK(std::isfinite(m), "a logits row with no finite value");
  const std::size_t blocks = (logits.size() + kMassBlock - 1) / kMassBlock;
  std::vector<float> sums(blocks);
  k.exp_blocks(logits.data(), n, m, int64_t(kMassBlock), mass.empty() ? nullptr : mass.data(), sums.data());
  block_mass.assign(sums.begin(), sums.end());
  double total = 0;
  for (double b : block_mass) total += b;
  return {m, total};
}

void softmax(std::span<const float> logits, std::span<float> probs) {
  ROWLM_CHECK(probs.size() == logits.size(), "softmax: output size differs from input size");
  std::vector<double> block_mass;
  const double total = exp_masses(logits, probs, block_mass).total;
  row_kernels().scale(probs.data(), float(1.0 / total), int64_t(probs.size()));
}

}  // namespace rowlm::sampling
