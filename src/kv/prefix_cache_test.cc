// The prefix cache: content-addressed blocks shared by reference count,
// copy-on-write, LRU eviction under a byte budget and under capacity
// pressure, and window layers that reuse a prefix after the window moved.
// K/V of position p is token * 1000 + p, so a reused block shows whose it is.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <set>
#include <utility>
#include <vector>

#include "core/error.h"
#include "kv/kv_cache.h"
#include "kv/kv_test_util.h"

namespace rowlm::kv {
namespace {

using testing::layer_spec;
using testing::options_for;
using testing::expect_drained;
using testing::stored;

constexpr int kBlockSize = 4;
constexpr int kWindowSize = 5;
constexpr std::size_t kBlockBytes = 2 * 4 * kBlockSize;  // f32, 1 head, 1 dim

float value_of(int32_t token, int64_t pos) { return float(token) * 1000.0f + float(pos); }

KvCache make_cache(std::size_t capacity = 0, std::size_t prefix_bytes = 1 << 20) {
  return KvCache(options_for({layer_spec(1, 1, 0, "f32"), layer_spec(1, 1, kWindowSize, "f32")}, kBlockSize, capacity,
                             prefix_bytes), testing::backend());
}

std::vector<int32_t> prompt(int n, int32_t base) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(base + i % 7);
  return t;
}

// Prefills tokens[length, end) in chunks, publishing after every step.
void prefill(KvCache& c, RowId r, const std::vector<int32_t>& tokens, int64_t end, int chunk, bool publish = true) {
  while (c.length(r) < end) {
    const int64_t first = c.length(r);
    const int32_t n = int32_t(std::min<int64_t>(chunk, end - first));
    c.begin_step({&r, 1}, {&n, 1});
    std::vector<float> kv;
    for (int t = 0; t < n; ++t) kv.push_back(value_of(tokens[std::size_t(first + t)], first + t));
    for (int l = 0; l < c.num_layers(); ++l) testing::write_host(c, l, r, first, n, kv.data(), kv.data());
    c.end_step();
    if (publish) c.publish(r, tokens);
  }
}

void expect_holds(const KvCache& c, RowId r, const std::vector<int32_t>& tokens) {
  for (int l = 0; l < c.num_layers(); ++l)
    for (int64_t p = c.first_position(r, l); p < c.length(r); ++p)
      EXPECT_EQ(stored(c, l, r, p), value_of(tokens[std::size_t(p)], p)) << "layer " << l << " position " << p;
}

TEST(PrefixCache, ReusesPublishedBlocksAndCopiesOnWrite) {
  KvCache c = make_cache();
  const auto T = prompt(37, 10);
  const RowId a = c.create_row();
  c.retain_for_publish(a);
  prefill(c, a, T, 37, 8);
  c.retire(a);
  c.check_consistency();
  EXPECT_GT(c.prefix_cache_bytes(), 0u);
  const std::size_t used = c.used_bytes();

  // Everything but the last token is cached; reuse stops inside block 8.
  const RowId b = c.create_row();
  EXPECT_EQ(c.match_prefix(T, 35), 35);
  EXPECT_EQ(c.attach_prefix(b, T, 35), 35);
  EXPECT_EQ(c.used_bytes(), used) << "attaching allocates nothing";
  EXPECT_EQ(c.first_position(b, 1), 31);
  expect_holds(c, b, T);
  // b diverges at position 35: its write copies the shared block 8.
  auto U = T;
  U[35] = 99;
  const int32_t shared = c.physical_block(0, b, 8);
  prefill(c, b, U, 36, 1, false);
  EXPECT_NE(c.physical_block(0, b, 8), shared);
  expect_holds(c, b, U);
  // The cached block still holds the original tokens.
  const RowId d = c.create_row();
  EXPECT_EQ(c.attach_prefix(d, T, 36), 36);
  expect_holds(c, d, T);
  EXPECT_EQ(c.physical_block(0, d, 8), shared);
  c.check_consistency();
  expect_drained(c);
}

// The peers' failure: once a sliding window has moved on, they re-process
// the whole prompt. Here a window layer needs only the blocks covering the
// last W - 1 positions of the prefix, and publishing keeps them.
TEST(PrefixCache, WindowLayersReuseAPrefixAfterTheWindowMoved) {
  KvCache c = make_cache();
  const auto T = prompt(40, 20);
  const RowId a = c.create_row();
  c.retain_for_publish(a);
  prefill(c, a, T, 40, 8);  // chunks longer than the window
  EXPECT_EQ(c.first_position(a, 1), 36) << "published blocks are released by the row once published";
  c.retire(a);

  // A request sharing 21 tokens reuses 20 (a block boundary); the window
  // layer finds the block holding 16..19 although row a freed it long ago.
  auto V = T;
  V.resize(21);
  V.push_back(5);
  V.push_back(6);
  const RowId b = c.create_row();
  EXPECT_EQ(c.attach_prefix(b, V, int64_t(V.size()) - 1), 20);
  EXPECT_EQ(c.first_position(b, 1), 16);
  expect_holds(c, b, V);
  prefill(c, b, V, int64_t(V.size()), 3, false);
  expect_holds(c, b, V);

  // Without retaining, a chunk longer than the window frees blocks before
  // they can be published: only shorter prefixes remain reusable.
  KvCache plain = make_cache();
  const RowId p = plain.create_row();
  prefill(plain, p, T, 40, 8);
  plain.retire(p);
  const RowId q = plain.create_row();
  EXPECT_LT(plain.attach_prefix(q, V, int64_t(V.size()) - 1), 20);
  expect_drained(plain);
  expect_drained(c);
}

TEST(PrefixCache, EvictsLeastRecentlyUsedUnderItsBudget) {
  // Budget: 24 cache-only blocks. Each 24-token prompt publishes 6 blocks in
  // the full layer and, retained for publishing, 6 in the window layer.
  KvCache c = make_cache(0, 24 * kBlockBytes);
  const std::vector<std::vector<int32_t>> prompts = {prompt(24, 100), prompt(24, 200), prompt(24, 300)};
  auto publish_prompt = [&](const std::vector<int32_t>& P) {
    const RowId r = c.create_row();
    c.retain_for_publish(r);
    prefill(c, r, P, 24, 8);
    c.retire(r);
    EXPECT_LE(c.prefix_cache_bytes(), 24 * kBlockBytes);
    c.check_consistency();
  };
  publish_prompt(prompts[0]);
  publish_prompt(prompts[1]);
  EXPECT_EQ(c.match_prefix(prompts[0], 24), 24);
  EXPECT_EQ(c.match_prefix(prompts[1], 24), 24);
  // Using prompt 0 again makes it the most recently used ...
  const RowId user = c.create_row();
  EXPECT_EQ(c.attach_prefix(user, prompts[0], 24), 24);
  c.retire(user);
  // ... so publishing a third prompt evicts prompt 1, not the older prompt 0.
  publish_prompt(prompts[2]);
  EXPECT_EQ(c.match_prefix(prompts[2], 24), 24);
  EXPECT_EQ(c.match_prefix(prompts[0], 24), 24);
  EXPECT_EQ(c.match_prefix(prompts[1], 24), 0);
  expect_drained(c);
}

// The blocks some attachable prefix of one of `prompts` needs, by the rule
// attach_prefix documents (a full layer needs every block below the length,
// a window layer those covering the last W - 1 positions), over the lengths
// match_prefix says are attachable. Blocks are named by the tokens up to
// their end, so prompts sharing a stem share its blocks.
std::set<std::pair<std::vector<int32_t>, int>> blocks_needed(const KvCache& c,
                                                             const std::vector<std::vector<int32_t>>& prompts) {
  std::set<std::pair<std::vector<int32_t>, int>> needed;
  for (const auto& P : prompts) {
    auto name = [&](int64_t b) { return std::vector<int32_t>(P.begin(), P.begin() + (b + 1) * kBlockSize); };
    for (int64_t m = 1; m <= int64_t(P.size()); ++m) {
      const int64_t L = c.match_prefix(P, m);
      if (L == 0) continue;
      for (int l = 0; l < c.num_layers(); ++l) {
        const int w = c.layer(l).window;
        const int64_t from = w ? std::max<int64_t>(0, L - w + 1) : 0;
        for (int64_t b = from / kBlockSize; from < L && b <= (L - 1) / kBlockSize; ++b) needed.insert({name(b), l});
      }
    }
  }
  return needed;
}

// Prompts sharing a long stem, published one after another into a cache
// whose budget holds fewer than they need: eviction takes whole positions
// of a chain, tail first, and every block left cached serves a prefix that
// can still be attached.
TEST(PrefixCache, EvictsWholeChainPositionsTailFirstAndKeepsNoDeadBlock) {
  constexpr int kBudgetBlocks = 21;
  KvCache c = make_cache(0, kBudgetBlocks * kBlockBytes);
  const auto stem = prompt(24, 500);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 5; ++i) {
    auto P = stem;
    for (int t = 0; t < 20 + 4 * i; ++t) P.push_back(1000 * (i + 1) + t);
    prompts.push_back(P);
    const RowId r = c.create_row();
    c.retain_for_publish(r);
    const int64_t reused = c.attach_prefix(r, P, int64_t(P.size()) - 1);
    if (i > 0) {
      EXPECT_EQ(reused, 24) << "prompt " << i << " reuses the stem";
    }
    expect_holds(c, r, P);
    prefill(c, r, P, int64_t(P.size()), 6);
    c.retire(r);
    c.check_consistency();
    EXPECT_LE(c.prefix_cache_bytes(), kBudgetBlocks * kBlockBytes);
    // Every cached block is one an attachable prefix needs, and no more.
    EXPECT_EQ(c.prefix_cache_blocks(), int64_t(blocks_needed(c, prompts).size())) << "after prompt " << i;
    // Eviction went tail first: the newest prompt keeps its stem and the
    // head of its tail, the whole entry of each position together.
    const int64_t kept = c.match_prefix(P, int64_t(P.size()));
    EXPECT_GE(kept, 24) << "prompt " << i;
    EXPECT_EQ(kept % kBlockSize, 0);
  }
  // The older prompts lost their tails, not their stems.
  for (const auto& P : prompts) EXPECT_GE(c.match_prefix(P, int64_t(P.size())), 24);

