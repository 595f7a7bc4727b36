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
  double m = -std::numeric_limits<double>::infinity();
  for (float x : logits) m = std::max(m, double(x));
  ROWLM_CHECK(std::isfinite(m), "raw_logprobs: row with no finite value");
  double total = 0;
  for (float x : logits) total += std::exp(double(x) - m);
  const double log_z = m + std::log(total);
  auto logprob = [&](int32_t i) { return float(double(logits[i]) - log_z); };

  RawLogprobs out{logprob(token), {}};
  const std::size_t n = std::min<std::size_t>(std::size_t(top_n), logits.size());
  if (n > 0) {
    std::vector<int32_t> ids(logits.size());
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    out.top.reserve(n);
    for (std::size_t j = 0; j < n; ++j) out.top.push_back({ids[j], logprob(ids[j])});
  }
  return out;
}

}  // namespace rowlm::sampling
