// Tensor parallelism with each shard on a CUDA backend of its own (issue
// 17). Only one-GPU machines were lent, so the shard backends here share
// GPU 0, each with its own stream, workspace and KV arenas, named
// explicitly (BackendOptions::tensor_parallel_devices); tensors cross
// between them by device-to-device copies ordered by events, the path that
// peer copies take between GPUs. The cases and the schedule are the CPU
// devices' (model/tensor_parallel_test_util.h): on two shard backends the
// logits must be the one-backend stand-in's byte for byte, and a row's the
// same alone and batched. On a machine without a GPU every test says so
// and skips.

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/factory/make_backend.h"
#include "core/error.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "model/tensor_parallel_test_util.h"

namespace rowlm::tensor_parallel_cuda_test {
namespace {

using namespace rowlm::tensor_parallel_testing;

// The message of the Error f throws ("" and a failure when it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no Error was thrown";
  return "";
}

// Sets an environment variable for one scope and puts back what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

class TensorParallelCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device or driver on this machine: GPU tests skipped";
  }

  // Shards 0 and 1 as CUDA backends of their own, both on GPU 0.
  static ShardedBackends on_gpu0(MatmulPrecision precision, int shards = 2) {
    BackendOptions o{"cuda:0", 0, precision};
    o.tensor_parallel_devices.assign(std::size_t(shards), 0);
    ShardedBackends b = make_sharded_backends(o, shards);
    EXPECT_EQ(int(b.others.size()), shards - 1);
    return b;
  }
  static ModelOptions options(const ShardedBackends& b) {
    return {.tensor_parallel = int(b.others.size()) + 1, .shard_backends = b.others};
  }
};

// Both precisions: f32 (the CPU's bits, so also main's stand-in hashes) and
// the tensor cores' bf16 (the GPU's default; only one backend to compare
// with). KV on the shard backends and all on the model's.
TEST_F(TensorParallelCuda, TwoShardBackendsOnOneGpuGiveTheOneBackendBits) {
  for (MatmulPrecision precision : {MatmulPrecision::F32, MatmulPrecision::Bf16}) {
    for (const Case& c : cases()) {
      const std::string name = c.name + (precision == MatmulPrecision::F32 ? ", f32" : ", bf16");
      auto one_backend = make_backend({"cuda:0", 0, precision});
      const std::vector<float> one = run(c, *one_backend, {.tensor_parallel = 2}, nullptr, false);
      for (const bool kv_on_devices : {true, false}) {
        const std::string where = name + (kv_on_devices ? ", KV on the shard backends" : ", KV on the model's backend");
        const ShardedBackends two_backends = on_gpu0(precision);
        const std::vector<float> two = run(c, *two_backends.model, options(two_backends), nullptr, kv_on_devices);
        ASSERT_EQ(one.size(), two.size()) << where;
        EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0)
            << where << ": two shard backends differ from one backend";
      }
      // Under f32 every kernel is the CPU's arithmetic: the CPU stand-in's bits.
      if (precision == MatmulPrecision::F32) {
        EXPECT_EQ(hex(fnv1a(one)), hex(main_hash(c.name))) << name << ": the GPU differs from main's CPU stand-in";
      }
    }
  }
}

TEST_F(TensorParallelCuda, TwoShardBackendsGiveARowTheSameBitsAloneAndBatched) {
  for (MatmulPrecision precision : {MatmulPrecision::F32, MatmulPrecision::Bf16}) {
    for (const Case& c : cases()) {
      const std::string name = c.name + (precision == MatmulPrecision::F32 ? ", f32" : ", bf16");
      const ShardedBackends alone_backends = on_gpu0(precision);
      const std::vector<float> want = alone(c, *alone_backends.model, options(alone_backends));
      const ShardedBackends batched_backends = on_gpu0(precision);
      std::vector<float> prompt_rows;
      run(c, *batched_backends.model, options(batched_backends), &prompt_rows);
      ASSERT_EQ(want.size(), prompt_rows.size()) << name;
      EXPECT_EQ(std::memcmp(want.data(), prompt_rows.data(), want.size() * sizeof(float)), 0)
          << name << ": on two shard backends a row's logits differ alone and batched";
    }
  }
}

// Storage layer i·N + s on shard s's backend, its arenas that backend's.
TEST_F(TensorParallelCuda, KvStorageLayersLiveOnTheShardBackends) {
  const Case c = cases().front();
  const ShardedBackends b = on_gpu0(MatmulPrecision::Auto);
  ASSERT_NE(b.model.get(), b.others[0].get());
  EXPECT_EQ(b.others[0]->device(), Device::cuda(0));
  auto model = c.build(*b.model, options(b));
  kv::CacheOptions opt;
  opt.layers = model->kv_layers(kv::parse_codec("bf16"));
  opt.layer_backends = model->kv_backends();
  ASSERT_EQ(opt.layer_backends.size(), opt.layers.size());
  kv::KvCache cache(opt, *b.model);
  for (int i = 0; i < cache.num_layers(); ++i)
    EXPECT_EQ(&cache.layer_backend(i), i % 2 ? b.others[0].get() : b.model.get()) << "storage layer " << i;
}

