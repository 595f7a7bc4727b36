// The CPU backend's non-matmul operations against double-precision oracles,
// and every ISA path (with 1 and 2 threads) against every other, bitwise.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "backend/cpu/kernels.h"
#include "backend/cpu/test_util.h"
#include "core/error.h"

namespace rowlm {
namespace {

using testing::all_backends;
using testing::BackendCase;
using testing::float_bits;
using testing::narrowed;
using testing::random_f32;
using testing::ulp_distance;
using testing::widened;

constexpr double kUlp = 1.0 / (1 << 23);  // spacing of floats in [1, 2)

Tensor copy_of(const Tensor& t) {
  Tensor c(t.dtype(), t.shape());
  std::memcpy(c.raw(), t.raw(), t.nbytes());
  return c;
}

// Runs `op` (which writes its result into a fresh tensor) on every backend
// and checks all results are bitwise equal to the first; returns it.
template <class Op>
Tensor same_on_every_path(std::vector<BackendCase>& backends, const Op& op) {
  Tensor first;
  for (auto& b : backends) {
    Tensor out = op(*b.backend);
    if (first.empty()) {
      first = out;
      continue;
    }
    EXPECT_EQ(out.shape(), first.shape());
    int64_t mismatches = 0;
    for (int64_t i = 0; i < out.numel(); ++i)
      if (float_bits(out.data<float>()[i]) != float_bits(first.data<float>()[i]) && ++mismatches <= 3)
        ADD_FAILURE() << b.label() << " differs from " << backends[0].label() << " at " << i << ": "
                      << out.data<float>()[i] << " vs " << first.data<float>()[i];
  }
  return first;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(CpuOps, RmsNormMatchesHfFormulaInDouble) {
  std::mt19937 rng(11);
  auto backends = all_backends();
  const float eps = 1e-6f;
  for (int64_t D : {1, 7, 16, 100, 2048}) {
    const Tensor x = random_f32({5, D}, rng, 3.0f);
    const Tensor w = random_f32({D}, rng);
    for (NormKind kind : {NormKind::Plain, NormKind::OnePlus, NormKind::NoScale}) {
      const Tensor y = same_on_every_path(backends, [&](Backend& b) {
        Tensor out(DType::F32, x.shape());
        b.rms_norm(x, &w, eps, kind, out);
        return out;
      });
      for (int64_t r = 0; r < 5; ++r) {
        double ss = 0;
        for (int64_t i = 0; i < D; ++i) ss += double(x.data<float>()[r * D + i]) * x.data<float>()[r * D + i];
        const double inv = 1.0 / std::sqrt(ss / D + eps);
        for (int64_t i = 0; i < D; ++i) {
          const double wi = w.data<float>()[i];
          const double g = kind == NormKind::Plain ? wi : kind == NormKind::OnePlus ? 1.0 + wi : 1.0;
          const double want = x.data<float>()[r * D + i] * inv * g;
          ASSERT_NEAR(y.data<float>()[r * D + i], want, 8 * kUlp * std::fabs(want) + 1e-30)
              << "D=" << D << " kind=" << int(kind);
        }
      }
    }
  }
}

TEST(CpuOps, RmsNormInPlaceAndWithNarrowWeights) {
  std::mt19937 rng(12);
  auto b = make_cpu_backend(2);
  const Tensor x = random_f32({3, 40}, rng);
  const Tensor w = narrowed(random_f32({40}, rng), DType::BF16);
  const auto wv = widened(w);
  Tensor w32(DType::F32, {40});
  std::copy(wv.begin(), wv.end(), w32.data<float>());
  Tensor separate(DType::F32, x.shape());
  b->rms_norm(x, &w32, 1e-6f, NormKind::Plain, separate);
  Tensor in_place = copy_of(x);
  b->rms_norm(in_place, &w, 1e-6f, NormKind::Plain, in_place);
  for (int64_t i = 0; i < x.numel(); ++i)
    ASSERT_EQ(float_bits(in_place.data<float>()[i]), float_bits(separate.data<float>()[i]));
}

TEST(CpuOps, RopeMatchesRotateHalfInDouble) {
  std::mt19937 rng(13);
  auto backends = all_backends();
  for (int64_t hd : {8, 32, 512}) {
    const int64_t heads = 3, half = hd / 2;
    RopeFrequencies f{int(hd), {}};
    for (int64_t i = 0; i < half; ++i)  // proportional style: the upper pairs are identity
      f.inv_freq.push_back(i < half / 2 ? float(std::pow(10000.0, -2.0 * double(i) / double(hd))) : 0.0f);
    const std::vector<int64_t> positions = {0, 1, 7, 4095, 131071};
    const int64_t T = int64_t(positions.size());
    const Tensor x = random_f32({T, heads, hd}, rng);
    const Tensor y = same_on_every_path(backends, [&](Backend& b) {
      Tensor out = copy_of(x);
      b.rope(out, positions, f);
      return out;
    });
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < half; ++i) {
          const float angle = float(positions[t]) * f.inv_freq[i];  // HF forms the angle in f32
          const double c = std::cos(double(angle)), s = std::sin(double(angle));
          const int64_t base = (t * heads + h) * hd;
          const double a = x.data<float>()[base + i], bb = x.data<float>()[base + i + half];
          const double tol = 4 * kUlp * (std::fabs(a) + std::fabs(bb));
          ASSERT_NEAR(y.data<float>()[base + i], a * c - bb * s, tol) << "hd=" << hd << " t=" << t;
          ASSERT_NEAR(y.data<float>()[base + i + half], bb * c + a * s, tol) << "hd=" << hd << " t=" << t;
          if (f.inv_freq[i] == 0.0f) {
            ASSERT_EQ(y.data<float>()[base + i], float(a));
            ASSERT_EQ(y.data<float>()[base + i + half], float(bb));
          }
        }
  }
}

TEST(CpuOps, TanhIsWithinThreeUlpAndAgreesAcrossPaths) {
  std::vector<float> xs = {0.0f, -0.0f, 1e-40f, -1e-40f, 0.4999999f, 0.5f, 0.5000001f, 9.0f, 9.1f, 10.0f,
                           88.0f, 1e30f, std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity()};
  for (double m = 1e-9; m < 30.0; m *= 1.0007) {
    xs.push_back(float(m));
    xs.push_back(float(-m));
  }
  std::vector<float> first;
  for (cpu::Isa isa : cpu::supported_isas()) {
    std::vector<float> out(xs.size());
    cpu::kernels_for(isa).tanh(xs.data(), int64_t(xs.size()), out.data());
    if (first.empty()) {
      first = out;
      int64_t worst = 0;
      for (std::size_t i = 0; i < xs.size(); ++i) {
        const float want = float(std::tanh(double(xs[i])));
        worst = std::max(worst, ulp_distance(out[i], want));
        ASSERT_LE(ulp_distance(out[i], want), 3) << "tanh(" << xs[i] << ") = " << out[i] << ", want " << want;
        ASSERT_EQ(std::signbit(out[i]), std::signbit(xs[i])) << xs[i];
      }
      RecordProperty("tanh_max_ulp", int(worst));
    }
    for (std::size_t i = 0; i < xs.size(); ++i)
      ASSERT_EQ(float_bits(out[i]), float_bits(first[i])) << cpu::isa_name(isa) << " tanh(" << xs[i] << ")";
    float nan = std::numeric_limits<float>::quiet_NaN(), r;
    cpu::kernels_for(isa).tanh(&nan, 1, &r);
    EXPECT_TRUE(std::isnan(r));
  }
}

TEST(CpuOps, GeluTanhMulMatchesPytorchFormulaInDouble) {
  std::mt19937 rng(14);
  auto backends = all_backends();
  const int64_t n = 3000;
  Tensor gate = random_f32({3, n / 3}, rng, 4.0f);
  gate.data<float>()[0] = -12.0f;  // deep negative tail: tanh saturates
  gate.data<float>()[1] = 12.0f;
  gate.data<float>()[2] = 0.0f;
  const Tensor up = random_f32({3, n / 3}, rng);
  const Tensor y = same_on_every_path(backends, [&](Backend& b) {
    Tensor out(DType::F32, gate.shape());
    b.gelu_tanh_mul(gate, up, out);
    return out;
  });
  for (int64_t i = 0; i < n; ++i) {
    const double x = gate.data<float>()[i], u = up.data<float>()[i];
    const double want = 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))) * u;
    // 1 + tanh cancels for negative x, so the error scales with |x·u|.
    ASSERT_NEAR(y.data<float>()[i], want, 4 * kUlp * (std::fabs(want) + std::fabs(x * u))) << "x=" << x;
  }
  // out may alias gate.
  Tensor aliased = copy_of(gate);
  backends[0].backend->gelu_tanh_mul(aliased, up, aliased);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(float_bits(aliased.data<float>()[i]), float_bits(y.data<float>()[i]));
}

