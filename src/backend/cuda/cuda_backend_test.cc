// The CUDA backend against the CPU backend: every operation on random
// inputs of odd sizes, every KV codec through the KV module, and whole
// forward passes on the transformers fixtures, compared bit for bit (the
// CUDA kernels perform the CPU's IEEE operations in the CPU's order). On a
// machine without a GPU every test says so and skips.

#include "backend/cuda/cuda_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <cuda_runtime.h>
#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/npy.h"
#include "kv/kv_cache.h"
#include "kv/row_cache.h"
#include "model/model.h"
#include "model/weight_binder.h"
#include "quant/affine.h"
#include "sampling/sampler.h"
#include "sampling/verify_test_cases.h"

namespace rowlm {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

class CudaVsCpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device or driver on this machine: GPU tests skipped";
    // f32 matmuls: the precision in which the GPU computes the CPU's bits
    // (the tensor-core bf16 default is tested in gemm_bf16_test.cc).
    gpu = make_cuda_backend(0, BackendOptions{"cuda", 0, MatmulPrecision::F32});
    cpu = make_cpu_backend(2);
  }

  Tensor random(Shape shape, float scale = 1.0f, DType dtype = DType::F32) {
    Tensor t(DType::F32, shape);
    std::normal_distribution<float> dist(0.0f, scale);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
    if (dtype == DType::F32) return t;
    Tensor n(dtype, shape);
    for (int64_t i = 0; i < t.numel(); ++i)
      n.data<uint16_t>()[i] = dtype == DType::BF16 ? f32_to_bf16(t.data<float>()[i]) : f32_to_f16(t.data<float>()[i]);
    return n;
  }
  static Tensor ints(const std::vector<int32_t>& v) {
    Tensor t(DType::I32, {int64_t(v.size())});
    std::copy(v.begin(), v.end(), t.data<int32_t>());
    return t;
  }
  Tensor up(const Tensor& host) { return gpu->upload(host); }
  Tensor down(const Tensor& device) {
    Tensor t(device.dtype(), device.shape());
    gpu->copy_to_host(device, t.raw());
    return t;
  }
  Tensor gpu_zeros(Shape shape) { return up(Tensor(DType::F32, std::move(shape))); }

  // A KV cache of one layer.
  static kv::CacheOptions one_layer(const char* codec, int kv_heads, int head_dim, int window, int block_size) {
    kv::CacheOptions opt;
    kv::LayerSpec spec;
    spec.kv_heads = kv_heads;
    spec.head_dim = head_dim;
    spec.window = window;
    spec.codec = kv::parse_codec(codec);
    opt.layers = {spec};
    opt.block_size = block_size;
    return opt;
  }

  static void expect_bitwise(const Tensor& got, const Tensor& want, const std::string& what) {
    ASSERT_EQ(got.shape(), want.shape()) << what;
    ASSERT_EQ(got.dtype(), want.dtype()) << what;
    int64_t bad = 0;
    for (int64_t i = 0; i < got.numel() && bad < 3; ++i) {
      const float g = got.data<float>()[i], w = want.data<float>()[i];
      if (bits(g) != bits(w)) {
        ADD_FAILURE() << what << ": element " << i << " is " << g << " on the GPU, " << w << " on the CPU";
        ++bad;
      }
    }
  }

  std::unique_ptr<Backend> gpu, cpu;
  std::mt19937 rng{7};
};

// In f32 precision; under bf16 the GPU runs tensor cores in another order
// (gemm_bf16_test.cc), except for f32 and f16 weights, which keep this path.
TEST_F(CudaVsCpu, MatmulEqualsTheCpuForEveryWeightTypeAndSize) {
  for (MatmulPrecision precision : {MatmulPrecision::F32, MatmulPrecision::Bf16}) {
    auto g = make_cuda_backend(0, BackendOptions{"cuda", 0, precision});
    auto c = make_cpu_backend(2, precision);
    for (DType wt : {DType::F32, DType::BF16, DType::F16})
      if (precision == MatmulPrecision::F32 || wt != DType::BF16)
      for (int64_t M : {1, 3, 17})
        for (int64_t K : {1, 15, 16, 17, 100, 257})
          for (int64_t N : {1, 5, 33}) {
            const Tensor x = random({M, K}), w = random({N, K}, 0.5f, wt);
            Tensor want(DType::F32, {M, N});
            c->matmul(x, c->prepare_weight(Weight::dense(w)), want);
            Tensor y = g->upload(Tensor(DType::F32, {M, N}));
            g->matmul(g->upload(x), g->prepare_weight(Weight::dense(w)), y);
            Tensor got(DType::F32, {M, N});
            g->copy_to_host(y, got.raw());
            expect_bitwise(got, want, std::string(dtype_name(wt)) + " " + std::string(matmul_precision_name(precision)) +
                                          " M" + std::to_string(M) + " K" + std::to_string(K) + " N" + std::to_string(N));
          }
  }
}

// Affine-quantized weights (weight.h) compute, on the GPU as on the CPU, the
// dense f32 matmul of the dequantized matrix with f32 activations: the same
// bits as the CPU backend's affine kernels, under f32 precision, and under
// bf16 precision where the tensor cores do not take the weight (these
// shapes: rows not a multiple of 16, or not 4 bits; the next test has those).
TEST_F(CudaVsCpu, AffineMatmulAndEmbedEqualTheCpuUnderEitherPrecision) {
  auto affine = [&](int64_t rows, int64_t cols, int bits, int group, DType params) {
    return decoder::quantize_matrix(random({rows, cols}, 0.5f), {bits, group}, params);
  };
  for (MatmulPrecision precision : {MatmulPrecision::F32, MatmulPrecision::Bf16}) {
    auto g = make_cuda_backend(0, BackendOptions{"cuda", 0, precision});
    auto c = make_cpu_backend(2, precision);
    // K = 128, 256, 384, 512 hold whole Lanes16 blocks at 4 and 8 bits (the
    // lane kernel, 1 to 8 rows of x per pass: M = 1, 3, 9, 40), K = 96 not
    // (the stream order stays).
    for (int bits : {2, 3, 4, 5, 6, 8})
      for (int64_t M : {1, 3, 9, 40})
        for (auto [N, K, group, params] : {std::tuple{int64_t(7), int64_t(128), 32, DType::BF16},
                                           std::tuple{int64_t(33), int64_t(512), 64, DType::F16},
                                           std::tuple{int64_t(5), int64_t(256), 128, DType::F32},
                                           std::tuple{int64_t(6), int64_t(384), 64, DType::BF16},
                                           std::tuple{int64_t(4), int64_t(96), 32, DType::BF16}}) {
          const Weight w = affine(N, K, bits, group, params);
          const Tensor x = random({M, K});
          Tensor want(DType::F32, {M, N});
          c->matmul(x, c->prepare_weight(w), want);
          Tensor y = g->upload(Tensor(DType::F32, {M, N}));
          g->matmul(g->upload(x), g->prepare_weight(w), y);
          Tensor got(DType::F32, {M, N});
          g->copy_to_host(y, got.raw());
          expect_bitwise(got, want, "affine q" + std::to_string(bits) + "/" + std::to_string(group) + " " +
                                        std::string(matmul_precision_name(precision)) + " M" + std::to_string(M) +
                                        " N" + std::to_string(N) + " K" + std::to_string(K));
        }
    // Embeddings in stream order (D = 96) and in lane order (q4 D = 256, q8 D = 128).
    for (auto [D, bits] : {std::pair{int64_t(96), 4}, std::pair{int64_t(256), 4}, std::pair{int64_t(128), 8}}) {
      const Weight table = affine(40, D, bits, 32, DType::BF16);
      std::vector<int32_t> ids = {0, 39, 7, 7, 21};
      Tensor host_ids(DType::I32, {int64_t(ids.size())});
      std::memcpy(host_ids.raw(), ids.data(), ids.size() * 4);
      Tensor want(DType::F32, {int64_t(ids.size()), D});
      c->embed(host_ids, c->prepare_weight(table), 1.5f, want);
      const Weight on_gpu = g->prepare_weight(table);
      EXPECT_EQ(on_gpu.code_order, D % lanes16_block_codes(bits) == 0 ? CodeOrder::Lanes16 : CodeOrder::Stream);
      EXPECT_EQ(g->prepare_weight(on_gpu).values.raw(), on_gpu.values.raw()) << "prepared twice";
      Tensor out = g->upload(Tensor(DType::F32, {int64_t(ids.size()), D}));
      g->embed(g->upload(host_ids), on_gpu, 1.5f, out);
      Tensor got(DType::F32, {int64_t(ids.size()), D});
      g->copy_to_host(out, got.raw());
      expect_bitwise(got, want, "affine embedding q" + std::to_string(bits) + " D" + std::to_string(D));
    }
  }
}

