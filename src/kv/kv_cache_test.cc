// Model-free tests of every row operation with tagged keys: in 1-head,
// 1-dimension f32 layers, the key and value of row `who` at position p are
// (who + 1) * 1000 + p, so a wrong block, a stale slot or an off-by-one
// window shows in the numbers.

#include "kv/kv_cache.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"
#include "kv/kv_test_util.h"
#include "kv/row_cache.h"

namespace rowlm::kv {
namespace {

using testing::layer_spec;
using testing::options_for;
using testing::expect_drained;
using testing::stored;

constexpr int kWindow = 5;
constexpr int kBlock = 4;

float tag(int who, int64_t pos) { return float((who + 1) * 1000 + pos); }

// Layer 0: full; layer 1: window 5. Blocks of 4 positions.
KvCache tagged_cache(std::size_t capacity = 0, std::size_t prefix_bytes = 0) {
  return KvCache(options_for({layer_spec(1, 1, 0, "f32"), layer_spec(1, 1, kWindow, "f32")}, kBlock, capacity,
                             prefix_bytes), testing::backend());
}

void write_tagged(KvCache& c, RowId row, int who, int64_t first, int count) {
  std::vector<float> kv(static_cast<std::size_t>(count));
  for (int t = 0; t < count; ++t) kv[std::size_t(t)] = tag(who, first + t);
  for (int l = 0; l < c.num_layers(); ++l) testing::write_host(c, l, row, first, count, kv.data(), kv.data());
}

// One step in which several rows append different numbers of tokens.
void step(KvCache& c, const std::vector<RowId>& rows, const std::vector<int>& whos, const std::vector<int32_t>& counts) {
  c.begin_step(rows, counts);
  for (std::size_t i = 0; i < rows.size(); ++i) write_tagged(c, rows[i], whos[i], c.length(rows[i]), counts[i]);
  c.end_step();
}

// Every position the row's next query can see holds the expected tag.
void expect_tags(const KvCache& c, RowId row, const std::vector<float>& want) {
  ASSERT_EQ(c.length(row), int64_t(want.size()));
  for (int l = 0; l < c.num_layers(); ++l)
    for (int64_t p = c.first_position(row, l); p < c.length(row); ++p)
      EXPECT_EQ(stored(c, l, row, p), want[std::size_t(p)]) << "layer " << l << " position " << p;
}

std::vector<float> tags(int who, int64_t from, int64_t to) {
  std::vector<float> t;
  for (int64_t p = from; p < to; ++p) t.push_back(tag(who, p));
  return t;
}

std::vector<float> concat(std::vector<float> a, const std::vector<float>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Attention with scale 0 averages the visible values: the mean of the tags
// of exactly the positions the query sees.
float mean_attention(const KvCache& c, int layer, RowId row, int64_t pos) {
  const float q = 1.0f;
  float out = 0;
  const AttentionQuery aq{row, pos};
  testing::attend_host(c, layer, {&aq, 1}, &q, {1, 1, c.layer(layer).window, 0.0f, 0.0f}, &out);
  return out;
}

// The forward's view: the row's next token (tagged `who`) is written in a
// step and attends over what it sees; the step is then aborted, leaving the
// row as it was. Returns the mean of the visible values.
float probe(KvCache& c, int layer, RowId row, int who) {
  const int32_t one = 1;
  c.begin_step({&row, 1}, {&one, 1});
  write_tagged(c, row, who, c.length(row), 1);
  const float m = mean_attention(c, layer, row, c.length(row));
  c.abort_step();
  return m;
}

float mean_of(const std::vector<float>& t, int64_t from, int64_t to) {
  double s = 0;
  for (int64_t p = from; p <= to; ++p) s += t[std::size_t(p)];
  return float(s / double(to - from + 1));
}

TEST(KvCache, AppendsDifferentCountsPerRowInOneStep) {
  KvCache c = tagged_cache();
  const RowId a = c.create_row(), b = c.create_row(), d = c.create_row();
  step(c, {a, b, d}, {0, 1, 2}, {3, 1, 7});
  step(c, {a, b, d}, {0, 1, 2}, {1, 5, 0});
  step(c, {b}, {1}, {2});
  expect_tags(c, a, tags(0, 0, 4));
  expect_tags(c, b, tags(1, 0, 8));
  expect_tags(c, d, tags(2, 0, 7));
  for (RowId r : {a, b, d})
    for (int64_t p = 0; p < c.length(r); ++p) {
      const int who = r == a ? 0 : r == b ? 1 : 2;
      const auto want = tags(who, 0, c.length(r));
      EXPECT_FLOAT_EQ(mean_attention(c, 0, r, p), mean_of(want, 0, p));
    }
  for (RowId r : {a, b, d}) {
    const int who = r == a ? 0 : r == b ? 1 : 2;
    const int64_t len = c.length(r);
    EXPECT_FLOAT_EQ(probe(c, 1, r, 9), mean_of(concat(tags(who, 0, len), {tag(9, len)}),
                                               std::max<int64_t>(0, len - kWindow + 1), len));
  }
  c.check_consistency();
  expect_drained(c);
}

TEST(KvCache, WindowLayerFreesWhollyOlderBlocksAsItSettles) {
  KvCache c = tagged_cache();
  const RowId r = c.create_row();
  for (int len = 1; len <= 23; ++len) {
    step(c, {r}, {0}, {1});
    // The next query (at len) sees len-4 .. len: blocks wholly below len-4 go.
    const int64_t cut = len - kWindow + 1;
    const int64_t first = cut > 0 ? cut / kBlock * kBlock : 0;
    EXPECT_EQ(c.first_position(r, 1), first) << len;
    EXPECT_EQ(c.first_position(r, 0), 0);
    EXPECT_EQ(c.blocks_in_use(1), (len + kBlock - 1) / kBlock - first / kBlock);
    const auto t = concat(tags(0, 0, len), {tag(0, len)});
    EXPECT_FLOAT_EQ(probe(c, 1, r, 0), mean_of(t, std::max(0, len - kWindow + 1), len));
  }
  expect_drained(c);
}

// Window wrap-around followed by rollback: inside a round the window layer
// keeps every block a rollback may need; after rolling back, the window of
// the new length is intact and the next append overwrites the rejected tail.
TEST(KvCache, WindowWrapAroundThenRollbackKeepsTheWindow) {
  KvCache c = tagged_cache();
  const RowId a = c.create_row(), b = c.create_row();
  step(c, {a, b}, {0, 1}, {10, 10});
  EXPECT_EQ(c.first_position(a, 1), 4);
  const RowId both[2] = {a, b};
  c.begin_round(both);
  // Drafts: 9 more tokens each (tagged as row 7 and 8), in two steps: the
  // window moves far past the round start.
  step(c, {a, b}, {7, 8}, {4, 4});
  step(c, {a, b}, {7, 8}, {5, 5});
  EXPECT_EQ(c.length(a), 19);
  EXPECT_EQ(c.first_position(a, 1), 4) << "nothing may be freed inside a round";
  const int64_t keep[2] = {1, 6};
  c.rollback_round(both, keep);
  EXPECT_EQ(c.length(a), 11);
  EXPECT_EQ(c.length(b), 16);
  EXPECT_EQ(c.first_position(a, 1), 4);   // cut 7: block 1 (4..7) still needed
  EXPECT_EQ(c.first_position(b, 1), 12);  // cut 12: blocks 0..2 freed at rollback
  const auto want_a = concat(tags(0, 0, 10), tags(7, 10, 11));
  const auto want_b = concat(tags(1, 0, 10), tags(8, 10, 16));
  expect_tags(c, a, want_a);
  expect_tags(c, b, want_b);
  EXPECT_FLOAT_EQ(probe(c, 1, a, 5), mean_of(concat(want_a, {tag(5, 11)}), 7, 11));
  EXPECT_FLOAT_EQ(probe(c, 1, b, 5), mean_of(concat(want_b, {tag(5, 16)}), 12, 16));
  // The next step overwrites the rejected drafts in place.
  step(c, {a, b}, {3, 4}, {2, 1});
  expect_tags(c, a, concat(want_a, tags(3, 11, 13)));
  expect_tags(c, b, concat(want_b, tags(4, 16, 17)));
  c.check_consistency();
  expect_drained(c);
}

TEST(KvCache, CommitRoundFreesDeferredWindowBlocks) {
  KvCache c = tagged_cache();
  const RowId r = c.create_row();
  step(c, {r}, {0}, {6});
  c.begin_round({&r, 1});
  step(c, {r}, {0}, {10});
  EXPECT_EQ(c.first_position(r, 1), 0);
  EXPECT_TRUE(c.in_round(r));
  c.commit_round({&r, 1});
  EXPECT_FALSE(c.in_round(r));
  EXPECT_EQ(c.first_position(r, 1), 12);  // cut 12
  expect_tags(c, r, tags(0, 0, 16));
  expect_drained(c);
}

TEST(KvCache, TrimDropsTheTailButNotWhatAWindowFreed) {
  KvCache c = tagged_cache();
  const RowId r = c.create_row();
  step(c, {r}, {0}, {9});
  // Window layer holds from 4 (cut 5): trimming below 4 + 4 = 8 would need position 3.
  EXPECT_EQ(c.min_trim_length(r), 8);
  EXPECT_THROW(c.trim(r, 2), Error);
  expect_tags(c, r, tags(0, 0, 9));
  c.trim(r, 1);
  expect_tags(c, r, tags(0, 0, 8));
  EXPECT_EQ(c.blocks_in_use(0), 2);
  step(c, {r}, {5}, {3});
  expect_tags(c, r, concat(tags(0, 0, 8), tags(5, 8, 11)));
  // Full layers alone can trim to 0.
  KvCache full(options_for({layer_spec(1, 1, 0, "f32")}, kBlock), testing::backend());
  const RowId f = full.create_row();
  step(full, {f}, {0}, {9});
  full.trim(f, 9);
  EXPECT_EQ(full.length(f), 0);
  EXPECT_EQ(full.used_bytes(), 0u);
  expect_drained(c);
}

TEST(KvCache, ForkSharesBlocksAndCopiesOnWrite) {
  KvCache c = tagged_cache();
  const RowId parent = c.create_row();
  step(c, {parent}, {0}, {6});
  const std::size_t before = c.used_bytes();
  const RowId child = c.fork(parent);
  EXPECT_EQ(c.used_bytes(), before);
  EXPECT_EQ(c.physical_block(0, child, 1), c.physical_block(0, parent, 1));
  step(c, {child}, {1}, {3});  // writes positions 6..8: block 1 is shared -> copied
  EXPECT_NE(c.physical_block(0, child, 1), c.physical_block(0, parent, 1));
  EXPECT_EQ(c.physical_block(0, child, 0), c.physical_block(0, parent, 0));
  expect_tags(c, parent, tags(0, 0, 6));
  expect_tags(c, child, concat(tags(0, 0, 6), tags(1, 6, 9)));
  const int32_t parent_block = c.physical_block(0, parent, 1);
  step(c, {parent}, {2}, {1});  // now the parent owns block 1 alone: no copy
  EXPECT_EQ(c.physical_block(0, parent, 1), parent_block);
  expect_tags(c, parent, concat(tags(0, 0, 6), tags(2, 6, 7)));
  expect_tags(c, child, concat(tags(0, 0, 6), tags(1, 6, 9)));
  c.check_consistency();
  expect_drained(c);
}

TEST(KvCache, ExtractRestoreAndFilesKeepEveryByte) {
  KvCache c = tagged_cache();
  const RowId r = c.create_row();
  step(c, {r}, {0}, {13});
  c.set_minimum_reusable_offset(r, 3);
  const RowCache whole = c.extract(r);
  EXPECT_EQ(whole.length, 13);
  EXPECT_EQ(whole.minimum_reusable_offset, 3);
  EXPECT_EQ(whole.data[0].first, 0);
  EXPECT_EQ(whole.data[1].first, 9);  // the window's next query sees 9..13
  const RowCache last4 = c.extract(r, 4);
  EXPECT_EQ(last4.data[0].first, 9);

  const std::string path = ::testing::TempDir() + "kv_row_test.bin";
  save_row_cache(whole, path);
  const RowCache loaded = load_row_cache(path);
  EXPECT_EQ(loaded.layers, whole.layers);
  EXPECT_EQ(loaded.data[0].records, whole.data[0].records);
  EXPECT_EQ(loaded.data[1].records, whole.data[1].records);

  KvCache other = tagged_cache();
  const RowId x = other.create_row();  // a different id and different blocks
  step(other, {x}, {4}, {5});
  const RowId restored = other.restore(loaded);
  EXPECT_EQ(other.minimum_reusable_offset(restored), 3);
  expect_tags(other, restored, tags(0, 0, 13));
  step(other, {restored, x}, {0, 4}, {2, 1});
  expect_tags(other, restored, tags(0, 0, 15));
  EXPECT_FLOAT_EQ(probe(other, 1, restored, 0), mean_of(tags(0, 0, 16), 11, 15));
  EXPECT_THROW(other.trim(restored, 13), Error);  // below the minimum reusable offset

  // With a limit, full layers keep only the last positions too.
  const RowId limited = other.restore(last4);
  EXPECT_EQ(other.first_position(limited, 0), 9);
  EXPECT_FLOAT_EQ(mean_attention(other, 0, limited, 12), mean_of(tags(0, 0, 13), 9, 12));

  // A different layout is refused and changes nothing.
  KvCache bf(options_for({layer_spec(1, 1, 0, "bf16"), layer_spec(1, 1, kWindow, "f32")}, kBlock), testing::backend());
  EXPECT_THROW(bf.restore(loaded), Error);
  EXPECT_EQ(bf.num_rows(), 0);
  EXPECT_EQ(bf.used_bytes(), 0u);

  // Damaged files are refused with a reason.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(60);
    f.put('\x7f');
  }
  try {
    load_row_cache(path);
    ADD_FAILURE() << "corrupted file accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
  }
  std::ofstream(path, std::ios::binary | std::ios::trunc) << "ROWLMKV1abc";
  EXPECT_THROW(load_row_cache(path), Error);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << "not a kv file at all";
  EXPECT_THROW(load_row_cache(path), Error);
  EXPECT_THROW(load_row_cache(path + ".missing"), Error);
  std::remove(path.c_str());
  expect_drained(other);
  expect_drained(c);
}

TEST(KvCache, OutOfBlocksChangesNothing) {
  // Room for 7 blocks in all.
  const std::size_t block = 2 * 4 * kBlock;
  KvCache c = tagged_cache(7 * block);
  const RowId a = c.create_row(), b = c.create_row();
  step(c, {a, b}, {0, 1}, {8, 3});
  const std::size_t used = c.used_bytes();
  const RowId rows[2] = {a, b};
  const int32_t too_many[2] = {1, 6};
  EXPECT_THROW(c.begin_step(rows, too_many), OutOfBlocks);
  EXPECT_FALSE(c.step_open());
  EXPECT_EQ(c.used_bytes(), used);
  EXPECT_EQ(c.pending(a), 0);
  expect_tags(c, a, tags(0, 0, 8));
  expect_tags(c, b, tags(1, 0, 3));
  EXPECT_THROW(c.restore(c.extract(a)), OutOfBlocks);
  EXPECT_EQ(c.num_rows(), 2);
  EXPECT_EQ(c.used_bytes(), used);
  step(c, {a, b}, {0, 1}, {1, 1});  // what fits still works
  c.check_consistency();
  expect_drained(c);
}

TEST(KvCache, AbortStepRestoresRowsAndPool) {
  KvCache c = tagged_cache();
  const RowId a = c.create_row();
  step(c, {a}, {0}, {5});
  const RowId b = c.fork(a);
  const std::size_t used = c.used_bytes();
  const RowId rows[2] = {a, b};
  const int32_t counts[2] = {6, 2};
  c.begin_step(rows, counts);
  write_tagged(c, a, 9, 5, 6);
  c.abort_step();
  EXPECT_EQ(c.length(a), 5);
  EXPECT_EQ(c.pending(a), 0);
  expect_tags(c, a, tags(0, 0, 5));
  expect_tags(c, b, tags(0, 0, 5));
  // Only the copy-on-write copies made for the step remain (same bytes).
  EXPECT_LE(c.used_bytes(), used + 2 * 2 * 4 * kBlock * 2);
  c.check_consistency();
  step(c, {a}, {0}, {1});
  expect_tags(c, a, tags(0, 0, 6));
  expect_drained(c);
}

TEST(KvCache, RejectsMisuseWithClearErrors) {
  KvCache c = tagged_cache();
  const RowId r = c.create_row();
  const float x = 1;
  EXPECT_THROW(c.length(42), Error);
  EXPECT_THROW(testing::write_host(c, 0, r, 0, 1, &x, &x), Error);  // no step
  const int32_t one = 1, neg = -1;
  EXPECT_THROW(c.begin_step({&r, 1}, {&neg, 1}), Error);
  const RowId twice[2] = {r, r};
  const int32_t counts[2] = {1, 1};
  EXPECT_THROW(c.begin_step(twice, counts), Error);
  c.begin_step({&r, 1}, {&one, 1});
  EXPECT_THROW(c.begin_step({&r, 1}, {&one, 1}), Error);
  EXPECT_THROW(testing::write_host(c, 0, r, 1, 1, &x, &x), Error);   // past the reservation
  EXPECT_THROW(testing::write_host(c, 2, r, 0, 1, &x, &x), Error);   // no such layer
  EXPECT_THROW(testing::write_host(c, 0, r, 0, 1, nullptr, &x), Error);
  EXPECT_THROW(c.retire(r), Error);                   // inside the step
  EXPECT_THROW(c.extract(r), Error);
  EXPECT_THROW(c.begin_round({&r, 1}), Error);
  testing::write_host(c, 0, r, 0, 1, &x, &x);
  testing::write_host(c, 1, r, 0, 1, &x, &x);
  c.end_step();
  EXPECT_THROW(c.end_step(), Error);
  EXPECT_THROW(c.abort_step(), Error);
  EXPECT_THROW(c.commit_round({&r, 1}), Error);
  c.begin_round({&r, 1});
  EXPECT_THROW(c.trim(r, 1), Error);
  const int64_t too_far = 2;
  EXPECT_THROW(c.rollback_round({&r, 1}, {&too_far, 1}), Error);
  const int64_t zero = 0;
  c.rollback_round({&r, 1}, {&zero, 1});
  EXPECT_THROW(c.set_minimum_reusable_offset(r, 5), Error);
  EXPECT_THROW(c.trim(r, -1), Error);
  EXPECT_THROW(c.read_token(0, r, 3, {}), Error);
  EXPECT_THROW(KvCache(options_for({}), testing::backend()), Error);
  EXPECT_THROW(KvCache(options_for({layer_spec(1, 48, 0, "q4:32")}), testing::backend()), Error);  // 48 % 32
  EXPECT_THROW(KvCache(options_for({layer_spec(0, 8, 0, "f32")}), testing::backend()), Error);
  EXPECT_THROW(KvCache(options_for({layer_spec(1, 8, 0, "f32")}, 0), testing::backend()), Error);
  expect_drained(c);
}

TEST(KvCodec, ParsesNamesAndMaps) {
  EXPECT_EQ(parse_codec("q4").codec, Codec::Q4);
  EXPECT_EQ(parse_codec("q4").group_size, 64);
  EXPECT_EQ(parse_codec("q8:128").group_size, 128);
  EXPECT_EQ(codec_name(parse_codec("q4:32")), "q4:32");
  EXPECT_EQ(codec_name(parse_codec("bf16")), "bf16");
  EXPECT_THROW(parse_codec("q5"), Error);
  EXPECT_THROW(parse_codec("q4:48"), Error);
  EXPECT_THROW(parse_codec("bf16:32"), Error);
  EXPECT_THROW(parse_codec("q4:"), Error);
  const auto m = parse_codec_map("bf16,2=q8,0=q4:32", 4);
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(codec_name(m[0]), "q4:32");
  EXPECT_EQ(codec_name(m[1]), "bf16");
  EXPECT_EQ(codec_name(m[2]), "q8:64");
  EXPECT_EQ(parse_codec_map("q8", 3).size(), 3u);
  EXPECT_THROW(parse_codec_map("bf16,4=q8", 4), Error);
  EXPECT_THROW(parse_codec_map("2=q8", 4), Error);
  EXPECT_THROW(parse_codec_map("bf16,,", 4), Error);
  EXPECT_THROW(parse_codec_map("bf16,x=q8", 4), Error);
  const std::vector<LayerSpec> layers = {layer_spec(1, 256, 512, "bf16"), layer_spec(2, 512, 0, "q4")};
  EXPECT_EQ(layout_signature(layers), "L0 kv1x256 bf16 w512; L1 kv2x512 q4:64 full");
}

// Bytes per token per codec; q4 with group 64 costs at most 0.3x bf16.
TEST(KvAccounting, BytesPerTokenPerCodec) {
  auto bpt = [](const char* codec) {
    KvCache c(options_for({layer_spec(1, 256, 0, codec)}), testing::backend());
    return c.bytes_per_token(0);
  };
  EXPECT_EQ(bpt("f32"), 2048u);
  EXPECT_EQ(bpt("bf16"), 1024u);
  EXPECT_EQ(bpt("f16"), 1024u);
  EXPECT_EQ(bpt("q8:64"), 2u * (256 + 4 * 4));
  EXPECT_EQ(bpt("q4:64"), 2u * (128 + 4 * 4));
  EXPECT_LE(double(bpt("q4:64")), 0.3 * double(bpt("bf16")));
  EXPECT_LE(double(bpt("q4:32")), 0.32 * double(bpt("bf16")));
}

// Projected bytes are never below what a row then holds, through chunked
// prefill, speculative rounds with rollbacks, and decode.
TEST(KvAccounting, ProjectedBytesBoundWhatARowHolds) {
  for (int window : {0, 3, 7, 40}) {
    KvCache c(options_for({layer_spec(1, 1, window, "f32"), layer_spec(1, 1, 0, "f32")}, kBlock), testing::backend());
    const RowId r = c.create_row();
    const int total = 61, chunk = 9;
    const std::size_t bound = c.projected_bytes(total, chunk);
    std::size_t most = 0;
    uint64_t s = 5;
    while (c.length(r) < total) {
      const bool round = testing::splitmix(s) % 2;
      if (round) c.begin_round({&r, 1});
      const int n = int(std::min<int64_t>(1 + testing::splitmix(s) % chunk, total - c.length(r)));
      step(c, {r}, {0}, {n});
      most = std::max(most, c.row_bytes(r));
      if (round) {
        const int64_t keep = int64_t(testing::splitmix(s) % uint64_t(n + 1));
        c.rollback_round({&r, 1}, {&keep, 1});
      }
      most = std::max(most, c.row_bytes(r));
    }
    EXPECT_LE(most, bound) << "window " << window;
    EXPECT_GT(most, 0u);
    expect_drained(c);
  }
}

// --- Precision switch -------------------------------------------------------

// A bf16 full layer and a bf16 window layer that move to q8:32 after 40
// positions, blocks of 8; `prefix_bytes` for the prefix cache.
KvCache switching_cache(std::size_t capacity = 0, std::size_t prefix_bytes = 0, int64_t after = 40) {
  CacheOptions o = options_for({layer_spec(2, 64, 0, "bf16"), layer_spec(2, 64, 12, "bf16")}, 8, capacity,
                               prefix_bytes);
  o.precision_switch = PrecisionSwitch{after, {parse_codec("q8:32"), parse_codec("q8:32")}};
  return KvCache(std::move(o), testing::backend());
}

// The bytes a row holds fall by the codecs' ratio when it switches: 8
// positions of 2 kv heads of 64 in bf16 are 4096 bytes a block, in q8:32
// (64 code bytes and 2 x 2 bf16 scales and biases per head) 2304.
TEST(PrecisionSwitch, MemoryFallsByTheCodecRatio) {
  KvCache c = switching_cache();
  ASSERT_EQ(c.block_bytes(0), 4096u);
  const RowId r = c.create_row();
  testing::append(c, r, 40, 1);
  EXPECT_TRUE(c.switch_due(r));
  // Full layer: 5 blocks; window 12 at length 40 keeps positions >= 29: blocks 3 and 4.
  EXPECT_EQ(c.row_bytes(r), 7u * 4096);
  EXPECT_EQ(c.used_bytes(), 7u * 4096);
  c.switch_precision(r);
  EXPECT_TRUE(c.switched(r));
  EXPECT_FALSE(c.switch_due(r));
  EXPECT_EQ(c.minimum_reusable_offset(r), 40);
  EXPECT_EQ(c.row_layer(r, 0).codec, parse_codec("q8:32"));
  EXPECT_EQ(c.row_bytes(r), 7u * 2304);
  EXPECT_EQ(c.used_bytes(), 7u * 2304) << "the bf16 blocks went back to the pool";
  EXPECT_EQ(c.blocks_in_use(0), 5);
  testing::append(c, r, 60, 2);  // 100 positions: 13 blocks, the window's 2 (positions >= 89)
  EXPECT_EQ(c.row_bytes(r), 15u * 2304);
  c.check_consistency();
  expect_drained(c);

  // Trims stop at the switch (a full layer alone: no window limits them).
  CacheOptions o = options_for({layer_spec(2, 64, 0, "bf16")}, 8);
  o.precision_switch = PrecisionSwitch{40, {parse_codec("q8:32")}};
  KvCache full(std::move(o), testing::backend());
  const RowId f = full.create_row();
  testing::append(full, f, 40, 1);
  full.switch_precision(f);
  testing::append(full, f, 20, 2);
  EXPECT_EQ(full.min_trim_length(f), 40);
  EXPECT_THROW(full.trim(f, 21), Error) << "a trim never cuts below the switch";
  full.trim(f, 20);
  EXPECT_EQ(full.row_bytes(f), 5u * 2304);
  expect_drained(full);
}

// With the prefix cache, the published bf16 blocks stay cached (another
// request may reuse them up to the switch); the switched row publishes nothing.
TEST(PrecisionSwitch, PublishedBlocksStayCachedAndPrefixesStopAtTheSwitch) {
  KvCache c = switching_cache(0, 1 << 20);
  std::vector<int32_t> tokens(90);
  std::iota(tokens.begin(), tokens.end(), 7);
  const RowId r = c.create_row();
  c.retain_for_publish(r);
  testing::append(c, r, 40, 1);
  EXPECT_EQ(c.publish(r, tokens), 40);
  // The window layer let its 3 blocks below position 29 go once published.
  EXPECT_EQ(c.prefix_cache_bytes(), 3u * 4096);
  c.switch_precision(r);
  // Every bf16 block the row held was published: the full layer's 5, the
  // window layer's 5 (kept until published): all cache-only now.
  EXPECT_EQ(c.prefix_cache_bytes(), 10u * 4096);
  EXPECT_EQ(c.row_bytes(r), 7u * 2304);
  testing::append(c, r, 50, 2);
  EXPECT_EQ(c.publish(r, tokens), 0) << "a switched row publishes nothing";
  // A new request with the same tokens reuses at most the 40 positions before the switch.
  EXPECT_EQ(c.match_prefix(tokens, 89), 40);
  const RowId n = c.create_row();
  EXPECT_EQ(c.attach_prefix(n, tokens, 89), 40);
  EXPECT_FALSE(c.switched(n));
  EXPECT_TRUE(c.switch_due(n));
  c.check_consistency();
  expect_drained(c);
}

// Extract and restore keep a switched row switched, byte for byte; a cache
// without the switch refuses its layout.
TEST(PrecisionSwitch, ExtractRestoreKeepsASwitchedRow) {
  KvCache c = switching_cache();
  const RowId r = c.create_row();
  testing::append(c, r, 40, 1);
  c.switch_precision(r);
  testing::append(c, r, 9, 2);
  const RowCache saved = c.extract(r);
  EXPECT_EQ(saved.layers, c.switched_layers());
  EXPECT_EQ(saved.minimum_reusable_offset, 40);
  const RowId back = c.restore(saved);
  EXPECT_TRUE(c.switched(back));
  EXPECT_EQ(c.row_bytes(back), c.row_bytes(r));
  for (int l = 0; l < 2; ++l)
    for (int64_t p = std::max(c.first_position(r, l), c.first_position(back, l)); p < 49; ++p)
      EXPECT_EQ(testing::read_record(c, l, back, p), testing::read_record(c, l, r, p)) << l << " " << p;
  KvCache plain(options_for({layer_spec(2, 64, 0, "bf16"), layer_spec(2, 64, 12, "bf16")}, 8), testing::backend());
  EXPECT_THROW(plain.restore(saved), Error);
  c.check_consistency();
  expect_drained(c);
}

// A pool of exactly projected_bytes(total) holds a row through its switch
// (both codecs at once while re-encoding) and on to `total`, in chunks and
// speculative rounds, for switches at, before and after block boundaries.
TEST(PrecisionSwitch, ProjectedBytesHoldTheRowThroughItsSwitch) {
  for (int64_t after : {0, 5, 16, 23, 61}) {
    KvCache probe = switching_cache(0, 0, after);
    const int total = 70, chunk = 9;
    KvCache c = switching_cache(probe.projected_bytes(total, chunk), 0, after);
    const RowId r = c.create_row();
    uint64_t s = 3;
    while (c.length(r) < total) {
      if (c.switch_due(r)) {
        ASSERT_NO_THROW(c.switch_precision(r)) << "after " << after;
      }
      const bool round = testing::splitmix(s) % 2;
      if (round) c.begin_round({&r, 1});
      int64_t n = std::min<int64_t>(1 + int64_t(testing::splitmix(s) % chunk), total - c.length(r));
      if (!c.switched(r)) n = std::min(n, after - c.length(r));
      ASSERT_NO_THROW(testing::append(c, r, int(n), 4)) << "after " << after << " at " << c.length(r);
      if (round) {
        const int64_t keep = int64_t(testing::splitmix(s) % uint64_t(n + 1));
        c.rollback_round({&r, 1}, {&keep, 1});
      }
    }
    EXPECT_EQ(c.switched(r), after < total);
    expect_drained(c);
  }
}

TEST(PrecisionSwitch, RejectsMisuseWithClearErrors) {
  const auto expect_error = [](auto&& f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
    } catch (const OutOfBlocks& e) {
      ADD_FAILURE() << "OutOfBlocks instead of a usage error: " << e.what();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  const auto make = [](int64_t after, std::vector<const char*> codecs) {
    CacheOptions o = options_for({layer_spec(2, 64, 0, "bf16"), layer_spec(2, 64, 12, "q8")}, 8);
    PrecisionSwitch sw{after, {}};
    for (const char* c : codecs) sw.codecs.push_back(parse_codec(c));
    o.precision_switch = sw;
    return KvCache(std::move(o), testing::backend());
  };
  expect_error([&] { make(-1, {"q8", "q8"}); }, "negative");
  expect_error([&] { make(4, {"q8"}); }, "1 codecs for 2 storage layers");
  expect_error([&] { make(4, {"bf16", "q8"}); }, "changes no layer's codec");
  expect_error([] { parse_codec("q3"); }, "unknown KV codec 'q3'");

  KvCache c = switching_cache();
  const RowId r = c.create_row();
  testing::append(c, r, 36, 1);
  const int32_t eight = 8, four = 4;
  expect_error([&] { c.begin_step({&r, 1}, {&eight, 1}); }, "across its precision switch at 40");
  testing::append(c, r, 4, 1);
  expect_error([&] { c.begin_step({&r, 1}, {&four, 1}); }, "switch_precision() it before appending");
  c.begin_round({&r, 1});
  expect_error([&] { c.switch_precision(r); }, "inside a step or speculative round");
  c.commit_round({&r, 1});
  c.switch_precision(r);
  expect_error([&] { c.switch_precision(r); }, "switched already");

  KvCache zero = switching_cache(0, 1 << 20, 0);
  const RowId z = zero.create_row();
  zero.switch_precision(z);  // after 0: switched before its first token
  std::vector<int32_t> tokens(20, 3);
  expect_error([&] { zero.attach_prefix(z, tokens, 19); }, "has switched precision");

  KvCache plain = tagged_cache();
  const RowId p = plain.create_row();
  expect_error([&] { plain.switch_precision(p); }, "no precision switch");
  EXPECT_FALSE(plain.switch_due(p));
}

}  // namespace
}  // namespace rowlm::kv