  // Capacity pressure evicts on demand by the same rule.
  KvCache tight = make_cache(30 * kBlockBytes, 1 << 20);
  for (int i = 0; i < 3; ++i) {
    const RowId r = tight.create_row();
    tight.retain_for_publish(r);
    tight.attach_prefix(r, prompts[std::size_t(i)], int64_t(prompts[std::size_t(i)].size()) - 1);
    prefill(tight, r, prompts[std::size_t(i)], int64_t(prompts[std::size_t(i)].size()), 6);
    tight.retire(r);
  }
  const RowId big = tight.create_row();
  const auto U = prompt(40, 900);
  prefill(tight, big, U, 40, 8, false);  // 10 + 3 blocks, from evicted prefixes
  expect_holds(tight, big, U);
  tight.check_consistency();
  EXPECT_EQ(tight.prefix_cache_blocks(),
            int64_t(blocks_needed(tight, {prompts[0], prompts[1], prompts[2]}).size()));
  EXPECT_GT(tight.prefix_cache_blocks(), 0);
  expect_drained(tight);
  expect_drained(c);
}

// Admission's arithmetic against what rows then take: the room (free bytes
// and cache-only bytes) a new row consumes while it attaches its prefix and
// grows to its target never exceeds admission_bytes, nor a running row's
// growth_bytes; in a full layer alone both are exact.
TEST(PrefixCache, AdmissionBytesBoundWhatRowsTake) {
  for (const bool window : {false, true}) {
    std::vector<LayerSpec> layers = {layer_spec(1, 1, 0, "f32")};
    if (window) layers.push_back(layer_spec(1, 1, kWindowSize, "f32"));
    KvCache c(options_for(layers, kBlockSize, 1 << 20, 1 << 20), testing::backend());
    auto room = [&] { return c.free_bytes() + c.prefix_cache_bytes(); };
    const auto P = prompt(30, 40);
    // P's first 22 tokens are cached: 20 of them by a running row too.
    const RowId a = c.create_row();
    c.retain_for_publish(a);
    prefill(c, a, P, 22, 8);
    c.retire(a);
    const RowId holder = c.create_row();
    c.retain_for_publish(holder);
    EXPECT_EQ(c.attach_prefix(holder, P, 20), 20);
    for (const int64_t reuse : {int64_t(0), int64_t(13), int64_t(20), int64_t(21), int64_t(29)}) {
      for (const int64_t target : {int64_t(30), int64_t(41)}) {
        const int step = 3;
        const std::size_t cost = c.admission_bytes(P, reuse, target, step);
        auto Q = P;
        while (int64_t(Q.size()) < target) Q.push_back(int32_t(Q.size()));
        const std::size_t before = room();
        const RowId r = c.create_row();
        c.retain_for_publish(r);
        c.attach_prefix(r, Q, reuse);
        std::size_t most = before - room();
        while (c.length(r) < target) {
          prefill(c, r, Q, std::min<int64_t>(target, c.length(r) + step), step);
          most = std::max(most, before - room());
        }
        EXPECT_LE(most, cost) << "reuse " << reuse << " target " << target << " window " << window;
        if (!window) {
          EXPECT_EQ(most, cost) << "reuse " << reuse << " target " << target;
        }
        c.retire(r);
        c.check_consistency();
      }
    }
    // The running row's growth, from where it stands (sharing its prefix
    // with the cache).
    const std::size_t grow = c.growth_bytes(holder, 60, 3);
    auto T = P;
    while (int64_t(T.size()) < 60) T.push_back(7);
    const std::size_t from = room();
    std::size_t took = 0;
    while (c.length(holder) < 60) {
      prefill(c, holder, T, std::min<int64_t>(60, c.length(holder) + 3), 3);
      took = std::max(took, from - room());
    }
    EXPECT_LE(took, grow) << "window " << window;
    if (!window) {
      EXPECT_EQ(took, grow);
    }
    EXPECT_EQ(c.growth_bytes(holder, 10, 1), 0u) << "a row past its target takes nothing";
    expect_drained(c);
  }
}