// 4-, 5-, 6- and 8-bit weights on tensor cores (bf16 precision,
// gemm_affine.h): against an oracle in double on the host (the bf16-rounded
// activations times the weights dequantized by quant::dequantize), every
// row's bits the same alone and in batches of any size (each token-tile
// width and the split over K), a range of row tiles the same as those rows
// of the whole, and the embedding lookup on the tensor cores' code order
// still the CPU's.
TEST_F(CudaVsCpu, AffineOnTensorCoresMatchesAnOracleAndIsTheSameInAnyBatch) {
  auto g = make_cuda_backend(0, BackendOptions{"cuda", 0, MatmulPrecision::Bf16});
  // K = 1536: three chunks (split over K at these few rows); 640: a chunk and
  // a part; N = 1104 · 16: enough row tiles that one row alone does not split.
  for (int width : {4, 5, 6, 8})
    for (auto [N, K, group, params] : {std::tuple{int64_t(48), int64_t(1536), 64, DType::BF16},
                                       std::tuple{int64_t(16), int64_t(640), 32, DType::F16},
                                       std::tuple{int64_t(32), int64_t(512), 128, DType::F32},
                                       std::tuple{int64_t(1104 * 16), int64_t(1024), 64, DType::BF16}}) {
      if (width != 4 && N > 64) continue;  // the large shape once: it tests the launch, not the codes
      const Weight w = decoder::quantize_matrix(random({N, K}, 0.5f), {width, group}, params);
      const Weight on_gpu = g->prepare_weight(w);
      ASSERT_EQ(on_gpu.code_order, CodeOrder::Mma16);
      std::vector<float> dq(std::size_t(N * K));
      quant::dequantize({w.values.data<uint32_t>(), std::size_t(N * K * width / 32)}, w.scales.raw(), w.biases.raw(),
                        params, {width, group}, dq);
      const Tensor x = random({70, K}, 2.0f);
      auto run = [&](const Weight& weight, int64_t first, int64_t M) {
        Tensor xm(DType::F32, {M, K});
        std::memcpy(xm.raw(), x.data<float>() + first * K, std::size_t(M * K) * 4);
        Tensor y = g->upload(Tensor(DType::F32, {M, weight.rows}));
        g->matmul(g->upload(xm), weight, y);
        Tensor out(DType::F32, {M, weight.rows});
        g->copy_to_host(y, out.raw());
        return out;
      };
      const std::string what =
          "q" + std::to_string(width) + "/" + std::to_string(group) + " N" + std::to_string(N) + " K" + std::to_string(K);
      const Tensor all = run(on_gpu, 0, 70);
      // The oracle, on a sample of the outputs (every one for the small shapes).
      const int64_t n_step = N > 64 ? 997 : 1;
      int64_t bad = 0;
      for (int64_t m = 0; m < 70; m += (N > 64 ? 13 : 1))
        for (int64_t n = 0; n < N; n += n_step) {
          double sum = 0.0, scale = 0.0;
          for (int64_t k = 0; k < K; ++k) {
            const double xk = bf16_to_f32(f32_to_bf16(x.data<float>()[m * K + k]));
            const double wk = dq[std::size_t(n * K + k)];
            const double b = quant::load_param(w.biases.raw(), params, n * (K / group) + k / group);
            sum += xk * wk;
            scale += std::abs(xk) * (std::abs(wk) + 2.0 * std::abs(b));
          }
          const double got = all.data<float>()[m * N + n];
          if (std::abs(got - sum) > 1e-5 * scale && bad++ < 3)
            ADD_FAILURE() << what << " m" << m << " n" << n << ": " << got << " against " << sum << " (scale " << scale
                          << ")";
        }
      // Alone and in other batches (token tiles of 8, 16, 32, 64; rows at
      // every offset in a tile), the same bits as in the batch of 70.
      for (auto [first, M] : {std::pair{int64_t(0), int64_t(1)}, std::pair{int64_t(37), int64_t(1)},
                              std::pair{int64_t(3), int64_t(5)}, std::pair{int64_t(60), int64_t(9)},
                              std::pair{int64_t(11), int64_t(17)}, std::pair{int64_t(21), int64_t(40)}}) {
        const Tensor part = run(on_gpu, first, M);
        for (int64_t i = 0; i < M * N && bad < 3; ++i)
          if (bits(part.data<float>()[i]) != bits(all.data<float>()[first * N + i])) {
            ADD_FAILURE() << what << ": row " << first + i / N << " column " << i % N << " is "
                          << part.data<float>()[i] << " in a batch of " << M << ", "
                          << all.data<float>()[first * N + i] << " in the batch of 70";
            ++bad;
          }
      }
      // The last row tile alone (a view into the codes): those rows' bits.
      if (N >= 32) {
        const Tensor tail = run(on_gpu.row_range(N - 16, N), 0, 70);
        for (int64_t m = 0; m < 70 && bad < 3; ++m)
          for (int64_t n = 0; n < 16; ++n)
            if (bits(tail.data<float>()[m * 16 + n]) != bits(all.data<float>()[m * N + N - 16 + n])) {
              ADD_FAILURE() << what << ": rows [" << N - 16 << ", " << N << ") alone differ at m" << m << " n" << n;
              ++bad;
              break;
            }
      }
    }
  // An embedding table in the tensor cores' order looks up the CPU's bits.
  for (int width : {4, 5, 6, 8}) {
    const Weight table = decoder::quantize_matrix(random({48, 256}, 0.5f), {width, 32}, DType::BF16);
    const Weight on_gpu = g->prepare_weight(table);
    ASSERT_EQ(on_gpu.code_order, CodeOrder::Mma16);
    const Tensor ids = ints({0, 47, 17, 17, 30});
    Tensor want(DType::F32, {5, 256});
    cpu->embed(ids, cpu->prepare_weight(table), 1.5f, want);
    Tensor out = g->upload(Tensor(DType::F32, {5, 256}));
    g->embed(g->upload(ids), on_gpu, 1.5f, out);
    Tensor got(DType::F32, {5, 256});
    g->copy_to_host(out, got.raw());
    expect_bitwise(got, want, "q" + std::to_string(width) + " embedding in Mma16 order");
    EXPECT_THROW(on_gpu.row_range(8, 24), Error) << "a row range across tiles";
  }
  // 2- and 3-bit codes keep the stream order (the f32 kernels).
  EXPECT_EQ(g->prepare_weight(decoder::quantize_matrix(random({32, 256}, 0.5f), {3, 32}, DType::BF16)).code_order,
            CodeOrder::Stream);
}

TEST_F(CudaVsCpu, ElementwiseNormsRopeAndRowOpsEqualTheCpu) {
  for (int64_t D : {1, 15, 64, 1000, 13000}) {
    const Tensor x = random({7, D}, 3.0f), w = random({D}, 0.5f), b = random({D});
    for (NormKind kind : {NormKind::Plain, NormKind::OnePlus, NormKind::NoScale}) {
      Tensor want(DType::F32, x.shape());
      cpu->rms_norm(x, &w, 1e-6f, kind, want);
      Tensor y = gpu_zeros(x.shape());
      const Tensor gw = up(w);
      gpu->rms_norm(up(x), &gw, 1e-6f, kind, y);
      expect_bitwise(down(y), want, "rms_norm D" + std::to_string(D));
      // Normed into a residual stream: the CPU's rms_norm then add.
      const Tensor stream = random({7, D}, 2.0f);
      Tensor sum = up(stream);  // uploaded before the CPU adds into its own copy
      Tensor want_sum(DType::F32, stream.shape());
      std::memcpy(want_sum.raw(), stream.raw(), stream.nbytes());
      cpu->add_rms_norm(want_sum, x, &w, 1e-6f, kind);
      gpu->add_rms_norm(sum, up(x), &gw, 1e-6f, kind);
      expect_bitwise(down(sum), want_sum, "add_rms_norm D" + std::to_string(D));
      // With a closing scale (a layer scalar): the CPU's norm, add, then scale.
      Tensor scaled = up(stream), want_scaled(DType::F32, stream.shape()), normed(DType::F32, x.shape());
      std::memcpy(want_scaled.raw(), stream.raw(), stream.nbytes());
      cpu->rms_norm(x, &w, 1e-6f, kind, normed);
      cpu->add(want_scaled, normed);
      cpu->scale(want_scaled, 0.7f);
      gpu->add_rms_norm(scaled, up(x), &gw, 1e-6f, kind, 0.7f);
      expect_bitwise(down(scaled), want_scaled, "add_rms_norm then 0.7 D" + std::to_string(D));
    }
    for (Activation act : {Activation::GeluTanh, Activation::Silu}) {
      Tensor gate = random({7, D}, 5.0f), upv = random({7, D});
      Tensor want(DType::F32, x.shape());
      cpu->gated_activation(gate, upv, act, want);
      Tensor y = gpu_zeros(x.shape());
      gpu->gated_activation(up(gate), up(upv), act, y);
      expect_bitwise(down(y), want, std::string(activation_name(act)) + " D" + std::to_string(D));
    }
    {
      Tensor want = random({7, D});
      Tensor y = up(want);
      cpu->add_bias(want, b);
      gpu->add_bias(y, up(b));
      expect_bitwise(down(y), want, "add_bias");
      cpu->add(want, x);
      gpu->add(y, up(x));
      expect_bitwise(down(y), want, "add");
      cpu->scale(want, 0.37f);
      gpu->scale(y, 0.37f);
      expect_bitwise(down(y), want, "scale");
      cpu->softcap(want, 30.0f);
      gpu->softcap(y, 30.0f);
      expect_bitwise(down(y), want, "softcap");
    }
  }
  for (int64_t hd : {8, 64, 256, 512}) {
    std::vector<float> inv_freq;
    for (int64_t i = 0; i < hd / 2; ++i)
      inv_freq.push_back(i < hd / 4 ? float(std::pow(10000.0, -2.0 * double(i) / double(hd))) : 0.0f);
    const std::vector<int32_t> positions = {0, 1, 7, 4095, 70000};
    const Tensor x = random({5, 3, hd});
    Tensor want(DType::F32, x.shape());
    std::memcpy(want.raw(), x.raw(), x.nbytes());
    auto ct = cpu->make_rope_table(inv_freq), gt = gpu->make_rope_table(inv_freq);
    ct->reserve(70001);
    gt->reserve(70001);
    cpu->rope(want, ints(positions), *ct);
    Tensor y = up(x);
    gpu->rope(y, up(ints(positions)), *gt);
    expect_bitwise(down(y), want, "rope hd" + std::to_string(hd));
    // Each head normed, then rotated, in one call: the CPU's two.
    const Tensor w = random({hd}, 0.5f);
    for (NormKind kind : {NormKind::Plain, NormKind::OnePlus}) {
      Tensor want_nr(DType::F32, x.shape());
      std::memcpy(want_nr.raw(), x.raw(), x.nbytes());
      cpu->rms_norm_rope(want_nr, &w, 1e-6f, kind, ints(positions), *ct);
      Tensor nr = up(x);
      const Tensor gw = up(w);
      gpu->rms_norm_rope(nr, &gw, 1e-6f, kind, up(ints(positions)), *gt);
      expect_bitwise(down(nr), want_nr, "rms_norm_rope hd" + std::to_string(hd));
    }
  }
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
    const Tensor table = random({50, 37}, 1.0f, dt);
    const std::vector<int32_t> ids = {3, 0, 49, 3};
    Tensor want(DType::F32, {4, 37});
    cpu->embed(ints(ids), Weight::dense(table), 39.25f, want);
    Tensor y = gpu_zeros({4, 37});
    gpu->embed(up(ints(ids)), gpu->prepare_weight(Weight::dense(table)), 39.25f, y);
    expect_bitwise(down(y), want, std::string("embed ") + std::string(dtype_name(dt)));
  }
  {
    const Tensor src = random({6, 1100}), base = random({6, 1100}), updates = random({5, 1100});
    const std::vector<int32_t> rows = {5, 0, 5, 2, 0};
    Tensor weights(DType::F32, {5});
    for (int i = 0; i < 5; ++i) weights.data<float>()[i] = 0.3f * float(i) - 0.7f;
    Tensor want(DType::F32, {5, 1100});
    cpu->gather_rows(src, ints(rows), want);
    Tensor y = gpu_zeros({5, 1100});
    gpu->gather_rows(up(src), up(ints(rows)), y);
    expect_bitwise(down(y), want, "gather_rows");
    Tensor scattered(DType::F32, base.shape());
    std::memcpy(scattered.raw(), base.raw(), base.nbytes());
    cpu->scatter_add_rows(scattered, ints(rows), weights, updates);
    Tensor d = up(base);
    gpu->scatter_add_rows(d, up(ints(rows)), up(weights), up(updates));
    expect_bitwise(down(d), scattered, "scatter_add_rows");
  }
}

