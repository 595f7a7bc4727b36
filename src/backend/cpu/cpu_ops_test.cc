// The CPU backend's non-matmul operations against double-precision oracles,
// and every ISA path (with 1 and 2 threads) against every other, bitwise.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>

#include "backend/cpu/kernels.h"
#include "backend/cpu/test_util.h"
#include "core/error.h"

namespace rowlm {
namespace {

using testing::all_backends;
using testing::copy_of;
using testing::BackendCase;
using testing::f32_tensor;
using testing::float_bits;
using testing::i32_tensor;
using testing::narrowed;
using testing::random_f32;
using testing::ulp_distance;
using testing::widened;

constexpr double kUlp = 1.0 / (1 << 23);  // spacing of floats in [1, 2)

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

// The CPU backend's profile: each operation's wall time while profiling is
// on, nothing while off, the results unchanged.
TEST(CpuOps, ProfileCountsEachOperationWhileOnAndChangesNoResult) {
  std::mt19937 rng(7);
  auto be = make_cpu_backend(2);
  const Tensor x = random_f32({5, 64}, rng), w = random_f32({24, 64}, rng), g = random_f32({64}, rng);
  const Weight wt = be->prepare_weight(Weight::dense(w));
  Tensor plain(DType::F32, {5, 24}), profiled(DType::F32, {5, 24}), normed(DType::F32, {5, 64});
  be->matmul(x, wt, plain);
  EXPECT_TRUE(be->profile().empty());
  be->set_profiling(true);
  be->matmul(x, wt, profiled);
  be->matmul(x, wt, profiled);
  be->rms_norm(x, &g, 1e-6f, NormKind::Plain, normed);
  be->set_profiling(false);
  be->matmul(x, wt, profiled);
  std::map<std::string, int64_t> launches;
  for (const auto& p : be->profile()) {
    launches[p.op] = p.launches;
    EXPECT_GE(p.seconds, 0.0) << p.op;
  }
  EXPECT_EQ(launches, (std::map<std::string, int64_t>{{"matmul", 2}, {"rms_norm", 1}}));
  EXPECT_EQ(std::memcmp(plain.raw(), profiled.raw(), plain.nbytes()), 0);
  be->clear_profile();
  EXPECT_TRUE(be->profile().empty());
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
    std::vector<float> inv_freq;
    for (int64_t i = 0; i < half; ++i)  // proportional style: the upper pairs are identity
      inv_freq.push_back(i < half / 2 ? float(std::pow(10000.0, -2.0 * double(i) / double(hd))) : 0.0f);
    const std::vector<int32_t> positions = {0, 1, 7, 4095, 131071};
    const int64_t T = int64_t(positions.size());
    const Tensor x = random_f32({T, heads, hd}, rng);
    const Tensor y = same_on_every_path(backends, [&](Backend& b) {
      Tensor out = copy_of(x);
      const auto table = b.make_rope_table(inv_freq);
      table->reserve(131072);
      b.rope(out, i32_tensor(positions), *table);
      return out;
    });
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < half; ++i) {
          const float angle = float(positions[t]) * inv_freq[i];  // HF forms the angle in f32
          const double c = std::cos(double(angle)), s = std::sin(double(angle));
          const int64_t base = (t * heads + h) * hd;
          const double a = x.data<float>()[base + i], bb = x.data<float>()[base + i + half];
          const double tol = 4 * kUlp * (std::fabs(a) + std::fabs(bb));
          ASSERT_NEAR(y.data<float>()[base + i], a * c - bb * s, tol) << "hd=" << hd << " t=" << t;
          ASSERT_NEAR(y.data<float>()[base + i + half], bb * c + a * s, tol) << "hd=" << hd << " t=" << t;
          if (inv_freq[i] == 0.0f) {
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
    b.gated_activation(gate, up, Activation::GeluTanh, out);
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
  backends[0].backend->gated_activation(aliased, up, Activation::GeluTanh, aliased);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(float_bits(aliased.data<float>()[i]), float_bits(y.data<float>()[i]));
}

// SiLU (Llama, Qwen): x·sigmoid(x)·up against the formula in double, from
// the deep negative tail (where e^x underflows) to large positive x; every
// ISA path gives the same bits.
TEST(CpuOps, SiluMulMatchesTheFormulaInDouble) {
  std::mt19937 rng(21);
  auto backends = all_backends();
  const int64_t n = 3000;
  Tensor gate = random_f32({3, n / 3}, rng, 6.0f);
  const float special[] = {-120.0f, -88.0f, -87.0f, -30.0f, -0.0f, 0.0f, 1e-30f, -1e-30f, 30.0f, 120.0f};
  std::copy(std::begin(special), std::end(special), gate.data<float>());
  const Tensor up = random_f32({3, n / 3}, rng);
  const Tensor y = same_on_every_path(backends, [&](Backend& b) {
    Tensor out(DType::F32, gate.shape());
    b.gated_activation(gate, up, Activation::Silu, out);
    return out;
  });
  for (int64_t i = 0; i < n; ++i) {
    const double x = gate.data<float>()[i], u = up.data<float>()[i];
    const double want = x / (1.0 + std::exp(-x)) * u;
    // Below x = -87 the sigmoid's e^x is held at e^-87: an absolute error
    // under 1e-36·|x·u|, far below anything a logit could see.
    ASSERT_NEAR(y.data<float>()[i], want, 4 * kUlp * std::fabs(want) + 1e-36 * std::fabs(x * u)) << "x=" << x;
  }
  EXPECT_TRUE(std::signbit(y.data<float>()[4]) != std::signbit(up.data<float>()[4]) || y.data<float>()[4] == 0.0f);
}

// add_bias adds the same vector to every row, exactly.
TEST(CpuOps, AddBiasAddsToEveryRow) {
  std::mt19937 rng(22);
  auto backends = all_backends();
  const Tensor y0 = random_f32({5, 70}, rng), bias = random_f32({70}, rng);
  const Tensor y = same_on_every_path(backends, [&](Backend& b) {
    Tensor out = copy_of(y0);
    b.add_bias(out, bias);
    return out;
  });
  for (int64_t m = 0; m < 5; ++m)
    for (int64_t n = 0; n < 70; ++n)
      ASSERT_EQ(y.data<float>()[m * 70 + n], y0.data<float>()[m * 70 + n] + bias.data<float>()[n]);
}

// moe_experts: every token's output is the weighted sum of its experts'
// gated MLPs, against a plain loop in double; the same bits on every path
// and for a token alone as in the batch.
TEST(CpuOps, MoeExpertsSumTheRoutedExperts) {
  std::mt19937 rng(23);
  auto backends = all_backends();
  const int64_t T = 9, H = 24, I = 16, E = 5, K = 2;
  ExpertBank bank;
  std::vector<Tensor> gate_w, up_w, down_w;
  for (int64_t e = 0; e < E; ++e) {
    gate_w.push_back(narrowed(random_f32({I, H}, rng, 0.3f), DType::BF16));
    up_w.push_back(narrowed(random_f32({I, H}, rng, 0.3f), DType::BF16));
    down_w.push_back(narrowed(random_f32({H, I}, rng, 0.3f), DType::BF16));
    bank.gate.push_back(Weight::dense(gate_w.back()));
    bank.up.push_back(Weight::dense(up_w.back()));
    bank.down.push_back(Weight::dense(down_w.back()));
  }
  const Tensor x = random_f32({T, H}, rng);
  Tensor experts(DType::I32, {T, K}), weights(DType::F32, {T, K});
  for (int64_t t = 0; t < T; ++t) {
    experts.data<int32_t>()[t * K] = int32_t(t % E);
    experts.data<int32_t>()[t * K + 1] = int32_t((t * 3 + 1) % E == t % E ? (t + 1) % E : (t * 3 + 1) % E);
    weights.data<float>()[t * K] = 0.6f;
    weights.data<float>()[t * K + 1] = 0.4f;
  }
  const Tensor y = same_on_every_path(backends, [&](Backend& b) {
    Tensor out(DType::F32, {T, H});
    b.moe_experts(x, experts, weights, bank, Activation::Silu, out);
    return out;
  });
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> want(std::size_t(H), 0.0);
    for (int64_t j = 0; j < K; ++j) {
      const int e = experts.data<int32_t>()[t * K + j];
      const auto g = widened(gate_w[std::size_t(e)]), u = widened(up_w[std::size_t(e)]), d = widened(down_w[std::size_t(e)]);
      std::vector<double> act(static_cast<std::size_t>(I));
      for (int64_t i = 0; i < I; ++i) {
        double gs = 0, us = 0;
        for (int64_t h = 0; h < H; ++h) {
          gs += double(g[std::size_t(i * H + h)]) * x.data<float>()[t * H + h];
          us += double(u[std::size_t(i * H + h)]) * x.data<float>()[t * H + h];
        }
        act[std::size_t(i)] = gs / (1.0 + std::exp(-gs)) * us;
      }
      for (int64_t h = 0; h < H; ++h) {
        double o = 0;
        for (int64_t i = 0; i < I; ++i) o += double(d[std::size_t(h * I + i)]) * act[std::size_t(i)];
        want[std::size_t(h)] += double(weights.data<float>()[t * K + j]) * o;
      }
    }
    for (int64_t h = 0; h < H; ++h) ASSERT_NEAR(y.data<float>()[t * H + h], want[std::size_t(h)], 1e-4) << t << "," << h;
  }
  // A token alone gives the bits it gives in the batch.
  for (int64_t t = 0; t < T; ++t) {
    Tensor out(DType::F32, {1, H});
    backends[0].backend->moe_experts(x.rows(t, t + 1), experts.rows(t, t + 1), weights.rows(t, t + 1), bank,
                                     Activation::Silu, out);
    for (int64_t h = 0; h < H; ++h) ASSERT_EQ(float_bits(out.data<float>()[h]), float_bits(y.data<float>()[t * H + h]));
  }
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
      b.embed(i32_tensor(ids), Weight::dense(table), 39.25f, o);
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
    Tensor expert_ids(DType::I32, {T, k}), expert_weights(DType::F32, {T, k});
    b.backend->moe_route(logits, k, /*renormalize=*/true, &scale, expert_ids, expert_weights);
    const int32_t* experts = expert_ids.data<int32_t>();
    const float* weights = expert_weights.data<float>();
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
  Tensor expert_ids(DType::I32, {1, 4}), expert_weights(DType::F32, {1, 4});
  b->moe_route(logits, 4, /*renormalize=*/true, nullptr, expert_ids, expert_weights);
  const std::vector<int32_t> experts(expert_ids.data<int32_t>(), expert_ids.data<int32_t>() + 4);
  const float* weights = expert_weights.data<float>();
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
    b.gather_rows(src, i32_tensor(rows), out);
    return out;
  });
  const Tensor scattered = same_on_every_path(backends, [&](Backend& b) {
    Tensor dst = copy_of(base);
    b.scatter_add_rows(dst, i32_tensor(rows), f32_tensor(weights), updates);
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

// The argmax code of a row (argmax_code.h) by its definition, one entry at
// a time: the oracle for argmax_rows on both backends.
int32_t argmax_code_by_definition(const float* x, int64_t n) {
  bool finite = false;
  int64_t best = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) return int32_t(-2 - 2 * i);
    if (x[i] == std::numeric_limits<float>::infinity()) return int32_t(-3 - 2 * i);
    finite = finite || std::isfinite(x[i]);
    if (best < 0 || x[i] > x[best]) best = i;
  }
  return finite ? int32_t(best) : -1;
}

// Rows of random lengths (1 to 262,144) with repeated maxima, ±0, -inf
// runs, and now and then a NaN or +inf: every path's codes are the
// definition's.
TEST(CpuOps, ArgmaxRowsGiveTheFirstLargestOrTheFirstBadEntry) {
  std::mt19937 rng(41);
  auto backends = all_backends();
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t V : {1, 3, 17, 1000, 1024, 1025, 262144}) {
    const int64_t n = 9;
    Tensor x = random_f32({n, V}, rng);
    float* rows = x.data<float>();
    std::uniform_int_distribution<int64_t> at(0, V - 1);
    rows[0 * V + at(rng)] = 7.0f;  // row 0: one clear max, and its value again later
    rows[0 * V + V - 1] = 7.0f;
    for (int64_t i = 0; i < V; ++i) rows[1 * V + i] = i % 2 ? -0.0f : 0.0f;  // row 1: ±0 only
    for (int64_t i = 0; i < V; ++i) rows[2 * V + i] = -inf;                  // row 2: no finite entry
    rows[3 * V + at(rng)] = nan;                                             // row 3: a NaN
    rows[4 * V + at(rng)] = inf;                                             // row 4: +inf
    const int64_t a = at(rng), b = at(rng);                                  // row 5: both, the first counts
    rows[5 * V + a] = nan;
    rows[5 * V + b] = inf;
    for (int64_t i = 0; i < V; i += 2) rows[6 * V + i] = -inf;  // row 6: -inf among finite values
    rows[7 * V + V - 1] = 100.0f;                               // row 7: the max at the end
    // row 8: as drawn
    for (auto& be : backends) {
      Tensor codes(DType::I32, {n});
      be.backend->argmax_rows(x, codes);
      for (int64_t r = 0; r < n; ++r)
        EXPECT_EQ(codes.data<int32_t>()[r], argmax_code_by_definition(rows + r * V, V))
            << be.label() << " V " << V << " row " << r;
    }
  }
  Tensor codes(DType::I32, {2});
  EXPECT_NE(error_of([&] { backends[0].backend->argmax_rows(Tensor(DType::F32, {3, 4}), codes); }).find("argmax_rows: codes"),
            std::string::npos);
}