TEST(PrefixCache, CapacityPressureEvictsCachedBlocksFirst) {
  KvCache c = make_cache(14 * kBlockBytes, 1 << 20);
  const auto T = prompt(24, 7);
  const RowId a = c.create_row();
  c.retain_for_publish(a);
  prefill(c, a, T, 24, 8);
  c.retire(a);
  const std::size_t cached = c.prefix_cache_bytes();
  EXPECT_EQ(cached, 12 * kBlockBytes);
  // 2 blocks are free; a 12-token row needs 3 + 3: cached blocks make room.
  const RowId b = c.create_row();
  const auto U = prompt(12, 50);
  prefill(c, b, U, 12, 12, false);
  EXPECT_LT(c.prefix_cache_bytes(), cached);
  expect_holds(c, b, U);
  // Beyond free + evictable: OutOfBlocks, and nothing was evicted for it.
  const std::size_t left = c.prefix_cache_bytes();
  const RowId d = c.create_row();
  const int32_t huge = 200;
  EXPECT_THROW(c.begin_step({&d, 1}, {&huge, 1}), OutOfBlocks);
  EXPECT_EQ(c.prefix_cache_bytes(), left);
  c.check_consistency();
  expect_drained(c);
}

TEST(PrefixCache, PublishesOnlyWhatIsSettledAndReusable) {
  KvCache c = make_cache();
  const auto T = prompt(20, 3);
  const RowId a = c.create_row();
  prefill(c, a, T, 8, 8);
  c.begin_round({&a, 1});
  prefill(c, a, T, 16, 8, false);
  EXPECT_EQ(c.publish(a, T), 8) << "inside a round only blocks below the round start";
  const int64_t keep = 2;
  c.rollback_round({&a, 1}, {&keep, 1});
  EXPECT_EQ(c.publish(a, T), 8);
  // Rows whose early positions were stored at another precision publish nothing.
  const RowId b = c.create_row();
  prefill(c, b, T, 12, 12, false);
  c.set_minimum_reusable_offset(b, 4);
  EXPECT_EQ(c.publish(b, T), 0);
  // An attach needs an empty row.
  EXPECT_THROW(c.attach_prefix(b, T, 8), Error);
  EXPECT_THROW(c.attach_prefix(c.create_row(), T, -1), Error);
  // Different tokens never match (the key covers every token of the chain).
  auto U = T;
  U[1] = 77;
  EXPECT_EQ(c.match_prefix(U, 20), 0);
  EXPECT_EQ(c.match_prefix(T, 20), 8);
  c.check_consistency();
  expect_drained(c);
}