TEST_F(CudaVsCpu, MoeRoutingAndExpertsEqualTheCpu) {
  const int64_t T = 9, H = 24, I = 16, E = 5, K = 2;
  ExpertBank cb, gb;
  for (int64_t e = 0; e < E; ++e) {
    const Tensor g = random({I, H}, 0.3f, DType::BF16), u = random({I, H}, 0.3f, DType::BF16),
                 dn = random({H, I}, 0.3f, DType::BF16);
    cb.gate.push_back(Weight::dense(g));
    cb.up.push_back(Weight::dense(u));
    cb.down.push_back(Weight::dense(dn));
    gb.gate.push_back(gpu->prepare_weight(Weight::dense(g)));
    gb.up.push_back(gpu->prepare_weight(Weight::dense(u)));
    gb.down.push_back(gpu->prepare_weight(Weight::dense(dn)));
  }
  const Tensor logits = random({T, E}, 2.0f), scale = random({E}, 0.2f), x = random({T, H});
  Tensor ce(DType::I32, {T, K}), cw(DType::F32, {T, K});
  cpu->moe_route(logits, K, true, &scale, ce, cw);
  Tensor ge = up(Tensor(DType::I32, {T, K})), gw = gpu_zeros({T, K});
  const Tensor gscale = up(scale);
  gpu->moe_route(up(logits), K, true, &gscale, ge, gw);
  const Tensor ge_host = down(ge);
  EXPECT_EQ(0, std::memcmp(ge_host.raw(), ce.raw(), ce.nbytes()));
  expect_bitwise(down(gw), cw, "moe_route weights");
  Tensor want(DType::F32, {T, H});
  cpu->moe_experts(x, ce, cw, cb, Activation::GeluTanh, want);
  Tensor y = gpu_zeros({T, H});
  gpu->moe_experts(up(x), ge, gw, gb, Activation::GeluTanh, y);
  expect_bitwise(down(y), want, "moe_experts");
}

// The KV module on each backend, driven alike: the stored records and the
// attention outputs are the same bytes, for every codec, block boundary and
// window; a row extracted on the GPU restores on the CPU.
TEST_F(CudaVsCpu, KvRecordsAndAttentionEqualTheCpuForEveryCodec) {
  struct Case {
    const char* codec;
    int head_dim, window, block_size, heads, kv_heads;
  };
  const std::vector<Case> cases = {{"f32", 20, 0, 16, 4, 2},    {"bf16", 64, 0, 16, 8, 1},  {"f16", 48, 7, 5, 2, 2},
                                   {"q8", 64, 0, 16, 4, 2},     {"q4:32", 64, 9, 16, 2, 1}, {"q4:64", 128, 0, 32, 4, 2},
                                   {"q8:128", 128, 13, 8, 2, 2}, {"bf16", 256, 0, 16, 8, 1}, {"bf16", 512, 11, 16, 8, 1}};
  for (const Case& c : cases) {
    const std::string what = std::string(c.codec) + " hd" + std::to_string(c.head_dim) + " w" + std::to_string(c.window) +
                             " B" + std::to_string(c.block_size);
    const kv::CacheOptions opt = one_layer(c.codec, c.kv_heads, c.head_dim, c.window, c.block_size);
    kv::KvCache on_cpu(opt, *cpu), on_gpu(opt, *gpu);
    const int64_t width = int64_t(c.kv_heads) * c.head_dim, qwidth = int64_t(c.heads) * c.head_dim;
    std::vector<kv::RowId> rc, rg;
    for (int r = 0; r < 3; ++r) {
      rc.push_back(on_cpu.create_row());
      rg.push_back(on_gpu.create_row());
    }
    // Steps of uneven chunks per row, then a decode step, attention each time.
    const std::vector<std::vector<int32_t>> steps = {{17, 3, 1}, {1, 21, 5}, {9, 1, 1}, {1, 1, 1}};
    for (const auto& counts : steps) {
      std::vector<kv::TokenRun> runs_c, runs_g;
      std::vector<kv::AttentionQuery> qc, qg;
      int64_t T = 0;
      for (int r = 0; r < 3; ++r) {
        runs_c.push_back({rc[std::size_t(r)], on_cpu.length(rc[std::size_t(r)]), counts[std::size_t(r)]});
        runs_g.push_back({rg[std::size_t(r)], on_gpu.length(rg[std::size_t(r)]), counts[std::size_t(r)]});
        for (int i = 0; i < counts[std::size_t(r)]; ++i) {
          qc.push_back({rc[std::size_t(r)], runs_c.back().position + i});
          qg.push_back({rg[std::size_t(r)], runs_g.back().position + i});
        }
        T += counts[std::size_t(r)];
      }
      const Tensor k = random({T, width}, 2.0f), v = random({T, width}, 2.0f), q = random({T, qwidth});
      on_cpu.begin_step(std::vector<kv::RowId>(rc), counts);
      on_gpu.begin_step(std::vector<kv::RowId>(rg), counts);
      on_cpu.write(0, runs_c, k, v);
      on_gpu.write(0, runs_g, up(k), up(v));
      AttentionParams p{c.heads, c.head_dim, c.window, 1.0f / std::sqrt(float(c.head_dim)), 0.0f};
      Tensor want(DType::F32, {T, qwidth});
      on_cpu.attend(0, qc, q, p, want);
      Tensor out = gpu_zeros({T, qwidth});
      on_gpu.attend(0, qg, up(q), p, out);
      expect_bitwise(down(out), want, what + " attention");
      on_cpu.end_step();
      on_gpu.end_step();
    }
    for (int r = 0; r < 3; ++r) {
      const kv::RowCache a = on_cpu.extract(rc[std::size_t(r)]), b = on_gpu.extract(rg[std::size_t(r)]);
      ASSERT_EQ(a.data.size(), b.data.size());
      EXPECT_EQ(a.data[0].first, b.data[0].first) << what;
      EXPECT_TRUE(a.data[0].records == b.data[0].records) << what << ": the stored records differ";
      // Saved on the GPU, restored on the CPU: the same row.
      const kv::RowId back = on_cpu.restore(b);
      EXPECT_TRUE(on_cpu.extract(back).data[0].records == a.data[0].records) << what;
    }
    // Copy-on-write on the GPU: a fork's write leaves the parent's bytes.
    const kv::RowCache before = on_gpu.extract(rg[0]);
    const kv::RowId child = on_gpu.fork(rg[0]);
    const int32_t one = 1;
    on_gpu.begin_step({&child, 1}, {&one, 1});
    const kv::TokenRun run{child, on_gpu.length(child), 1};
    on_gpu.write(0, {&run, 1}, up(random({1, width})), up(random({1, width})));
    on_gpu.end_step();
    EXPECT_TRUE(on_gpu.extract(rg[0]).data[0].records == before.data[0].records) << what << ": fork wrote through";
  }
}

