#include "sampling/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace rowlm::sampling {

RawLogprobs raw_logprobs(std::span<const float> logits, int32_t token, int32_t top_n) {
  ROWLM_CHECK(token >= 0 && std::size_t(token) < logits.size(), "raw_logprobs: token outside the row");
  ROWLM_CHECK(top_n >= 0, "raw_logprobs: negative top_n");
  float m = -std::numeric_limits<float>::infinity();
  for (float x : logits) m = x > m ? x : m;
  ROWLM_CHECK(std::isfinite(m), "raw_logprobs: row with no finite value");
  double lane[8] = {};  // independent partial sums
  for (std::size_t i = 0; i < logits.size(); ++i) lane[i % 8] += std::exp(logits[i] - m);
  double total = 0;
  for (double x : lane) total += x;
  const double log_z = double(m) + std::log(total);
  auto logprob = [&](int32_t i) { return float(double(logits[i]) - log_z); };

  RawLogprobs out{logprob(token), {}};
  const std::size_t n = std::min<std::size_t>(std::size_t(top_n), logits.size());
  if (n == 0) return out;
  // The n most likely: a small heap whose least likely member is at the
  // front; most entries fail the first comparison.
  auto more_likely = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::vector<int32_t> heap;
  heap.reserve(n);
  for (std::size_t i = 0; i < logits.size(); ++i) {
    if (heap.size() < n) {
      heap.push_back(int32_t(i));
      std::push_heap(heap.begin(), heap.end(), more_likely);
    } else if (more_likely(int32_t(i), heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), more_likely);
      heap.back() = int32_t(i);
      std::push_heap(heap.begin(), heap.end(), more_likely);
    }
  }
  std::sort_heap(heap.begin(), heap.end(), more_likely);
  out.top.reserve(n);
  for (int32_t i : heap) out.top.push_back({i, logprob(i)});
  return out;
}

}  // namespace rowlm::sampling
