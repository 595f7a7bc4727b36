#pragma once
// Comparing logits against a reference, for the model tests.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/tensor.h"

namespace rowlm::model_testing {

// max |a - b| over f32 tensors of one shape (a shape mismatch fails the test).
inline float max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  float m = 0;
  for (int64_t i = 0; i < std::min(a.numel(), b.numel()); ++i)
    m = std::max(m, std::fabs(a.data<float>()[i] - b.data<float>()[i]));
  return m;
}

}  // namespace rowlm::model_testing