// Idle KV memory goes back to the device: chunks of the arena that hold no
// row's block are freed (the driver's free memory rises by their bytes),
// rows that hold blocks keep their bytes, and released blocks serve new rows
// again, every record and attention output the CPU's bits throughout.
TEST_F(CudaVsCpu, IdleKvChunksGoBackToTheDeviceAndServeNewRowsAfter) {
  // 64 KiB blocks (bf16, 4 KV heads of 256, 16 positions): 256-block, 16 MiB chunks.
  const kv::CacheOptions opt = one_layer("bf16", 4, 256, 0, 16);
  kv::KvCache on_cpu(opt, *cpu), on_gpu(opt, *gpu);
  const int64_t width = 4 * 256, qwidth = 8 * 256;
  const AttentionParams p{8, 256, 0, 1.0f / 16.0f, 0.0f};
  constexpr int32_t kLen = 2048;  // 128 blocks a row
  std::vector<kv::RowId> rc, rg;
  auto fill = [&](int rows) {  // `rows` new rows of kLen positions in one step
    std::vector<kv::RowId> nc, ng;
    std::vector<kv::TokenRun> runs_c, runs_g;
    for (int r = 0; r < rows; ++r) {
      nc.push_back(on_cpu.create_row());
      ng.push_back(on_gpu.create_row());
      runs_c.push_back({nc.back(), 0, kLen});
      runs_g.push_back({ng.back(), 0, kLen});
    }
    const std::vector<int32_t> counts(std::size_t(rows), kLen);
    on_cpu.begin_step(std::vector<kv::RowId>(nc), counts);
    on_gpu.begin_step(std::vector<kv::RowId>(ng), counts);
    const Tensor k = random({int64_t(rows) * kLen, width}, 2.0f), v = random({int64_t(rows) * kLen, width}, 2.0f);
    on_cpu.write(0, runs_c, k, v);
    on_gpu.write(0, runs_g, up(k), up(v));
    on_cpu.end_step();
    on_gpu.end_step();
    rc.insert(rc.end(), nc.begin(), nc.end());
    rg.insert(rg.end(), ng.begin(), ng.end());
  };
  // Each row's records, then a token appended to each and its attention.
  auto same_rows = [&](const std::string& what) {
    for (std::size_t r = 0; r < rc.size(); ++r) {
      EXPECT_TRUE(on_cpu.extract(rc[r]).data[0].records == on_gpu.extract(rg[r]).data[0].records)
          << what << ": row " << r << "'s records differ";
      const int32_t one = 1;
      const int64_t at = on_cpu.length(rc[r]);
      ASSERT_EQ(on_gpu.length(rg[r]), at);
      on_cpu.begin_step({&rc[r], 1}, {&one, 1});
      on_gpu.begin_step({&rg[r], 1}, {&one, 1});
      const Tensor k = random({1, width}, 2.0f), v = random({1, width}, 2.0f), q = random({1, qwidth});
      const kv::TokenRun run_c{rc[r], at, 1}, run_g{rg[r], at, 1};
      on_cpu.write(0, {&run_c, 1}, k, v);
      on_gpu.write(0, {&run_g, 1}, up(k), up(v));
      const kv::AttentionQuery qc{rc[r], at}, qg{rg[r], at};
      Tensor want(DType::F32, {1, qwidth});
      on_cpu.attend(0, {&qc, 1}, q, p, want);
      Tensor out = gpu_zeros({1, qwidth});
      on_gpu.attend(0, {&qg, 1}, up(q), p, out);
      expect_bitwise(down(out), want, what + ": row " + std::to_string(r) + "'s attention");
      on_cpu.end_step();
      on_gpu.end_step();
    }
  };
  auto device_free = [] {
    std::size_t free = 0, total = 0;
    EXPECT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
    return free;
  };
  constexpr std::size_t kChunk = std::size_t(16) << 20;

  fill(8);  // 1,024 blocks: four whole chunks
  EXPECT_EQ(on_gpu.resident_bytes(), 4 * kChunk);
  EXPECT_EQ(on_gpu.release_free_memory(), 0u) << "no block is free";
  // Rows 1-7 go: chunk 0 still holds row 0 (blocks 0-127); chunks 1-3 hold nothing.
  for (std::size_t r = 1; r < 8; ++r) {
    on_cpu.retire(rc[r]);
    on_gpu.retire(rg[r]);
  }
  rc.resize(1);
  rg.resize(1);
  const std::size_t free_before = device_free();
  EXPECT_EQ(on_gpu.release_free_memory(), 3 * kChunk);
  on_cpu.release_free_memory();
  EXPECT_GE(device_free(), free_before + 3 * kChunk - (std::size_t(2) << 20)) << "the driver got the chunks back";
  EXPECT_EQ(on_gpu.resident_bytes(), kChunk);
  EXPECT_EQ(on_gpu.release_free_memory(), 0u) << "nothing was freed since";
  same_rows("after the release");

  // Released blocks serve new rows: chunk 0's free blocks first (row 0's
  // appended token took block 128), then chunks 1 and 2 come back (new
  // blocks up to 645); chunk 3 stays given back.
  fill(4);
  EXPECT_EQ(on_gpu.resident_bytes(), 3 * kChunk);
  same_rows("after new rows took released blocks");
  on_gpu.check_consistency();
}

// Under the tensor-core precision: several weights of one input in one launch
// (matmul_each), and the norm written rounded for them (rms_norm_matmul_each),
// give each output the bits of a separate norm and separate matmuls.
TEST_F(CudaVsCpu, FusedNormAndMatmulsEqualTheSeparateCalls) {
  auto tc = make_cuda_backend(0, BackendOptions{});
  ASSERT_EQ(tc->matmul_precision(), MatmulPrecision::Bf16);
  const int64_t K = 640;
  std::vector<Weight> ws;
  for (int64_t n : {512, 64, 64}) ws.push_back(tc->prepare_weight(Weight::dense(random({n, K}, 0.05f, DType::BF16))));
  const Tensor nw = tc->upload(random({K}, 0.5f));
  for (int64_t M : {1, 5, 40, 300}) {
    const Tensor x = tc->upload(random({M, K}, 2.0f));
    auto outputs = [&] {
      std::vector<Tensor> y;
      for (const Weight& w : ws) y.push_back(tc->upload(Tensor(DType::F32, {M, w.rows})));
      return y;
    };
    std::vector<Tensor> want = outputs(), each = outputs(), fused = outputs();
    Tensor normed = tc->upload(Tensor(DType::F32, {M, K}));
    tc->rms_norm(x, &nw, 1e-6f, NormKind::Plain, normed);
    for (std::size_t i = 0; i < ws.size(); ++i) tc->matmul(normed, ws[i], want[i]);
    const std::vector<const Weight*> wp = {&ws[0], &ws[1], &ws[2]};
    const std::vector<Tensor*> ep = {&each[0], &each[1], &each[2]}, fp = {&fused[0], &fused[1], &fused[2]};
    tc->matmul_each(normed, wp, ep);
    tc->rms_norm_matmul_each(x, &nw, 1e-6f, NormKind::Plain, wp, fp);
    for (std::size_t i = 0; i < ws.size(); ++i) {
      Tensor w_host(DType::F32, want[i].shape()), e_host(DType::F32, want[i].shape()), f_host(DType::F32, want[i].shape());
      tc->copy_to_host(want[i], w_host.raw());
      tc->copy_to_host(each[i], e_host.raw());
      tc->copy_to_host(fused[i], f_host.raw());
      expect_bitwise(e_host, w_host, "matmul_each M" + std::to_string(M) + " output " + std::to_string(i));
      expect_bitwise(f_host, w_host, "rms_norm_matmul_each M" + std::to_string(M) + " output " + std::to_string(i));
    }
  }
}