TEST(CpuOps, SoftcapMatchesCapTimesTanh) {
  std::mt19937 rng(15);
  auto backends = all_backends();
  const Tensor logits = random_f32({2, 1001}, rng, 40.0f);
  const float cap = 30.0f;
  const Tensor y = same_on_every_path(backends, [&](Backend& b) {
    Tensor out = copy_of(logits);
    b.softcap(out, cap);
    return out;
  });
  for (int64_t i = 0; i < logits.numel(); ++i) {
    const float want = float(cap * std::tanh(double(logits.data<float>()[i]) / cap));
    ASSERT_LE(ulp_distance(y.data<float>()[i], want), 4) << logits.data<float>()[i];
  }
}

TEST(CpuOps, AddScaleAndEmbedAreExactlyOneRoundingPerElement) {
  std::mt19937 rng(16);
  auto backends = all_backends();
  const Tensor a = random_f32({7, 333}, rng), c = random_f32({7, 333}, rng);
  const Tensor sum = same_on_every_path(backends, [&](Backend& b) {
    Tensor out = copy_of(a);
    b.add(out, c);
    return out;
  });
  const Tensor scaled = same_on_every_path(backends, [&](Backend& b) {
    Tensor out = copy_of(a);
    b.scale(out, 0.37f);
    return out;
  });
  for (int64_t i = 0; i < a.numel(); ++i) {
    ASSERT_EQ(sum.data<float>()[i], a.data<float>()[i] + c.data<float>()[i]);
    ASSERT_EQ(scaled.data<float>()[i], a.data<float>()[i] * 0.37f);
  }
  const Tensor table32 = random_f32({50, 37}, rng);
  const std::vector<int32_t> ids = {3, 0, 49, 3};
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
    const Tensor table = dt == DType::F32 ? table32 : narrowed(table32, dt);
    const auto values = widened(table);
    const Tensor out = same_on_every_path(backends, [&](Backend& b) {
      Tensor o(DType::F32, {4, 37});
      b.embed(ids, table, 39.25f, o);
      return o;
    });
    for (int64_t t = 0; t < 4; ++t)
      for (int64_t d = 0; d < 37; ++d) ASSERT_EQ(out.data<float>()[t * 37 + d], values[ids[t] * 37 + d] * 39.25f);
  }
}

