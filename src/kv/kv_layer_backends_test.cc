// CacheOptions::layer_backends: each storage layer's arena on the backend
// named for it (tensor parallelism's KV per device), its bytes written and
// read there; a count that does not match the layers is an Error.

#include <gtest/gtest.h>

#include <vector>

#include "backend/factory/make_backend.h"
#include "core/error.h"
#include "kv/kv_cache.h"
#include "kv/kv_test_util.h"

namespace rowlm::kv::layer_backends_test {
namespace {

TEST(KvLayerBackends, EachLayerLivesAndIsWrittenOnItsBackend) {
  auto other = make_backend({"cpu", 1});
  CacheOptions opt = testing::options_for({testing::layer_spec(1, 2, 0, "f32"), testing::layer_spec(1, 2, 0, "f32")}, 4);
  opt.layer_backends = {nullptr, other.get()};
  KvCache cache(opt, testing::backend());
  EXPECT_EQ(&cache.layer_backend(0), &testing::backend());
  EXPECT_EQ(&cache.layer_backend(1), other.get());
  EXPECT_THROW(cache.layer_backend(2), Error);
  const RowId row = cache.create_row();
  const std::vector<int32_t> counts = {3};
  cache.begin_step({&row, 1}, counts);
  for (int l = 0; l < 2; ++l) {
    std::vector<float> k(6), v(6);
    for (int i = 0; i < 6; ++i) k[std::size_t(i)] = v[std::size_t(i)] = float(100 * l + i);
    testing::write_host(cache, l, row, 0, 3, k.data(), v.data());
  }
  cache.end_step();
  for (int l = 0; l < 2; ++l)
    for (int64_t p = 0; p < 3; ++p) EXPECT_EQ(testing::stored(cache, l, row, p), float(100 * l + 2 * p)) << l << " " << p;
}

TEST(KvLayerBackends, ACountThatDoesNotMatchTheLayersIsAnError) {
  CacheOptions opt = testing::options_for({testing::layer_spec(1, 2, 0, "f32"), testing::layer_spec(1, 2, 0, "f32")}, 4);
  opt.layer_backends = {nullptr};
  EXPECT_THROW(KvCache(opt, testing::backend()), Error);
}

}  // namespace
}  // namespace rowlm::kv::layer_backends_test