// Under the tensor-core precision: the gated activation written rounded for
// the matmul after it (gated_matmul) gives that matmul's bits, for both
// activations and through the MoE experts' path's shapes.
TEST_F(CudaVsCpu, GatedMatmulEqualsTheSeparateCalls) {
  auto tc = make_cuda_backend(0, BackendOptions{});
  ASSERT_EQ(tc->matmul_precision(), MatmulPrecision::Bf16);
  const int64_t K = 704, N = 320;
  const Weight w = tc->prepare_weight(Weight::dense(random({N, K}, 0.05f, DType::BF16)));
  for (Activation act : {Activation::Silu, Activation::GeluTanh})
    for (int64_t M : {1, 7, 130}) {
      const Tensor gate = tc->upload(random({M, K}, 2.0f)), up = tc->upload(random({M, K}, 2.0f));
      Tensor g1 = tc->upload(Tensor(DType::F32, {M, K})), g2 = tc->upload(Tensor(DType::F32, {M, K}));
      tc->copy(gate, g1);
      tc->copy(gate, g2);
      Tensor want = tc->upload(Tensor(DType::F32, {M, N})), got = tc->upload(Tensor(DType::F32, {M, N}));
      tc->gated_activation(g1, up, act, g1);
      tc->matmul(g1, w, want);
      tc->gated_matmul(g2, up, act, w, got);
      Tensor w_host(DType::F32, {M, N}), g_host(DType::F32, {M, N});
      tc->copy_to_host(want, w_host.raw());
      tc->copy_to_host(got, g_host.raw());
      expect_bitwise(g_host, w_host, "gated_matmul M" + std::to_string(M) + (act == Activation::Silu ? " silu" : " gelu"));
    }
}

// The tensor-core precision's attention (keys in fixed splits, kv_kernels.h):
// a query's output is the same bits alone (a block per split and a merging
// kernel), in a prefill of hundreds of queries (a block per query walking its
// splits) and mixed with other rows' queries, for every codec, head size up
// to 512, more query heads per KV head than one block takes, windows and
// rows many splits long; and within float rounding of the CPU's attention.
TEST_F(CudaVsCpu, SplitAttentionIsTheSameAloneAndBatchedAndNearTheCpu) {
  auto split_gpu = make_cuda_backend(0, BackendOptions{});
  ASSERT_EQ(split_gpu->matmul_precision(), MatmulPrecision::Bf16);
  struct Case {
    const char* codec;
    int head_dim, window, block_size, heads, kv_heads, length;
  };
  const std::vector<Case> cases = {{"bf16", 256, 0, 16, 8, 1, 700},  {"bf16", 512, 0, 16, 8, 1, 600},
                                   {"f32", 64, 0, 16, 4, 2, 300},    {"f16", 48, 100, 5, 2, 2, 290},
                                   {"q8", 128, 0, 32, 20, 2, 333},   {"q4:32", 64, 129, 16, 16, 1, 560},
                                   {"bf16", 80, 0, 16, 3, 3, 130},
                                   // More than kMergeApartSplits splits: a query
                                   // alone merges in a launch of its own.
                                   {"bf16", 256, 0, 16, 8, 1, 1500}, {"q8", 128, 0, 32, 4, 2, 1100}};
  for (const Case& c : cases) {
    const std::string what = std::string(c.codec) + " hd" + std::to_string(c.head_dim) + " w" +
                             std::to_string(c.window) + " B" + std::to_string(c.block_size) + " heads" +
                             std::to_string(c.heads) + "/" + std::to_string(c.kv_heads);
    const kv::CacheOptions opt = one_layer(c.codec, c.kv_heads, c.head_dim, c.window, c.block_size);
    kv::KvCache on_cpu(opt, *cpu), on_gpu(opt, *split_gpu);
    const int64_t width = int64_t(c.kv_heads) * c.head_dim, qwidth = int64_t(c.heads) * c.head_dim;
    // Two rows: A of c.length positions, B shorter; written in one step.
    const int32_t len_a = c.length, len_b = c.length / 3 + 1;
    const kv::RowId ac = on_cpu.create_row(), bc = on_cpu.create_row();
    const kv::RowId ag = on_gpu.create_row(), bg = on_gpu.create_row();
    const std::vector<int32_t> counts = {len_a, len_b};
    on_cpu.begin_step(std::vector<kv::RowId>{ac, bc}, counts);
    on_gpu.begin_step(std::vector<kv::RowId>{ag, bg}, counts);
    const Tensor k = random({len_a + len_b, width}, 2.0f), v = random({len_a + len_b, width}, 2.0f);
    const std::vector<kv::TokenRun> runs_c = {{ac, 0, len_a}, {bc, 0, len_b}};
    const std::vector<kv::TokenRun> runs_g = {{ag, 0, len_a}, {bg, 0, len_b}};
    on_cpu.write(0, runs_c, k, v);
    on_gpu.write(0, runs_g, split_gpu->upload(k), split_gpu->upload(v));
    const AttentionParams p{c.heads, c.head_dim, c.window, 1.0f / std::sqrt(float(c.head_dim)), 0.0f};
    const Tensor q_all = random({len_a, qwidth});
    auto attend_gpu = [&](const std::vector<kv::AttentionQuery>& qs, const Tensor& q) {
      Tensor out = split_gpu->upload(Tensor(DType::F32, {int64_t(qs.size()), qwidth}));
      on_gpu.attend(0, qs, split_gpu->upload(q), p, out);
      Tensor host(DType::F32, out.shape());
      split_gpu->copy_to_host(out, host.raw());
      return host;
    };
    auto row_of = [&](const Tensor& t, int64_t i) {
      Tensor r(DType::F32, {1, qwidth});
      std::memcpy(r.raw(), t.data<float>() + i * qwidth, std::size_t(qwidth) * sizeof(float));
      return r;
    };
    // Row A's prefill: every position at once.
    std::vector<kv::AttentionQuery> prefill_g, prefill_c;
    for (int32_t i = 0; i < len_a; ++i) {
      prefill_g.push_back({ag, i});
      prefill_c.push_back({ac, i});
    }
    const Tensor all = attend_gpu(prefill_g, q_all);
    Tensor want(DType::F32, {len_a, qwidth});
    on_cpu.attend(0, prefill_c, q_all, p, want);
    float err = 0, mag = 0;
    for (int64_t i = 0; i < want.numel(); ++i) {
      err = std::max(err, std::fabs(all.data<float>()[i] - want.data<float>()[i]));
      mag = std::max(mag, std::fabs(want.data<float>()[i]));
    }
    EXPECT_LE(err, 1e-5f * std::max(1.0f, mag)) << what << ": the split attention strays from the CPU's";
    // Alone, one query per call, at split edges and elsewhere.
    for (int32_t i : {0, 1, 63, 64, 65, 127, 128, 200, len_a - 2, len_a - 1}) {
      if (i < 0 || i >= len_a) continue;
      const Tensor one = attend_gpu({{ag, i}}, row_of(q_all, i));
      expect_bitwise(one, row_of(all, i), what + " query " + std::to_string(i) + " alone");
    }
    // Mixed with row B's queries, in another order.
    std::vector<kv::AttentionQuery> mixed;
    std::vector<int32_t> from_a;
    Tensor q_mixed(DType::F32, {9, qwidth});
    const Tensor q_b = random({4, qwidth});
    for (int j = 0; j < 9; ++j) {
      float* dst = q_mixed.data<float>() + j * qwidth;
      if (j % 2 == 0) {
        const int32_t i = (len_a - 1 + 8 * len_a - 37 * j) % len_a;
        from_a.push_back(i);
        mixed.push_back({ag, i});
        std::memcpy(dst, q_all.data<float>() + int64_t(i) * qwidth, std::size_t(qwidth) * sizeof(float));
      } else {
        mixed.push_back({bg, len_b - 1 - j});
        std::memcpy(dst, q_b.data<float>() + (j / 2) * qwidth, std::size_t(qwidth) * sizeof(float));
      }
    }
    const Tensor got = attend_gpu(mixed, q_mixed);
    for (std::size_t j = 0; j < from_a.size(); ++j)
      expect_bitwise(row_of(got, int64_t(2 * j)), row_of(all, from_a[j]),
                     what + " query " + std::to_string(from_a[j]) + " among row B's");
    // Both rows' prefills in one call, interleaved (three of A's queries, then
    // one of B's), so thread blocks hold queries of two block tables: every
    // query equals its own row's prefill.
    std::vector<kv::AttentionQuery> prefill_b, both;
    for (int32_t i = 0; i < len_b; ++i) prefill_b.push_back({bg, i});
    const Tensor q_b_all = random({len_b, qwidth});
    const Tensor own_b = attend_gpu(prefill_b, q_b_all);
    std::vector<std::pair<const Tensor*, int32_t>> source;  // (own output, query) of each row of `both`
    Tensor q_both(DType::F32, {len_a + len_b, qwidth});
    auto push = [&](const kv::AttentionQuery& query, const Tensor& qs, const Tensor& own, int32_t i) {
      std::memcpy(q_both.data<float>() + int64_t(both.size()) * qwidth, qs.data<float>() + int64_t(i) * qwidth,
                  std::size_t(qwidth) * sizeof(float));
      both.push_back(query);
      source.emplace_back(&own, i);
    };
    int32_t next_b = 0;
    for (int32_t i = 0; i < len_a; ++i) {
      push({ag, i}, q_all, all, i);
      if (i % 3 == 2 && next_b < len_b) {
        push({bg, next_b}, q_b_all, own_b, next_b);
        ++next_b;
      }
    }
    for (; next_b < len_b; ++next_b) push({bg, next_b}, q_b_all, own_b, next_b);
    const Tensor together = attend_gpu(both, q_both);
    for (std::size_t j = 0; j < both.size(); ++j)
      expect_bitwise(row_of(together, int64_t(j)), row_of(*source[j].first, source[j].second),
                     what + (source[j].first == &all ? " A" : " B") + " query " + std::to_string(source[j].second) +
                         " in the interleaved prefills");
    on_cpu.end_step();
    on_gpu.end_step();
  }
}