TEST(CpuOps, BadArgumentsGiveErrorsNamingTheOperation) {
  auto b = make_cpu_backend(1);
  Tensor x(DType::F32, {2, 8}), other(DType::F32, {2, 9}), table(DType::BF16, {10, 8});
  Tensor out(DType::F32, {2, 8});
  const Tensor bad_ids = i32_tensor({1, 10});
  EXPECT_NE(error_of([&] { b->embed(bad_ids, Weight::dense(table), 1.0f, out); }).find("embed: token id 10"),
            std::string::npos);
  EXPECT_NE(error_of([&] { b->rms_norm(x, nullptr, 1e-6f, NormKind::Plain, out); }).find("rms_norm"),
            std::string::npos);
  EXPECT_NE(error_of([&] { b->rms_norm(x, &other, 1e-6f, NormKind::Plain, out); }).find("rms_norm: weight"),
            std::string::npos);
  const Tensor positions = i32_tensor({0, 1});
  EXPECT_NE(error_of([&] { b->make_rope_table({}); }).find("make_rope_table"), std::string::npos);
  const auto four = b->make_rope_table(std::vector<float>{1, 1, 1, 1});
  EXPECT_NE(error_of([&] { b->rope(x, i32_tensor({0, -1}), *four); }).find("negative"), std::string::npos);
  Tensor heads(DType::F32, {2, 1, 8});  // head_dim 8, but freqs claim 4
  const auto two_freqs = b->make_rope_table(std::vector<float>{1, 1});
  EXPECT_NE(error_of([&] { b->rope(heads, positions, *two_freqs); }).find("rope: x"), std::string::npos);
  EXPECT_NE(error_of([&] { b->gated_activation(x, other, Activation::GeluTanh, out); }).find("gated_activation"),
            std::string::npos);
  EXPECT_NE(error_of([&] { b->add(x, other); }).find("add"), std::string::npos);
  EXPECT_NE(error_of([&] { b->softcap(x, 0.0f); }).find("softcap"), std::string::npos);
  Tensor experts(DType::I32, {2, 1}), weights(DType::F32, {2, 1});
  EXPECT_NE(error_of([&] { b->moe_route(x, 9, true, nullptr, experts, weights); }).find("moe_route: top_k"),
            std::string::npos);
  Tensor nan_logits(DType::F32, {1, 2});
  nan_logits.data<float>()[1] = std::numeric_limits<float>::quiet_NaN();
  Tensor one_expert(DType::I32, {1, 1}), one_weight(DType::F32, {1, 1});
  EXPECT_NE(error_of([&] { b->moe_route(nan_logits, 1, true, nullptr, one_expert, one_weight); }).find("NaN"),
            std::string::npos);
  Tensor gathered(DType::F32, {2, 8});
  EXPECT_NE(error_of([&] { b->gather_rows(x, bad_ids, gathered); }).find("gather_rows: row 10"), std::string::npos);
  const Tensor two = f32_tensor({1, 1});
  EXPECT_NE(error_of([&] { b->scatter_add_rows(out, bad_ids, two, x); }).find("scatter_add_rows: row 10"),
            std::string::npos);
  EXPECT_NE(error_of([&] { b->scatter_add_rows(out, i32_tensor({0}), two, x); }).find("weights"),
            std::string::npos);
}

}  // namespace
}  // namespace rowlm
