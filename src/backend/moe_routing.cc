#include "backend/moe_routing.h"

#include <algorithm>
#include <cmath>

namespace rowlm {

void route_token(const float* logits, int64_t E, int top_k, bool renormalize, const float* scale, float* probs,
                 int32_t* experts, float* weights) {
  float max = logits[0];
  for (int64_t e = 1; e < E; ++e) max = std::max(max, logits[e]);
  float sum = 0.0f;
  for (int64_t e = 0; e < E; ++e) {
    probs[e] = std::exp(logits[e] - max);
    sum += probs[e];
  }
  for (int64_t e = 0; e < E; ++e) probs[e] /= sum;
  float chosen_sum = 0.0f;
  for (int j = 0; j < top_k; ++j) {
    int64_t best = -1;
    for (int64_t e = 0; e < E; ++e) {
      if (probs[e] < 0.0f) continue;  // already taken (marked below)
      if (best < 0 || probs[e] > probs[best]) best = e;
    }
    experts[j] = int32_t(best);
    weights[j] = probs[best];
    chosen_sum += probs[best];
    probs[best] = -1.0f;
  }
  for (int j = 0; j < top_k; ++j) {
    if (renormalize) weights[j] /= chosen_sum;
    if (scale != nullptr) weights[j] *= scale[experts[j]];
  }
}

}  // namespace rowlm