// Positions a query does not read never reach it, whatever they hold: the
// tensor-core kernel stages a K chunk of 8 positions whole when a query reads
// any of them, the others landing in score columns that are masked before
// use. Two caches hold the same keys and values except at positions no query
// reads (past the queries' ends, before a window's start): NaN in one, other
// values in the other. Every query, all at once (inline mode) and alone
// (split mode), gets the same bits from both, and finite ones.
TEST_F(CudaVsCpu, PositionsAQueryDoesNotReadNeverReachIt) {
  auto tc = make_cuda_backend(0, BackendOptions{});
  ASSERT_EQ(tc->matmul_precision(), MatmulPrecision::Bf16);
  struct Case {
    int head_dim, window, block_size, heads, length, read_to;  // queries at [first_query, read_to]
  };
  for (const Case& c : {Case{256, 0, 16, 8, 45, 40}, Case{512, 0, 8, 4, 30, 26}, Case{64, 20, 16, 2, 90, 86}}) {
    const std::string what = "hd" + std::to_string(c.head_dim) + " w" + std::to_string(c.window) + " B" +
                             std::to_string(c.block_size);
    const kv::CacheOptions opt = one_layer("bf16", 1, c.head_dim, c.window, c.block_size);
    // With a window, the first query's window starts at 5, inside the chunk
    // of positions 0..7, and no query reads positions 0..4; without one,
    // every query starts at 0.
    const int32_t first_query = c.window > 0 ? c.window + 4 : 0;
    auto unread = [&](int32_t p) { return p > c.read_to || (c.window > 0 && p < 5); };
    const Tensor k = random({c.length, c.head_dim}, 2.0f), v = random({c.length, c.head_dim}, 2.0f);
    const Tensor other_k = random({c.length, c.head_dim}, 2.0f), other_v = random({c.length, c.head_dim}, 2.0f);
    auto copy_of = [](const Tensor& t) {
      Tensor copy(t.dtype(), t.shape());
      std::memcpy(copy.raw(), t.raw(), t.nbytes());
      return copy;
    };
    Tensor k_nan = copy_of(k), v_nan = copy_of(v), k_other = copy_of(k), v_other = copy_of(v);
    for (int32_t p = 0; p < c.length; ++p) {
      if (!unread(p)) continue;
      for (int d = 0; d < c.head_dim; ++d) {
        const int64_t at = int64_t(p) * c.head_dim + d;
        k_nan.data<float>()[at] = v_nan.data<float>()[at] = std::numeric_limits<float>::quiet_NaN();
        k_other.data<float>()[at] = other_k.data<float>()[at];
        v_other.data<float>()[at] = other_v.data<float>()[at];
      }
    }
    const int32_t queries = c.read_to - first_query + 1;
    const int64_t qwidth = int64_t(c.heads) * c.head_dim;
    const Tensor q = random({queries, qwidth});
    const AttentionParams p{c.heads, c.head_dim, c.window, 1.0f / std::sqrt(float(c.head_dim)), 0.0f};
    // Every query at once, then each alone (first and last rows of the result).
    auto attend = [&](const Tensor& keys, const Tensor& values) {
      kv::KvCache cache(opt, *tc);
      const kv::RowId row = cache.create_row();
      cache.begin_step(std::vector<kv::RowId>{row}, std::vector<int32_t>{c.length});
      const std::vector<kv::TokenRun> runs = {{row, 0, c.length}};
      cache.write(0, runs, tc->upload(keys), tc->upload(values));
      std::vector<kv::AttentionQuery> all;
      for (int32_t i = first_query; i <= c.read_to; ++i) all.push_back({row, i});
      Tensor out = tc->upload(Tensor(DType::F32, {queries, qwidth}));
      cache.attend(0, all, tc->upload(q), p, out);
      Tensor result(DType::F32, {2 * int64_t(queries), qwidth});
      tc->copy_to_host(out, result.raw());
      for (int32_t i = 0; i < queries; ++i) {
        Tensor one = tc->upload(Tensor(DType::F32, {1, qwidth}));
        const std::vector<kv::AttentionQuery> alone = {{row, first_query + i}};
        cache.attend(0, alone, tc->upload(copy_of(q.rows(i, i + 1))), p, one);
        tc->copy_to_host(one, result.data<float>() + int64_t(queries + i) * qwidth);
      }
      cache.end_step();
      return result;
    };
    const Tensor with_nan = attend(k_nan, v_nan), with_other = attend(k_other, v_other);
    expect_bitwise(with_nan, with_other, what + ": unread positions reached a query");
    for (int64_t i = 0; i < with_nan.numel(); ++i)
      ASSERT_TRUE(std::isfinite(with_nan.data<float>()[i])) << what << ": element " << i << " is not finite";
  }
}

// A KV block too large for a thread block's shared memory (512 positions of
// 512-wide f32 heads: 1 MiB a section) is refused with a message naming the
// limit, in either precision, before anything is launched.
TEST_F(CudaVsCpu, AttentionOverBlocksBeyondSharedMemoryIsAClearError) {
  for (MatmulPrecision precision : {MatmulPrecision::F32, MatmulPrecision::Bf16}) {
    auto be = make_cuda_backend(0, BackendOptions{"cuda", 0, precision});
    kv::KvCache cache(one_layer("f32", 1, 512, 0, 512), *be);
    const kv::RowId r = cache.create_row();
    const int32_t one = 1;
    cache.begin_step({&r, 1}, {&one, 1});
    const kv::TokenRun run{r, 0, 1};
    cache.write(0, {&run, 1}, be->upload(random({1, 512})), be->upload(random({1, 512})));
    const kv::AttentionQuery q{r, 0};
    Tensor out = be->upload(Tensor(DType::F32, {1, 512}));
    try {
      cache.attend(0, {&q, 1}, be->upload(random({1, 512})), AttentionParams{1, 512, 0, 1.0f, 0.0f}, out);
      ADD_FAILURE() << "attention over 1 MiB sections ran";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("shared memory"), std::string::npos) << e.what();
    }
    cache.end_step();
  }
}

// Whole forward passes on the transformers fixtures: the GPU's logits are
// the CPU's, bit for bit (so within 1e-4 of transformers, as the CPU is),
// prefill and decode, several rows per step.
TEST_F(CudaVsCpu, ForwardPassesOnTheFixturesEqualTheCpu) {
  for (const char* name : {"gemma4/e_series", "gemma4/e2b_like_mqa", "gemma4/dense_keqv", "gemma4/moe_keqv",
                           "gemma4/everything", "gemma4/bf16", "qwen3/gqa_tied", "qwen3/sliding_bias", "qwen3/bf16",
                           "llama/llama3_tied", "llama/linear_untied_bias", "llama/bf16", "qwen2/sliding_gqa",
                           "qwen2/mqa_tied", "mistral/window", "mistral/no_window", "gemma3/text",
                           "gemma3/conditional", "gemma3/bf16", "qwen3_moe/norm_topk", "qwen3_moe/step2_window",
                           "mlx/gemma4_q4", "mlx/gemma4_q8", "mlx/gemma4_mixed", "mlx/gemma4_moe", "mlx/qwen3_q4",
                           "mlx/qwen3_mixed"}) {
    const std::string dir = std::string(ROWLM_SOURCE_DIR) + "/tests/fixtures/" + name;
    std::ifstream in(dir + "/reference.json");
    const auto ref = nlohmann::json::parse(in);
    const auto a = ref["ids_a"].get<std::vector<int32_t>>(), b = ref["ids_b"].get<std::vector<int32_t>>();
    std::vector<Tensor> logits;
    for (Backend* be : {cpu.get(), gpu.get()}) {
      auto model = load_model(dir, *be);
      kv::CacheOptions opt;
      opt.layers = model->kv_layers(kv::parse_codec("bf16"));
      opt.block_size = 4;
      kv::KvCache cache(opt, *be);
      const kv::RowId ra = cache.create_row(), rb = cache.create_row();
      ForwardBatch first;
      for (std::size_t i = 0; i < 7; ++i) first.add(ra, int64_t(i), a[i], true);
      for (std::size_t i = 0; i < b.size(); ++i) first.add(rb, int64_t(i), b[i], i + 1 == b.size());
      Tensor l1;
      model->forward(first, cache, l1);
      logits.push_back(l1);
      for (std::size_t i = 7; i < a.size(); ++i) {
        ForwardBatch step;
        step.add(ra, int64_t(i), a[i], true);
        Tensor l;
        model->forward(step, cache, l);
        logits.push_back(l);
      }
    }
    const std::size_t half = logits.size() / 2;
    for (std::size_t i = 0; i < half; ++i) expect_bitwise(logits[half + i], logits[i], std::string(name) + " step " + std::to_string(i));
  }
}