TEST(CpuOps, MoeRouteMatchesSoftmaxTopKInDouble) {
  std::mt19937 rng(17);
  auto backends = all_backends();
  const int64_t T = 40, E = 16;
  const int k = 4;
  const Tensor logits = random_f32({T, E}, rng, 2.0f);
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  Tensor scale(DType::F32, {E});
  for (int64_t e = 0; e < E; ++e) scale.data<float>()[e] = u(rng);
  for (auto& b : backends) {
    std::vector<int32_t> experts(T * k);
    std::vector<float> weights(T * k);
    b.backend->moe_route(logits, k, &scale, experts, weights);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> p(E);
      double max = -1e300, total = 0;
      for (int64_t e = 0; e < E; ++e) max = std::max(max, double(logits.data<float>()[t * E + e]));
      for (int64_t e = 0; e < E; ++e) total += p[e] = std::exp(logits.data<float>()[t * E + e] - max);
      std::vector<int> order(E);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int i, int j) { return p[i] > p[j]; });
      double chosen = 0;
      for (int j = 0; j < k; ++j) chosen += p[order[j]];
      for (int j = 0; j < k; ++j) {
        ASSERT_EQ(experts[t * k + j], order[j]) << b.label() << " token " << t;
        const double want = p[order[j]] / chosen * scale.data<float>()[order[j]];
        ASSERT_NEAR(weights[t * k + j], want, 1e-6 * want) << b.label();
      }
    }
  }
}

TEST(CpuOps, MoeRouteBreaksTiesTowardTheLowerIndex) {
  auto b = make_cpu_backend(1);
  Tensor logits(DType::F32, {1, 6});
  const float values[] = {0.5f, 2.0f, 0.5f, 2.0f, 2.0f, -1.0f};
  std::copy(std::begin(values), std::end(values), logits.data<float>());
  std::vector<int32_t> experts(4);
  std::vector<float> weights(4);
  b->moe_route(logits, 4, nullptr, experts, weights);
  EXPECT_EQ(experts, (std::vector<int32_t>{1, 3, 4, 0}));
  EXPECT_EQ(weights[0], weights[1]);
  EXPECT_EQ(weights[1], weights[2]);
  EXPECT_NEAR(weights[0] * 3 + weights[3], 1.0, 1e-6);
}