// A row kept for publishing that can never publish (part of it stored at
// another precision) must still free its window blocks.
TEST(PrefixCache, UnpublishableRowsStillSettleTheirWindow) {
  KvCache c = make_cache();
  const auto T = prompt(30, 2);
  const RowId a = c.create_row();
  c.retain_for_publish(a);
  prefill(c, a, T, 8, 8, false);
  EXPECT_EQ(c.first_position(a, 1), 0) << "held until published";
  c.set_minimum_reusable_offset(a, 2);
  EXPECT_EQ(c.first_position(a, 1), 4);
  prefill(c, a, T, 30, 8);
  EXPECT_EQ(c.first_position(a, 1), 24);
  EXPECT_EQ(c.prefix_cache_blocks(), 0);
  c.check_consistency();
  expect_drained(c);
}

TEST(PrefixCache, ClearingReturnsEveryCachedByte) {
  KvCache c = make_cache();
  const auto T = prompt(30, 1);
  const RowId a = c.create_row();
  c.retain_for_publish(a);
  prefill(c, a, T, 30, 5);
  const RowId b = c.create_row();
  EXPECT_EQ(c.attach_prefix(b, T, 29), 28);
  const std::size_t with_rows = c.used_bytes();
  c.clear_prefix_cache();
  EXPECT_EQ(c.prefix_cache_blocks(), 0);
  EXPECT_LE(c.used_bytes(), with_rows);
  expect_holds(c, a, T);
  expect_holds(c, b, T);
  c.check_consistency();
  expect_drained(c);
}

