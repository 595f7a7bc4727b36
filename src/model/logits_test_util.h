#pragma once
// Comparing logits against a reference, for the model tests.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/factory/make_backend.h"
#include "core/tensor.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace rowlm::model_testing {

// max |a - b| over f32 tensors of one shape (a shape mismatch fails the test).
inline float max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  float m = 0;
  for (int64_t i = 0; i < std::min(a.numel(), b.numel()); ++i)
    m = std::max(m, std::fabs(a.data<float>()[i] - b.data<float>()[i]));
  return m;
}

// Logits at every position of one prefilled sequence, f32 activations and
// KV, on the CPU: the model in `path` (a directory or a GGUF file), loaded
// with `options` (e.g. split over shards).
inline Tensor prefill_logits(const std::string& path, const std::vector<int32_t>& ids, const ModelOptions& options = {}) {
  auto backend = make_backend({"cpu", 2, MatmulPrecision::F32});
  auto model = load_model(path, *backend, options);
  kv::CacheOptions opt;
  opt.layers = model->kv_layers(kv::parse_codec("f32"));
  opt.block_size = 4;
  kv::KvCache cache(opt, *backend);
  const kv::RowId row = cache.create_row();
  ForwardBatch b;
  for (std::size_t i = 0; i < ids.size(); ++i) b.add(row, int64_t(i), ids[i], true);
  Tensor logits;
  model->forward(b, cache, logits);
  // A tensor of its own: the backend's readback memory is reused.
  Tensor copy(DType::F32, logits.shape());
  std::memcpy(copy.raw(), logits.raw(), logits.nbytes());
  return copy;
}

}  // namespace rowlm::model_testing
