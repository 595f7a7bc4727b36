#include "kv/kv_cache.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kv/kv_test_util.h"

namespace rowlm::kv {
namespace {

using testing::append;
using testing::layer_spec;
using testing::make_kv;
using testing::options_for;
using testing::reference_attention;

std::vector<float> random_q(std::size_t n, uint64_t seed) {
  std::vector<float> q(n);
  for (float& x : q) x = testing::unit_float(seed);
  return q;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - want[i]) / (1.0 + std::fabs(want[i]));
    worst = std::max(worst, err);
  }
  EXPECT_LT(worst, 2e-5) << what;
}

struct Case {
  const char* codec;
  int head_dim;
  int window;
  int block_size;
  int heads, kv_heads;
  float softcap;
};

// Every codec, full and window layers, decode and prefill (a pending chunk
// attending to itself causally), GQA, odd head_dim and block sizes: the
// kernel equals the dense double-precision reference over the stored values.
TEST(Attention, MatchesDenseReference) {
  const std::vector<Case> cases = {
      {"f32", 20, 0, 16, 4, 2, 0}, {"bf16", 64, 0, 16, 4, 1, 0},  {"f16", 48, 7, 5, 2, 2, 0},
      {"q8", 64, 0, 16, 4, 2, 0},  {"q4:32", 64, 9, 16, 2, 1, 0}, {"q4:64", 128, 0, 32, 4, 2, 0},
      {"q8:128", 128, 13, 8, 2, 2, 0}, {"bf16", 16, 4, 16, 4, 2, 0}, {"bf16", 32, 0, 16, 2, 1, 30.0f},
  };
  for (const Case& c : cases) {
    const std::string what = std::string(c.codec) + " hd" + std::to_string(c.head_dim) + " w" +
                             std::to_string(c.window) + " B" + std::to_string(c.block_size);
    KvCache cache(options_for({layer_spec(c.kv_heads, c.head_dim, c.window, c.codec)}, c.block_size), testing::backend());
    const RowId a = cache.create_row(), b = cache.create_row();
    append(cache, a, 37, 1);
    append(cache, b, 3, 2);
    AttentionParams p{c.heads, c.head_dim, c.window, 1.0f / std::sqrt(float(c.head_dim)), c.softcap};
    // Decode: one query per row at its last stored position.
    {
      std::vector<AttentionQuery> qs = {{a, 36}, {b, 2}};
      const auto q = random_q(qs.size() * std::size_t(c.heads * c.head_dim), 11);
      std::vector<float> out(q.size());
      testing::attend_host(cache, 0, qs, q.data(), p, out.data());
      for (std::size_t t = 0; t < qs.size(); ++t) {
        const auto want = reference_attention(cache, 0, qs[t], q.data() + t * c.heads * c.head_dim, p);
        expect_close({out.begin() + long(t * c.heads * c.head_dim), out.begin() + long((t + 1) * c.heads * c.head_dim)},
                     want, what + " decode");
      }
    }
    // Prefill: a chunk of 21 tokens for row b and 2 for row a in one step.
    {
      const RowId rows[2] = {b, a};
      const int32_t counts[2] = {21, 2};
      cache.begin_step(rows, counts);
      std::vector<float> k, v;
      for (int i = 0; i < 2; ++i) {
        make_kv(cache.layer(0), 5 + uint64_t(i), 0, cache.length(rows[i]), counts[i], k, v);
        testing::write_host(cache, 0, rows[i], cache.length(rows[i]), counts[i], k.data(), v.data());
      }
      std::vector<AttentionQuery> qs;
      for (int i = 0; i < 2; ++i)
        for (int t = 0; t < counts[i]; ++t) qs.push_back({rows[i], cache.length(rows[i]) + t});
      const auto q = random_q(qs.size() * std::size_t(c.heads * c.head_dim), 12);
      std::vector<float> out(q.size());
      testing::attend_host(cache, 0, qs, q.data(), p, out.data());
      for (std::size_t t = 0; t < qs.size(); ++t) {
        const auto want = reference_attention(cache, 0, qs[t], q.data() + t * c.heads * c.head_dim, p);
        expect_close({out.begin() + long(t * c.heads * c.head_dim), out.begin() + long((t + 1) * c.heads * c.head_dim)},
                     want, what + " prefill query " + std::to_string(t));
      }
      cache.end_step();
    }
  }
}