// The four shards of one GPU: more threads and copies than two, the same bits.
TEST_F(TensorParallelCuda, FourShardBackendsOnOneGpuGiveTheOneBackendBits) {
  // Llama with 4 KV heads (one per shard), the synthetic llama case's tokens.
  const Case base = cases()[3];
  json llama = small("llama");
  llama["num_key_value_heads"] = 4;
  const Case four{"llama 4 KV heads, synthetic", [llama](Backend& b, const ModelOptions& o) {
                    const llama_style::Config cfg = llama_style::parse_config(llama.dump(), "config.json");
                    return llama_style::make_model(cfg, llama_style::make_synthetic_weights(cfg, 3, 0.3f), b, "", o);
                  }, "q8:32", base.prompt, base.other};
  auto one_backend = make_backend({"cuda:0", 0, MatmulPrecision::Bf16});
  const std::vector<float> one = run(four, *one_backend, {.tensor_parallel = 4}, nullptr, false);
  const ShardedBackends b = on_gpu0(MatmulPrecision::Bf16, 4);
  const std::vector<float> four_backends = run(four, *b.model, options(b));
  ASSERT_EQ(one.size(), four_backends.size());
  EXPECT_EQ(std::memcmp(one.data(), four_backends.data(), one.size() * sizeof(float)), 0)
      << "four shard backends differ from one backend";
}

TEST_F(TensorParallelCuda, RefusesTooFewGpusAndMixedShards) {
  const int count = cuda_device_count();
  {
    // Without a named GPU per shard, one more shard than GPUs is refused, naming the count.
    ScopedEnv unset("ROWLM_TENSOR_PARALLEL_DEVICES", nullptr);
    const std::string e = error_of([&] { make_sharded_backends({"cuda:0", 0, MatmulPrecision::Auto}, count + 1); });
    EXPECT_NE(e.find("this machine has " + std::to_string(count) + " GPU"), std::string::npos) << e;
    EXPECT_NE(e.find("ROWLM_TENSOR_PARALLEL_DEVICES"), std::string::npos) << e;
  }
  {
    // Named through the environment: several shards on GPU 0.
    ScopedEnv env("ROWLM_TENSOR_PARALLEL_DEVICES", "0,0");
    const ShardedBackends b = make_sharded_backends({"cuda:0", 0, MatmulPrecision::Auto}, 2);
    ASSERT_EQ(b.others.size(), 1u);
    EXPECT_EQ(b.others[0]->device(), Device::cuda(0));
  }
  {
    ScopedEnv env("ROWLM_TENSOR_PARALLEL_DEVICES", "0,x");
    EXPECT_NE(error_of([&] { make_sharded_backends({"cuda:0", 0, MatmulPrecision::Auto}, 2); })
                  .find("expected GPU indices"),
              std::string::npos);
  }
  BackendOptions o{"cuda:0", 0, MatmulPrecision::Auto};
  o.tensor_parallel_devices = {0};
  EXPECT_NE(error_of([&] { make_sharded_backends(o, 2); }).find("one per shard"), std::string::npos);
  o.tensor_parallel_devices = {count, 0};
  EXPECT_NE(error_of([&] { make_sharded_backends(o, 2); }).find("shard 0 runs on the model's device"),
            std::string::npos);
  o.tensor_parallel_devices = {0, count};
  EXPECT_NE(error_of([&] { make_sharded_backends(o, 2); }).find("this machine has"), std::string::npos);

  // A mix of CPU and GPU shards, either way round.
  const Case c = cases().front();
  std::unique_ptr<Backend> gpu = make_backend({"cuda:0", 0, MatmulPrecision::Auto});
  std::unique_ptr<Backend> cpu = make_cpu_backend(1);
  const std::shared_ptr<Backend> cpu_shard = make_cpu_backend(1);
  const std::shared_ptr<Backend> gpu_shard = make_backend({"cuda:0", 0, MatmulPrecision::Auto});
  for (const std::string& e : {error_of([&] { c.build(*gpu, {.tensor_parallel = 2, .shard_backends = {cpu_shard}}); }),
                               error_of([&] { c.build(*cpu, {.tensor_parallel = 2, .shard_backends = {gpu_shard}}); })})
    EXPECT_NE(e.find("a mix of CPU and GPU shards is not supported"), std::string::npos) << e;
}

}  // namespace
}  // namespace rowlm::tensor_parallel_cuda_test