// The argmax codes of rows (argmax_code.h) equal the CPU's for rows of
// every length up to a Gemma vocabulary, with ties, ±0, -inf, NaN and +inf;
// and a forward's marked rows (ForwardBatch::argmax_only) give the codes of
// the rows an unmarked forward gives, which cross whole, unchanged.
TEST_F(CudaVsCpu, ArgmaxCodesAndArgmaxOnlyRowsEqualTheCpu) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t V : {1, 3, 17, 1000, 1025, 12293, 262144, 1100000}) {  // one slice, several, past the most
    Tensor x = random({7, V});
    float* rows = x.data<float>();
    std::uniform_int_distribution<int64_t> at(0, V - 1);
    rows[at(rng)] = 9.0f;
    rows[V - 1] = 9.0f;
    for (int64_t i = 0; i < V; ++i) rows[V + i] = i % 2 ? -0.0f : 0.0f, rows[2 * V + i] = -inf;
    rows[3 * V + at(rng)] = nan;
    rows[4 * V + at(rng)] = inf;
    rows[5 * V + at(rng)] = nan;
    rows[5 * V + at(rng)] = inf;
    Tensor want(DType::I32, {7}), got = up(Tensor(DType::I32, {7}));
    cpu->argmax_rows(x, want);
    gpu->argmax_rows(up(x), got);
    const Tensor back = down(got);
    for (int r = 0; r < 7; ++r)
      EXPECT_EQ(back.data<int32_t>()[r], want.data<int32_t>()[r]) << "V " << V << " row " << r;
  }
  for (const char* name : {"gemma4/e_series", "qwen3/gqa_tied"}) {
    auto model = load_model(std::string(ROWLM_SOURCE_DIR) + "/tests/fixtures/" + name, *gpu);
    const int64_t V = model->info().vocab_size;
    kv::CacheOptions opt;
    opt.layers = model->kv_layers(kv::parse_codec("bf16"));
    opt.block_size = 4;
    auto run = [&](const std::vector<uint8_t>& marks, Tensor& logits, std::vector<int32_t>& codes) {
      RowPicks picks;
      kv::KvCache cache(opt, *gpu);
      ForwardBatch batch;
      for (int r = 0; r < 3; ++r) {
        const kv::RowId row = cache.create_row();
        for (int p = 0; p < 3; ++p) batch.add(row, p, 5 + 7 * r + 3 * p, true);
      }
      batch.argmax_only = marks;
      model->forward(batch, cache, logits, nullptr, &picks);
      codes = picks.argmax;
    };
    Tensor full, part;
    std::vector<int32_t> none, codes;
    run({}, full, none);
    const std::vector<uint8_t> marks = {1, 0, 1, 1, 0, 0, 1, 1, 1};
    run(marks, part, codes);
    ASSERT_EQ(part.dim(0), 3);
    ASSERT_EQ(codes.size(), 9u);
    Tensor cpu_codes(DType::I32, {9});
    cpu->argmax_rows(full, cpu_codes);
    for (int64_t i = 0, kept = 0; i < 9; ++i) {
      EXPECT_EQ(codes[std::size_t(i)], cpu_codes.data<int32_t>()[i]) << name << " row " << i;
      if (marks[std::size_t(i)]) continue;
      EXPECT_EQ(std::memcmp(part.data<float>() + kept * V, full.data<float>() + i * V, std::size_t(V) * 4), 0)
          << name << " row " << i;
      ++kept;
    }
  }
}

// Rows sampled on the GPU (sample_rows, from Sampler::device_plan) give the
// token the host's sampler gives for the same row, parameters, history and
// seed: greedy with bias and penalties, temperatures, top-k (ties at the
// k-th value included), top-p (with and without its floor), min-p, at a
// Gemma vocabulary and odd sizes; every row of a batch alike; and the raw
// logprobs of rows that ask for them, bit for bit.
// Allows the tokens ≡ k (mod 3): a grammar for the tests, masked on the GPU
// through TokenConstraint's own allowed() (mask() of a row of zeros).
class EveryThirdToken final : public sampling::TokenConstraint {
 public:
  explicit EveryThirdToken(int k) : k_(k) {}
  void mask(std::span<float> logits) override {
    for (std::size_t t = 0; t < logits.size(); ++t)
      if (int(t % 3) != k_) logits[t] = -std::numeric_limits<float>::infinity();
  }
  void accept(int32_t) override {}
  void rollback(std::size_t) override {}

 private:
  int k_;
};

TEST_F(CudaVsCpu, RowsSampledOnTheGpuGiveTheHostSamplersTokens) {
  using sampling::Sampler;
  using sampling::SamplingParams;
  const float inf = std::numeric_limits<float>::infinity();
  int64_t compared = 0, drawn_apart_from_argmax = 0, with_logprobs = 0;
  for (int64_t V : {17, 1000, 4099, 262144}) {
    for (int round = 0; round < 4; ++round) {
      constexpr int kRows = 16;
      Tensor x = random({kRows, V}, 3.0f);
      std::vector<Sampler> samplers;
      std::vector<RowSampling> plans;
      std::vector<RowSamplingEdit> edits;
      std::vector<uint64_t> masks;
      std::uniform_int_distribution<int32_t> id(0, int32_t(V - 1));
      for (int r = 0; r < kRows; ++r) {
        float* row = x.data<float>() + int64_t(r) * V;
        if (r % 4 == 1) row[id(rng)] = -inf;                                   // a removed token
        if (r % 4 == 2) for (int j = 0; j < 6; ++j) row[id(rng)] = 7.5f;        // ties at the top
        const int kind = (round * kRows + r) % 8;
        const SamplingParams p = sampling::testing::random_sampling_params(rng, V, r, round, kind, uint64_t(1000 * round + r));
        std::vector<int32_t> prompt;
        for (int j = 0; j < 30; ++j) prompt.push_back(id(rng) % std::max<int32_t>(1, int32_t(V) / 3));
        samplers.emplace_back(p, V, prompt);
        if ((r + round) % 5 == 4) {  // a grammar
          samplers.back().set_constraint(std::make_unique<EveryThirdToken>(r % 3));
          // A NaN where it forbids the token changes nothing (but the raw
          // logprobs, NaN then on both, in NaNs of other payloads).
          int64_t forbidden = id(rng) / 3 * 3 + (r % 3 + 1) % 3;  // ≢ r (mod 3)
          if (forbidden >= V) forbidden -= 3;
          if (forbidden >= 0 && !p.logprobs) row[forbidden] = std::numeric_limits<float>::quiet_NaN();
        }
        for (int j = 0; j < 5; ++j) samplers.back().accept(j % 2 ? prompt[std::size_t(j)] : id(rng));  // counts 1 and more
        std::optional<RowSampling> plan = samplers.back().device_plan(edits, masks);
        ASSERT_TRUE(plan) << "kind " << kind;
        plan->row = r;
        plans.push_back(*plan);
      }
      Tensor on_gpu = up(x), tokens = up(Tensor(DType::I32, {kRows})), codes = up(Tensor(DType::I32, {kRows}));
      Tensor stats = up(Tensor(DType::U8, {kRows * int64_t(sizeof(RowLogprobStats))}));
      gpu->argmax_rows(on_gpu, codes);
      gpu->sample_rows(on_gpu, plans, edits, masks, tokens, &stats);
      const Tensor got = down(tokens), got_codes = down(codes), got_stats = down(stats);
      for (int r = 0; r < kRows; ++r) {
        const std::span<const float> row(x.data<float>() + int64_t(r) * V, std::size_t(V));
        const sampling::SampledToken want_all = samplers[std::size_t(r)].sample(row);
        const int32_t want = want_all.token;
        const sampling::SampledToken from_gpu = samplers[std::size_t(r)].sampled_on_device(
            got.data<int32_t>()[r], reinterpret_cast<const RowLogprobStats*>(got_stats.raw()) + r);
        EXPECT_EQ(got.data<int32_t>()[r], want) << "V " << V << " round " << round << " row " << r;
        ASSERT_EQ(from_gpu.logprobs.has_value(), want_all.logprobs.has_value());
        if (want_all.logprobs) {
          EXPECT_EQ(bits(from_gpu.logprobs->chosen), bits(want_all.logprobs->chosen)) << "V " << V << " row " << r;
          EXPECT_EQ(from_gpu.logprobs->top, want_all.logprobs->top) << "V " << V << " row " << r;
          ++with_logprobs;
        }
        ++compared;
        if (want != int32_t(std::max_element(row.begin(), row.end()) - row.begin())) ++drawn_apart_from_argmax;
      }
    }
  }
  EXPECT_EQ(compared, 4 * 4 * 16);
  EXPECT_GT(with_logprobs, 60);
  // Rows the sampler refuses (a NaN, a +inf where the grammar allows it):
  // the GPU's token is the row's code, which gives sample()'s error.
  const int64_t V = 300;
  Tensor x = random({2, V});
  x.data<float>()[7] = std::numeric_limits<float>::quiet_NaN();
  x.data<float>()[V + 9] = std::numeric_limits<float>::infinity();  // 9 ≡ 0 (mod 3): allowed
  std::vector<Sampler> refusing;
  refusing.emplace_back(SamplingParams{}, V);
  refusing.emplace_back(SamplingParams{}, V);
  refusing[1].set_constraint(std::make_unique<EveryThirdToken>(0));
  std::vector<RowSampling> plans;
  std::vector<RowSamplingEdit> edits;
  std::vector<uint64_t> masks;
  for (int r = 0; r < 2; ++r) {
    plans.push_back(*refusing[std::size_t(r)].device_plan(edits, masks));
    plans.back().row = r;
  }
  Tensor tokens = up(Tensor(DType::I32, {2})), on_gpu = up(x);
  gpu->sample_rows(on_gpu, plans, edits, masks, tokens, nullptr);
  const Tensor got = down(tokens);
  for (int r = 0; r < 2; ++r) {
    std::string want, from_gpu;
    try {
      refusing[std::size_t(r)].sample(std::span<const float>(x.data<float>() + r * V, std::size_t(V)));
    } catch (const Error& e) {
      want = e.what();
    }
    try {
      refusing[std::size_t(r)].sampled_on_device(got.data<int32_t>()[r], nullptr);
    } catch (const Error& e) {
      from_gpu = e.what();
    }
    EXPECT_FALSE(want.empty()) << r;
    EXPECT_EQ(from_gpu, want) << r;
  }
  EXPECT_GT(drawn_apart_from_argmax, 64) << "the draws must not all land on the largest logit";
}