// Donor views: a query may read a storage layer through a key limit (a draft
// model reading the target's rows); the result equals the reference over
// exactly those keys, and a limit that leaves no key gives zeros.
TEST(Attention, KeyLimitReadsOnlyTheDonorsPrefix) {
  KvCache cache(options_for({layer_spec(1, 32, 0, "bf16")}), testing::backend());
  const RowId r = cache.create_row();
  append(cache, r, 40, 3);
  AttentionParams p{2, 32, 0, 0.2f, 0.0f};
  std::vector<AttentionQuery> qs = {{r, 45, 40}, {r, 50, 17}, {r, 10, 0}};
  const auto q = random_q(qs.size() * 64, 4);
  std::vector<float> out(q.size());
  testing::attend_host(cache, 0, qs, q.data(), p, out.data());
  for (std::size_t t = 0; t < qs.size(); ++t)
    expect_close({out.begin() + long(t * 64), out.begin() + long(t * 64 + 64)},
                 reference_attention(cache, 0, qs[t], q.data() + t * 64, p), "key limit");
  for (int i = 128; i < 192; ++i) EXPECT_EQ(out[std::size_t(i)], 0.0f);
}

std::vector<float> run(const KvCache& cache, int layer, const std::vector<AttentionQuery>& qs, const std::vector<float>& q,
                       const AttentionParams& p) {
  std::vector<float> out(q.size());
  testing::attend_host(cache, layer, qs, q.data(), p, out.data());
  return out;
}

// A token's output is bitwise the same whatever other rows exist, where its
// blocks sit, the order rows joined, the thread count and the ISA path
// (each backend holds its own copy of the same rows).
TEST(Attention, BitwiseInvariantToBatchPlacementThreadsAndIsa) {
  std::vector<std::unique_ptr<Backend>> by_threads;
  for (int threads : {1, 2, 3}) by_threads.push_back(make_cpu_backend(threads));
  std::vector<std::pair<cpu::Isa, std::unique_ptr<Backend>>> by_isa;
  for (cpu::Isa isa : cpu::supported_isas()) by_isa.emplace_back(isa, make_cpu_backend(2, isa));
  for (const char* codec : {"bf16", "q4:32", "q8", "f16", "f32"}) {
    for (int window : {0, 11}) {
      const LayerSpec spec = layer_spec(2, 64, window, codec);
      const AttentionParams p{4, 64, window, 0.125f, 0.0f};
      const auto q = random_q(4 * 64, 99);

      // Alone: the row is the only one, appended in one chunk.
      KvCache solo(options_for({spec}), *by_threads[0]);
      const RowId s = solo.create_row();
      append(solo, s, 50, 77);
      const auto want = run(solo, 0, {{s, 49}}, q, p);

      // Crowded: other rows join first and interleave their appends, so the
      // row's blocks land elsewhere; it is appended in uneven pieces.
      for (const auto& backend : by_threads) {
        KvCache busy(options_for({spec}), *backend);
        const RowId o1 = busy.create_row();
        append(busy, o1, 20, 5);
        const RowId o2 = busy.create_row();
        append(busy, o2, 9, 6);
        const RowId r = busy.create_row();
        int done = 0;
        for (int piece : {7, 1, 13, 16, 13}) {
          // Only the row's own positions decide its K/V (make_kv by position).
          const int32_t c = piece;
          busy.begin_step({&r, 1}, {&c, 1});
          std::vector<float> k, v;
          make_kv(spec, 77, 0, done, piece, k, v);
          testing::write_host(busy, 0, r, done, piece, k.data(), v.data());
          busy.end_step();
          done += piece;
          append(busy, o1, 3, 8);
        }
        ASSERT_EQ(busy.length(r), 50);
        std::vector<int32_t> placed_busy, placed_solo;
        for (int b = 0; b < 4; ++b) {
          placed_busy.push_back(busy.physical_block(0, r, b));
          placed_solo.push_back(solo.physical_block(0, s, b));
        }
        EXPECT_NE(placed_busy, placed_solo) << "the test meant the row's blocks to sit elsewhere";
        std::vector<AttentionQuery> crowd = {{o1, busy.length(o1) - 1}, {r, 49}, {o2, 8}};
        std::vector<float> q3(3 * 4 * 64);
        std::copy(q.begin(), q.end(), q3.begin() + 256);
        const auto got = run(busy, 0, crowd, q3, p);
        EXPECT_EQ(0, std::memcmp(got.data() + 256, want.data(), 256 * sizeof(float)))
            << codec << " w" << window << " threads " << backend->host_threads();
      }
      for (const auto& [isa, backend] : by_isa) {
        KvCache alone(options_for({spec}), *backend);
        const RowId a = alone.create_row();
        append(alone, a, 50, 77);
        const auto got = run(alone, 0, {{a, 49}}, q, p);
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)))
            << codec << " w" << window << " isa " << cpu::isa_name(isa);
      }
    }
  }
}

