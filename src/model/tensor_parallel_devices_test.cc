// Tensor parallelism over N CPU "devices" (issue 17): each shard on a
// backend of its own, driven from a thread of its own, must give the bits
// of the one-backend stand-in it replaced. The stand-in's N = 2 logits were
// captured as hashes from a build of main before the devices existed
// (commit 2795653); the same runs are repeated here over two devices and on
// one backend, and all three must agree byte for byte.

#include <gtest/gtest.h>

#include <cstring>

#include "backend/factory/make_backend.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "model/tensor_parallel_test_util.h"

namespace rowlm::tensor_parallel_devices_test {
namespace {

using namespace rowlm::tensor_parallel_testing;

// The model's backend for shard 0 and one more per shard, one thread each.
struct Devices {
  std::unique_ptr<Backend> first = make_backend({"cpu", 1, MatmulPrecision::F32});
  std::vector<std::shared_ptr<Backend>> others;
  explicit Devices(int shards) {
    for (int s = 1; s < shards; ++s) others.push_back(make_backend({"cpu", 1, MatmulPrecision::F32}));
  }
  ModelOptions options() const { return {.tensor_parallel = int(others.size()) + 1, .shard_backends = others}; }
};

TEST(TensorParallelDevices, TwoCpuDevicesGiveTheStandInsBits) {
  for (const Case& c : cases()) {
    auto backend = make_backend({"cpu", 2, MatmulPrecision::F32});
    const std::vector<float> one = run(c, *backend, {.tensor_parallel = 2}, nullptr, false);
    for (const bool kv_on_devices : {true, false}) {
      const std::string where = c.name + (kv_on_devices ? ", KV on the devices" : ", KV on the model's backend");
      Devices devices(2);
      const std::vector<float> two = run(c, *devices.first, devices.options(), nullptr, kv_on_devices);
      ASSERT_EQ(one.size(), two.size()) << where;
      EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0)
          << where << ": two devices differ from one backend";
      EXPECT_EQ(hex(fnv1a(two)), hex(main_hash(c.name))) << where << ": two devices differ from main's stand-in";
    }
    EXPECT_EQ(hex(fnv1a(one)), hex(main_hash(c.name))) << c.name << ": one backend differs from main's stand-in";
  }
}

TEST(TensorParallelDevices, TwoCpuDevicesGiveARowTheSameBitsAloneAndBatched) {
  for (const Case& c : cases()) {
    Devices alone_devices(2);
    const std::vector<float> want = alone(c, *alone_devices.first, alone_devices.options());
    Devices batched_devices(2);
    std::vector<float> prompt_rows;
    run(c, *batched_devices.first, batched_devices.options(), &prompt_rows);
    ASSERT_EQ(want.size(), prompt_rows.size()) << c.name;
    EXPECT_EQ(std::memcmp(want.data(), prompt_rows.data(), want.size() * sizeof(float)), 0)
        << c.name << ": on two devices a row's logits differ alone and batched";
  }
}

// Storage layer i·N + s lives on shard s's backend; one model's backend
// alone names no placement.
TEST(TensorParallelDevices, KvStorageLayersLiveOnTheirShardsDevices) {
  const Case c = cases().front();
  Devices devices(2);
  auto model = c.build(*devices.first, devices.options());
  kv::CacheOptions opt;
  opt.layers = model->kv_layers(kv::parse_codec("f32"));
  opt.layer_backends = model->kv_backends();
  ASSERT_EQ(opt.layer_backends.size(), opt.layers.size());
  kv::KvCache cache(opt, *devices.first);
  for (int i = 0; i < cache.num_layers(); ++i)
    EXPECT_EQ(&cache.layer_backend(i), i % 2 ? devices.others[0].get() : devices.first.get()) << "storage layer " << i;
  auto backend = make_backend({"cpu", 1});
  EXPECT_TRUE(c.build(*backend, {.tensor_parallel = 2})->kv_backends().empty());
}

TEST(TensorParallelDevices, RefusesBackendsThatDoNotFitTheShards) {
  const Case c = cases().front();
  auto backend = make_backend({"cpu", 1});
  std::shared_ptr<Backend> other = make_backend({"cpu", 1});
  EXPECT_THROW(c.build(*backend, {.tensor_parallel = 1, .shard_backends = {other}}), Error);
  EXPECT_THROW(c.build(*backend, {.tensor_parallel = 2, .shard_backends = {other, other}}), Error);
  std::shared_ptr<Backend> same(backend.get(), [](Backend*) {});  // not owned: the model's own
  EXPECT_THROW(c.build(*backend, {.tensor_parallel = 2, .shard_backends = {same}}), Error);
}

}  // namespace
}  // namespace rowlm::tensor_parallel_devices_test