// Idle memory: the pages of blocks no row and not the prefix cache holds go
// back to the system (resident bytes as the system reports them), cached
// prefixes keep their bytes, and the released blocks are used again.
TEST(PrefixCache, IdleMemoryGoesBackToTheSystemAndCachedPrefixesStay) {
  constexpr int kDim = 256, kB = 4;
  constexpr std::size_t kBig = 2 * 4 * kB * kDim;  // 8 KiB: f32, 1 head
  constexpr int kCachedBlocks = 12;
  KvCache c(options_for({layer_spec(1, kDim, 0, "f32")}, kB, 0, kCachedBlocks * kBig), testing::backend());
  auto fill = [&](RowId r, const std::vector<int32_t>& T) {
    const int32_t n = int32_t(T.size());
    c.begin_step({&r, 1}, {&n, 1});
    std::vector<float> kv;
    for (int32_t t = 0; t < n; ++t) kv.insert(kv.end(), kDim, value_of(T[std::size_t(t)], t));
    testing::write_host(c, 0, r, 0, n, kv.data(), kv.data());
    c.end_step();
    c.publish(r, T);
  };
  auto holds = [&](RowId r, const std::vector<int32_t>& T) {
    for (int64_t p = 0; p < c.length(r); ++p) {
      const auto rec = testing::read_record(c, 0, r, p);
      std::vector<float> k(kDim), v(kDim);
      std::memcpy(k.data(), rec.data(), kDim * 4);
      std::memcpy(v.data(), rec.data() + kDim * 4, kDim * 4);
      for (int d = 0; d < kDim; ++d)
        if (k[std::size_t(d)] != value_of(T[std::size_t(p)], p) || v[std::size_t(d)] != k[std::size_t(d)]) return false;
    }
    return true;
  };
  // Six distinct 160-token prompts, all running at once: 240 blocks, two
  // arena chunks' worth.
  std::vector<std::vector<int32_t>> prompts;
  std::vector<RowId> rows;
  for (int i = 0; i < 6; ++i) {
    prompts.push_back(prompt(160, 100 * (i + 1)));
    prompts.back()[0] = 100000 + i;  // no two share a block
    rows.push_back(c.create_row());
    fill(rows.back(), prompts.back());
  }
  const std::size_t busy = c.resident_bytes();
  EXPECT_GE(busy, 240 * kBig);
  for (RowId r : rows) c.retire(r);
  // Tail first, oldest first: the newest prompt's head is what stays.
  EXPECT_EQ(c.prefix_cache_bytes(), kCachedBlocks * kBig);
  EXPECT_GE(c.resident_bytes(), 240 * kBig) << "nothing is handed back before release_free_memory";

  // All but the cached blocks (less the pages they share with neighbours).
  EXPECT_GE(c.release_free_memory(), (240 - kCachedBlocks - 2) * kBig);
  const std::size_t idle = c.resident_bytes();
  // What stays is the cached blocks, each with at most the pages it shares
  // with a neighbour (two, where blocks do not start on a page).
  EXPECT_LE(idle, kCachedBlocks * (kBig + 2 * 4096));
  EXPECT_GE(idle, kCachedBlocks * kBig);
  EXPECT_EQ(c.release_free_memory(), 0u) << "nothing was freed since";
  c.check_consistency();

  // The cached prefix is intact, and released blocks serve new rows.
  const auto& newest = prompts.back();
  const int64_t cached = c.match_prefix(newest, int64_t(newest.size()));
  EXPECT_EQ(cached, kCachedBlocks * kB);
  const RowId again = c.create_row();
  EXPECT_EQ(c.attach_prefix(again, newest, cached), cached);
  EXPECT_TRUE(holds(again, newest));
  const RowId fresh = c.create_row();
  fill(fresh, prompts[0]);
  EXPECT_TRUE(holds(fresh, prompts[0]));
  EXPECT_GT(c.resident_bytes(), idle);
  expect_drained(c);
}

}  // namespace
}  // namespace rowlm::kv
