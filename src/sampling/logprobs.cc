#include "sampling/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "sampling/logits_processor.h"

namespace rowlm::sampling {

namespace {
// log Σ exp(x): the row's max plus the log of the total of exp(x − max).
double log_partition(float max, double total) { return double(max) + std::log(total); }
float logprob_of(float logit, double log_z) { return float(double(logit) - log_z); }
}  // namespace

RawLogprobs raw_logprobs(const RowLogprobStats& stats) {
  const double log_z = log_partition(stats.max, stats.total);
  RawLogprobs out{logprob_of(stats.chosen_logit, log_z), {}};
  ROWLM_CHECK(stats.count >= 0 && stats.count <= kMaxRowLogprobs, "raw_logprobs: a device's count is out of range");
  for (int k = 0; k < stats.count; ++k) out.top.push_back({stats.top[k], logprob_of(stats.top_logit[k], log_z)});
  return out;
}

namespace {
// The n most likely entries (value desc, index asc), most likely first: a
// small heap whose least likely member is at the front; most entries fail
// the first comparison.
std::vector<int32_t> most_likely(std::span<const float> logits, std::size_t n) {
  auto more_likely = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::vector<int32_t> heap;
  if (n == 0) return heap;
  heap.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    heap.push_back(int32_t(i));
    std::push_heap(heap.begin(), heap.end(), more_likely);
  }
  // A later entry is more likely than the front (an earlier index) only if
  // its value is larger: the kernels' vector search finds the next one.
  const int64_t size = int64_t(logits.size());
  for (int64_t i = int64_t(n);
       (i += row_kernels().first_above(logits.data() + i, size - i, logits[std::size_t(heap.front())])) < size; ++i) {
    std::pop_heap(heap.begin(), heap.end(), more_likely);
    heap.back() = int32_t(i);
    std::push_heap(heap.begin(), heap.end(), more_likely);
  }
  std::sort_heap(heap.begin(), heap.end(), more_likely);
  return heap;
}
}  // namespace

RawLogprobs raw_logprobs(std::span<const float> logits, int32_t token, int32_t top_n) {
  ROWLM_CHECK(token >= 0 && std::size_t(token) < logits.size(), "raw_logprobs: token outside the row");
  ROWLM_CHECK(top_n >= 0, "raw_logprobs: negative top_n");
  std::vector<double> block_mass;
  const RowMasses z = exp_masses(logits, {}, block_mass);
  const double log_z = log_partition(z.max, z.total);
  auto logprob = [&](int32_t i) { return logprob_of(logits[i], log_z); };

  RawLogprobs out{logprob(token), {}};
  const std::vector<int32_t> top = most_likely(logits, std::min<std::size_t>(std::size_t(top_n), logits.size()));
  out.top.reserve(top.size());
  for (int32_t i : top) out.top.push_back({i, logprob(i)});
  return out;
}

RowLogprobStats raw_logprob_stats(std::span<const float> logits, int32_t top_n) {
  ROWLM_CHECK(top_n >= 0 && top_n <= kMaxRowLogprobs, "raw_logprob_stats: top_n out of range");
  std::vector<double> block_mass;
  const RowMasses z = exp_masses(logits, {}, block_mass);
  RowLogprobStats out;
  out.max = z.max;
  out.total = z.total;
  const std::vector<int32_t> top = most_likely(logits, std::min<std::size_t>(std::size_t(top_n), logits.size()));
  out.count = int32_t(top.size());
  for (std::size_t k = 0; k < top.size(); ++k) out.top[k] = top[k], out.top_logit[k] = logits[std::size_t(top[k])];
  return out;
}

}  // namespace rowlm::sampling