// Drafts verified on the GPU (sample_rows' verifying rows, from
// sampling::draft_device_plan) give verify_draft_token's verdicts on the
// host bit for bit: kept or rejected, the replacement drawn from the same
// residual with the same uniform, raw logprobs, the errors of rows holding
// NaN or +inf; greedy rows with bias and penalties, temperatures, top-k,
// top-p, min-p, at a Gemma vocabulary and odd sizes, beside plain draws in
// the same launch.
TEST_F(CudaVsCpu, DraftsVerifiedOnTheGpuGiveTheHostsVerdicts) {
  ASSERT_TRUE(gpu->samples_rows());
  sampling::testing::expect_backend_verifies_drafts(*gpu, rng, [](int64_t) { return 6; });
}

// Decode steps of one shape go out as one CUDA graph from their second
// occurrence on (launch_queue.h); steps of two alternating shapes keep a
// graph each. Every step's logits stay the CPU's bits: a replay computes
// what the launches one by one compute, with this step's data.
TEST_F(CudaVsCpu, RepeatedStepsReplayAGraphAndKeepTheCpuBits) {
  // PLE, KV sharing and sliding windows; no experts (their routing reads
  // the logits on the host mid-step, so each layer's launches go out apart).
  const std::string dir = std::string(ROWLM_SOURCE_DIR) + "/tests/fixtures/gemma4/e_series";
  std::ifstream in(dir + "/reference.json");
  const auto ids = nlohmann::json::parse(in)["ids_a"].get<std::vector<int32_t>>();
  ASSERT_GE(ids.size(), 8u);
  std::vector<std::vector<Tensor>> logits(2);
  for (int side = 0; side < 2; ++side) {
    Backend& be = side == 0 ? *cpu : *gpu;
    auto model = load_model(dir, be);
    kv::CacheOptions opt;
    opt.layers = model->kv_layers(kv::parse_codec("bf16"));
    opt.block_size = 4;
    kv::KvCache cache(opt, be);
    const kv::RowId ra = cache.create_row(), rb = cache.create_row();
    const Backend::LaunchStats before = be.launch_stats();
    // 24 steps: row a decodes every step, row b joins every other step, so
    // batches of one and two tokens alternate; both repeat many times.
    for (int64_t step = 0; step < 24; ++step) {
      ForwardBatch batch;
      batch.add(ra, step, ids[std::size_t(step) % ids.size()], true);
      if (step % 2 == 1) batch.add(rb, step / 2, ids[std::size_t(step + 3) % ids.size()], true);
      Tensor l;
      model->forward(batch, cache, l);
      logits[std::size_t(side)].push_back(l);
    }
    if (side == 1) {
      const Backend::LaunchStats after = be.launch_stats();
      // Each shape: one eager step, one capture, replays after that.
      EXPECT_EQ(after.captured - before.captured, 2);
      EXPECT_GE(after.replayed - before.replayed, 20);
    }
  }
  for (std::size_t i = 0; i < logits[0].size(); ++i)
    expect_bitwise(logits[1][i], logits[0][i], "step " + std::to_string(i));
}

// The GPU's default precision (bf16 activations into tensor cores) on the
// bf16 fixtures: within the bound the CPU's bf16 mode meets on the same
// fixtures (transformers_reference_test: 0.3), and on the bundled trained
// model its greedy tokens are the CPU's f32 tokens.
TEST_F(CudaVsCpu, TensorCoreForwardStaysWithinTheCpuBf16BoundAndKeepsGreedyTokens) {
  auto tensor_gpu = make_cuda_backend(0, BackendOptions{});
  ASSERT_EQ(tensor_gpu->matmul_precision(), MatmulPrecision::Bf16) << "the GPU's default is the tensor cores";
  auto prefill_logits = [](Backend& be, const std::string& dir, const std::vector<int32_t>& ids) {
    auto model = load_model(dir, be);
    kv::CacheOptions opt;
    opt.layers = model->kv_layers(kv::parse_codec("f32"));
    kv::KvCache cache(opt, be);
    const kv::RowId r = cache.create_row();
    ForwardBatch batch;
    for (std::size_t i = 0; i < ids.size(); ++i) batch.add(r, int64_t(i), ids[i], true);
    Tensor logits;
    model->forward(batch, cache, logits);
    return logits;
  };
  // The MLX 4-bit fixtures' matrices go to the affine tensor-core kernel
  // (gemm_affine.h); their reference is transformers on the dequantized weights.
  for (const char* name : {"gemma4/bf16", "qwen3/bf16", "llama/bf16", "gemma3/bf16", "mlx/gemma4_q4", "mlx/qwen3_q4"}) {
    const std::string dir = std::string(ROWLM_SOURCE_DIR) + "/tests/fixtures/" + name;
    std::ifstream in(dir + "/reference.json");
    const auto ref = nlohmann::json::parse(in);
    const Tensor want = read_npy(dir + "/logits_a.npy");
    const Tensor got = prefill_logits(*tensor_gpu, dir, ref["ids_a"].get<std::vector<int32_t>>());
    ASSERT_EQ(got.numel(), want.numel()) << name;
    float err = 0;
    for (int64_t i = 0; i < got.numel(); ++i) err = std::max(err, std::fabs(got.data<float>()[i] - want.data<float>()[i]));
    std::printf("%s: tensor-core logits within %g of transformers\n", name, err);
    EXPECT_LE(err, 0.3f) << name;
  }
  const std::string bundled = std::string(ROWLM_SOURCE_DIR) + "/models/rowlm-tiny";
  auto greedy = [&](Backend& be, std::vector<int32_t> ids, int steps) {
    auto model = load_model(bundled, be);
    kv::CacheOptions opt;
    opt.layers = model->kv_layers(kv::parse_codec("bf16"));
    kv::KvCache cache(opt, be);
    const kv::RowId r = cache.create_row();
    ForwardBatch first;
    for (std::size_t i = 0; i < ids.size(); ++i) first.add(r, int64_t(i), ids[i], i + 1 == ids.size());
    Tensor logits;
    model->forward(first, cache, logits);
    std::vector<int32_t> out;
    for (int s = 0; s < steps; ++s) {
      const float* row = logits.data<float>();
      int32_t best = 0;
      for (int64_t v = 1; v < logits.dim(1); ++v)
        if (row[v] > row[best]) best = int32_t(v);
      out.push_back(best);
      ForwardBatch next;
      next.add(r, int64_t(ids.size() + out.size() - 1), best, true);
      model->forward(next, cache, logits);
    }
    return out;
  };
  for (const std::vector<int32_t>& prompt : {std::vector<int32_t>{2, 818, 5279, 529}, std::vector<int32_t>{2, 106, 1645, 108, 3689}}) {
    const auto want = greedy(*cpu, prompt, 24), got = greedy(*tensor_gpu, prompt, 24);
    EXPECT_EQ(got, want) << "greedy tokens on the bundled model differ between the GPU's tensor cores and the CPU";
  }
}

TEST(CudaBackend, ReportsDevicesOrSkips) {
  const int count = cuda_device_count();
  EXPECT_THROW(make_cuda_backend(count + 3, BackendOptions{}), Error);
  if (count == 0) GTEST_SKIP() << "no CUDA device or driver on this machine: GPU tests skipped";
  auto b = make_cuda_backend(0, BackendOptions{});
  EXPECT_EQ(b->device(), Device::cuda(0));
  EXPECT_NE(b->name().find("cuda:0"), std::string::npos);
  // An index out of range reads nothing and is reported at the next
  // synchronisation, naming the operation; the backend stays usable.
  {
    Tensor table(DType::F32, {4, 8}), ids(DType::I32, {2});
    ids.data<int32_t>()[0] = 1;
    ids.data<int32_t>()[1] = 10;
    Tensor out = b->upload(Tensor(DType::F32, {2, 8}));
    b->embed(b->upload(ids), b->prepare_weight(Weight::dense(table)), 1.0f, out);
    Tensor host(DType::F32, {2, 8});
    try {
      b->copy_to_host(out, host.raw());
      ADD_FAILURE() << "an embedding id past the table was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("embed"), std::string::npos) << e.what();
    }
    EXPECT_NO_THROW(b->copy_to_host(out, host.raw()));
  }
  // A host tensor handed to a GPU operation is an error naming the device.
  Tensor host(DType::F32, {2, 2});
  try {
    b->scale(host, 2.0f);
    ADD_FAILURE() << "a host tensor was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace rowlm