TEST(CpuOps, GatherAndScatterAddFollowTheirDefinitions) {
  std::mt19937 rng(18);
  auto backends = all_backends();
  const Tensor src = random_f32({6, 1100}, rng);
  const std::vector<int32_t> rows = {5, 0, 5, 2, 0};
  const std::vector<float> weights = {0.25f, -1.5f, 3.0f, 0.7f, 0.1f};
  const Tensor base = random_f32({6, 1100}, rng);
  const Tensor updates = random_f32({5, 1100}, rng);
  const Tensor gathered = same_on_every_path(backends, [&](Backend& b) {
    Tensor out(DType::F32, {5, 1100});
    b.gather_rows(src, rows, out);
    return out;
  });
  const Tensor scattered = same_on_every_path(backends, [&](Backend& b) {
    Tensor dst = copy_of(base);
    b.scatter_add_rows(dst, rows, weights, updates);
    return dst;
  });
  Tensor want = copy_of(base);
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (int64_t d = 0; d < 1100; ++d) {
      ASSERT_EQ(gathered.data<float>()[i * 1100 + d], src.data<float>()[rows[i] * 1100 + d]);
      float& acc = want.data<float>()[rows[i] * 1100 + d];
      acc = acc + weights[i] * updates.data<float>()[i * 1100 + d];
    }
  for (int64_t i = 0; i < want.numel(); ++i)
    ASSERT_EQ(float_bits(scattered.data<float>()[i]), float_bits(want.data<float>()[i])) << i;
}

TEST(CpuOps, BadArgumentsGiveErrorsNamingTheOperation) {
  auto b = make_cpu_backend(1);
  Tensor x(DType::F32, {2, 8}), other(DType::F32, {2, 9}), table(DType::BF16, {10, 8});
  Tensor out(DType::F32, {2, 8});
  const std::vector<int32_t> bad_ids = {1, 10};
  EXPECT_NE(error_of([&] { b->embed(bad_ids, table, 1.0f, out); }).find("embed: token id 10"), std::string::npos);
  EXPECT_NE(error_of([&] { b->rms_norm(x, nullptr, 1e-6f, NormKind::Plain, out); }).find("rms_norm"),
            std::string::npos);
  EXPECT_NE(error_of([&] { b->rms_norm(x, &other, 1e-6f, NormKind::Plain, out); }).find("rms_norm: weight"),
            std::string::npos);
  const std::vector<int64_t> positions = {0, 1};
  EXPECT_NE(error_of([&] { b->rope(x, positions, RopeFrequencies{8, {1.0f}}); }).find("rope: inv_freq"),
            std::string::npos);
  EXPECT_NE(error_of([&] { b->rope(x, std::vector<int64_t>{0, -1}, RopeFrequencies{8, {1, 1, 1, 1}}); })
                .find("negative"),
            std::string::npos);
  Tensor heads(DType::F32, {2, 1, 8});  // head_dim 8, but freqs claim 4
  EXPECT_NE(error_of([&] { b->rope(heads, positions, RopeFrequencies{4, {1, 1}}); }).find("rope: x"),
            std::string::npos);
  EXPECT_NE(error_of([&] { b->gelu_tanh_mul(x, other, out); }).find("gelu_tanh_mul"), std::string::npos);
  EXPECT_NE(error_of([&] { b->add(x, other); }).find("add"), std::string::npos);
  EXPECT_NE(error_of([&] { b->softcap(x, 0.0f); }).find("softcap"), std::string::npos);
  std::vector<int32_t> experts(2);
  std::vector<float> weights(2);
  EXPECT_NE(error_of([&] { b->moe_route(x, 9, nullptr, experts, weights); }).find("moe_route: top_k"),
            std::string::npos);
  Tensor nan_logits(DType::F32, {1, 2});
  nan_logits.data<float>()[1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_NE(error_of([&] { b->moe_route(nan_logits, 1, nullptr, std::span(experts).first(1),
                                        std::span(weights).first(1)); })
                .find("NaN"),
            std::string::npos);
  Tensor gathered(DType::F32, {2, 8});
  EXPECT_NE(error_of([&] { b->gather_rows(x, bad_ids, gathered); }).find("gather_rows: row 10"), std::string::npos);
  const std::vector<float> two = {1, 1};
  EXPECT_NE(error_of([&] { b->scatter_add_rows(out, bad_ids, two, x); }).find("scatter_add_rows: row 10"),
            std::string::npos);
  EXPECT_NE(error_of([&] { b->scatter_add_rows(out, std::vector<int32_t>{0}, two, x); }).find("weights"),
            std::string::npos);
}

}  // namespace
}  // namespace rowlm