// Rows that switched precision (their blocks in the switch pool, in the
// switch codec) and rows that did not, interleaved in one attend call: each
// query's output is bitwise that of its row alone, and a switched row's
// equals the dense reference over what it stores (positions before the
// switch re-encoded from the layer's codec, later ones written in the new one).
TEST(Attention, SwitchedRowsReadTheirCodecBesideUnswitchedOnes) {
  for (int window : {0, 11}) {
    for (const char* to : {"q8:32", "q4:64"}) {
      const LayerSpec spec = layer_spec(2, 64, window, "bf16");
      CacheOptions opt = options_for({spec}, 16);  // (a window row keeps the last query's keys)
      opt.precision_switch = PrecisionSwitch{20, {parse_codec(to)}};
      const AttentionParams p{4, 64, window, 0.125f, 0.0f};
      // Each row: its length, the seed of its K/V; it switches on passing 20.
      const std::vector<std::pair<int, uint64_t>> shapes = {{15, 3}, {50, 4}, {19, 5}, {30, 6}};
      const auto grow = [](KvCache& c, RowId r, int length, uint64_t seed) {
        while (c.length(r) < length) {
          if (c.switch_due(r)) c.switch_precision(r);
          const int64_t end = c.switched(r) ? length : std::min<int64_t>(length, 20);
          const int n = int(std::min<int64_t>(end - c.length(r), 7));
          const int32_t cnt = n;
          c.begin_step({&r, 1}, {&cnt, 1});
          std::vector<float> k, v;
          make_kv(c.layer(0), seed, 0, c.length(r), n, k, v);
          testing::write_host(c, 0, r, c.length(r), n, k.data(), v.data());
          c.end_step();
        }
      };
      KvCache busy(opt, testing::backend());
      std::vector<RowId> rows;
      for (std::size_t i = 0; i < shapes.size(); ++i) rows.push_back(busy.create_row());
      for (int round = 1; round <= 8; ++round)  // rows grow interleaved, so their blocks mix in the pools
        for (std::size_t i = 0; i < rows.size(); ++i) grow(busy, rows[i], shapes[i].first * round / 8, shapes[i].second);
      std::vector<AttentionQuery> qs;
      for (std::size_t i = 0; i < rows.size(); ++i) qs.push_back({rows[i], shapes[i].first - 1});
      ASSERT_FALSE(busy.switched(rows[0]));
      ASSERT_TRUE(busy.switched(rows[1]));
      ASSERT_FALSE(busy.switched(rows[2]));
      ASSERT_TRUE(busy.switched(rows[3]));
      const auto q = random_q(qs.size() * 4 * 64, 17);
      const auto got = run(busy, 0, qs, q, p);
      for (std::size_t i = 0; i < rows.size(); ++i) {
        const std::string what = std::string(to) + " w" + std::to_string(window) + " row " + std::to_string(i);
        KvCache solo(opt, testing::backend());
        const RowId r = solo.create_row();
        grow(solo, r, shapes[i].first, shapes[i].second);
        const std::vector<float> qi(q.begin() + long(i * 256), q.begin() + long((i + 1) * 256));
        const auto want = run(solo, 0, {{r, shapes[i].first - 1}}, qi, p);
        EXPECT_EQ(0, std::memcmp(got.data() + i * 256, want.data(), 256 * sizeof(float))) << what;
        expect_close(want, reference_attention(solo, 0, {r, shapes[i].first - 1}, qi.data(), p), what);
      }
    }
  }
}

TEST(Attention, RejectsBadRequests) {
  KvCache cache(options_for({layer_spec(2, 32, 8, "bf16")}), testing::backend());
  const RowId r = cache.create_row();
  append(cache, r, 30, 1);
  const auto q = random_q(4 * 32, 1);
  std::vector<float> out(q.size());
  std::vector<AttentionQuery> ok = {{r, 29}};
  EXPECT_THROW(testing::attend_host(cache, 0, ok, q.data(), {4, 16, 8, 1, 0}, out.data()), Error);   // head_dim
  EXPECT_THROW(testing::attend_host(cache, 0, ok, q.data(), {3, 32, 8, 1, 0}, out.data()), Error);   // heads
  EXPECT_THROW(testing::attend_host(cache, 0, ok, q.data(), {4, 32, 0, 1, 0}, out.data()), Error);   // full over window
  EXPECT_THROW(testing::attend_host(cache, 0, ok, q.data(), {4, 32, 9, 1, 0}, out.data()), Error);   // wider window
  EXPECT_THROW(testing::attend_host(cache, 1, ok, q.data(), {4, 32, 8, 1, 0}, out.data()), Error);   // layer
  std::vector<AttentionQuery> beyond = {{r, 30}};
  EXPECT_THROW(testing::attend_host(cache, 0, beyond, q.data(), {4, 32, 8, 1, 0}, out.data()), Error);
  std::vector<AttentionQuery> released = {{r, 5}};
  EXPECT_THROW(testing::attend_host(cache, 0, released, q.data(), {4, 32, 8, 1, 0}, out.data()), Error);
  std::vector<AttentionQuery> unknown = {{r + 7, 5}};
  EXPECT_THROW(testing::attend_host(cache, 0, unknown, q.data(), {4, 32, 8, 1, 0}, out.data()), Error);
  EXPECT_NO_THROW(testing::attend_host(cache, 0, ok, q.data(), {4, 32, 4, 1, 0}, out.data()));  // narrower is fine
}

}  // namespace
}  // namespace rowlm::kv
