#pragma once
// Test helpers shared by the sampling tests: seeded random logit rows.

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace rowlm::sampling::testing {

// Logits from N(0, scale). With `levels` > 0 values are rounded to a grid of
// that many steps per unit, so rows have ties.
inline std::vector<float> random_row(std::mt19937& rng, int n, float scale = 2.0f, int levels = 0) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> row(n);
  for (float& x : row) {
    x = normal(rng);
    if (levels > 0) x = float(std::lround(x * levels)) / float(levels);
  }
  return row;
}

}  // namespace rowlm::sampling::testing
