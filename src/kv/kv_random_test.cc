// Randomized operation sequences against a serial single-row oracle.
//
// The oracle is deliberately simple: per row, the token list and, per layer,
// a dense vector of the canonical token records (codec.h) the row should
// hold, computed from f32 K/V that depend only on the row's tokens up to each
// position (as a model's would). After every operation each live row's
// length, round state and every stored byte its next query or a rollback can
// see (values, codes, scales, biases) must equal the oracle, and the cache's
// reference counts must add up.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "kv/kv_cache.h"
#include "kv/kv_test_util.h"
#include "kv/row_cache.h"

namespace rowlm::kv {
namespace {

using testing::layer_spec;
using testing::splitmix;

struct OracleRow {
  std::vector<int32_t> tokens;
  std::vector<uint64_t> prefix_hash;                  // hash of tokens[0..p]
  std::vector<std::vector<std::vector<std::byte>>> records;  // [layer][position]
  std::vector<int64_t> start;                          // per layer history start
  int64_t min_reusable = 0;
  bool in_round = false;
  int64_t round_start = 0;
  bool publishes = false;
  bool switched = false;  // moved to the precision switch's codecs
  std::vector<int32_t> plan;  // tokens this row will feed (prompt, then decode)
};

class Harness {
 public:
  Harness(std::vector<LayerSpec> layers, int block_size, std::size_t capacity, std::size_t prefix_bytes,
          uint64_t seed, std::optional<PrecisionSwitch> precision_switch = std::nullopt)
      : cache_(with_switch(testing::options_for(layers, block_size, capacity, prefix_bytes), precision_switch),
               testing::backend()),
        layers_(std::move(layers)), switch_(std::move(precision_switch)), seed_(seed), prefix_bytes_(prefix_bytes) {}

  static CacheOptions with_switch(CacheOptions o, const std::optional<PrecisionSwitch>& s) {
    o.precision_switch = s;
    return o;
  }

  // The spec a row stores layer `layer` in.
  LayerSpec spec_of(int layer, bool switched) const {
    LayerSpec s = layers_[std::size_t(layer)];
    if (switched) s.codec = switch_->codecs[std::size_t(layer)];
    return s;
  }
  bool switch_due(const OracleRow& o) const {
    return switch_ && !o.switched && int64_t(o.tokens.size()) >= switch_->after;
  }
  // The oracle's side of switch_precision: every record re-encoded.
  void oracle_switch(OracleRow& o) {
    for (int l = 0; l < int(layers_.size()); ++l)
      if (!(spec_of(l, false) == spec_of(l, true)))  // a layer that keeps its codec keeps its bytes
        for (auto& rec : o.records[std::size_t(l)])
          rec = testing::reencode_record(spec_of(l, false), spec_of(l, true), rec.data());
    o.switched = true;
    ++switches_;
    o.min_reusable = std::max(o.min_reusable, int64_t(o.tokens.size()));
  }

  // K (or V) of a position: a function of the tokens up to it, like a model's.
  std::vector<float> kv_for(int layer, uint64_t prefix_hash, bool value) const {
    const LayerSpec& s = layers_[std::size_t(layer)];
    uint64_t st = prefix_hash ^ (uint64_t(layer + 1) * 0x9e3779b97f4a7c15ull);
    std::vector<float> k(std::size_t(s.kv_heads) * s.head_dim), v(k.size());
    for (std::size_t i = 0; i < k.size(); ++i) {
      k[i] = 3.0f * testing::unit_float(st);
      v[i] = testing::unit_float(st) * float(1 + i % 5);
    }
    return value ? v : k;
  }

  std::vector<std::byte> record_for(int layer, uint64_t prefix_hash, bool switched) const {
    const auto k = kv_for(layer, prefix_hash, false), v = kv_for(layer, prefix_hash, true);
    return testing::encode_record(spec_of(layer, switched), k.data(), v.data());
  }

  static uint64_t extend_hash(uint64_t h, int32_t token) {
    uint64_t s = h ^ (uint64_t(uint32_t(token)) * 0xff51afd7ed558ccdull);
    return splitmix(s);
  }

  void oracle_push(OracleRow& o, int32_t token) {
    const uint64_t h = extend_hash(o.prefix_hash.empty() ? 0x1234 : o.prefix_hash.back(), token);
    o.tokens.push_back(token);
    o.prefix_hash.push_back(h);
    for (int l = 0; l < int(layers_.size()); ++l) o.records[std::size_t(l)].push_back(record_for(l, h, o.switched));
  }

  void oracle_truncate(OracleRow& o, int64_t n) {
    o.tokens.resize(std::size_t(n));
    o.prefix_hash.resize(std::size_t(n));
    for (auto& r : o.records) r.resize(std::size_t(n));
  }

  OracleRow fresh_oracle() {
    OracleRow o;
    o.records.resize(layers_.size());
    o.start.assign(layers_.size(), 0);
    return o;
  }

  std::vector<int32_t> make_plan() {
    // Three prompt families share long prefixes; suffixes and decodes differ.
    const int family = int(splitmix(seed_) % 3);
    const int shared = 10 + int(splitmix(seed_) % 40);
    std::vector<int32_t> plan;
    for (int i = 0; i < shared; ++i) plan.push_back(family * 100 + (i * 7) % 13);
    const int rest = 1 + int(splitmix(seed_) % 60);
    for (int i = 0; i < rest; ++i) plan.push_back(1000 + int32_t(splitmix(seed_) % 50));
    return plan;
  }

  void check_all(const char* after) {
    SCOPED_TRACE(after);
    ASSERT_EQ(cache_.num_rows(), int(rows_.size()));
    for (const auto& [id, o] : rows_) check_row(id, o);
    cache_.check_consistency();  // recomputes the cache-only bytes from the references
    ASSERT_LE(cache_.prefix_cache_bytes(), prefix_bytes_) << "the prefix cache stays within its budget";
  }

  void check_row(RowId id, const OracleRow& o) {
    ASSERT_EQ(cache_.length(id), int64_t(o.tokens.size())) << "row " << id;
    ASSERT_EQ(cache_.in_round(id), o.in_round);
    ASSERT_EQ(cache_.minimum_reusable_offset(id), o.min_reusable);
    ASSERT_EQ(cache_.switched(id), o.switched);
    ASSERT_EQ(cache_.switch_due(id), switch_due(o));
    const int64_t len = int64_t(o.tokens.size());
    for (int l = 0; l < int(layers_.size()); ++l) {
      const int w = layers_[std::size_t(l)].window;
      // What the next query (or, inside a round, a rollback) may need.
      const int64_t settle = o.in_round ? o.round_start : len;
      const int64_t need = std::max(o.start[std::size_t(l)], w ? std::max<int64_t>(0, settle - w + 1) : 0);
      ASSERT_LE(cache_.first_position(id, l), std::min(need, len)) << "row " << id << " layer " << l;
      for (int64_t p = need; p < len; ++p) {
        const auto got = testing::read_record(cache_, l, id, p);
        ASSERT_EQ(got, o.records[std::size_t(l)][std::size_t(p)]) << "row " << id << " layer " << l << " pos " << p;
      }
    }
  }

  RowId pick(bool idle_only = false) {
    std::vector<RowId> ids;
    for (const auto& [id, o] : rows_)
      if (!idle_only || !o.in_round) ids.push_back(id);
    if (ids.empty()) return -1;
    return ids[std::size_t(splitmix(seed_) % ids.size())];
  }

  void op_create() {
    const RowId id = cache_.create_row();
    OracleRow o = fresh_oracle();
    o.plan = make_plan();
    o.publishes = splitmix(seed_) % 2;
    if (o.publishes) cache_.retain_for_publish(id);
    if (splitmix(seed_) % 3) {
      const int64_t want = cache_.match_prefix(o.plan, int64_t(o.plan.size()) - 1);
      const int64_t got = cache_.attach_prefix(id, o.plan, int64_t(o.plan.size()) - 1);
      EXPECT_EQ(got, want);
      if (switch_) {
        EXPECT_LE(got, switch_->after) << "a prefix never reaches past the precision switch";
      }
      for (int64_t p = 0; p < got; ++p) oracle_push(o, o.plan[std::size_t(p)]);
      attached_ += got;
    }
    rows_.emplace(id, std::move(o));
  }

  void op_step() {
    std::vector<RowId> ids;
    std::vector<int32_t> counts;
    for (auto& [id, o] : rows_) {
      if (splitmix(seed_) % 3 == 0) continue;
      int32_t count = int32_t(splitmix(seed_) % 10);
      if (switch_due(o)) {
        if (o.in_round) continue;  // it cannot switch inside a round, nor append before it switched
        try {
          cache_.switch_precision(id);
        } catch (const OutOfBlocks&) {
          ++out_of_blocks_;
          continue;
        }
        oracle_switch(o);
      }
      // An unswitched row's step ends at the switch.
      if (switch_ && !o.switched)
        count = int32_t(std::min<int64_t>(count, switch_->after - int64_t(o.tokens.size())));
      ids.push_back(id);
      counts.push_back(count);
    }
    if (ids.empty()) return;
    try {
      cache_.begin_step(ids, counts);
    } catch (const OutOfBlocks&) {
      ++out_of_blocks_;
      return;  // the check that follows proves nothing changed
    }
    std::map<RowId, std::vector<int32_t>> fed;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      OracleRow& o = rows_.at(ids[i]);
      const int64_t first = int64_t(o.tokens.size());
      uint64_t h = o.prefix_hash.empty() ? 0x1234 : o.prefix_hash.back();
      std::vector<uint64_t> hashes;
      for (int t = 0; t < counts[i]; ++t) {
        const std::size_t at = std::size_t(first + t);
        const int32_t tok = at < o.plan.size() ? o.plan[at] : int32_t(2000 + splitmix(seed_) % 30);
        fed[ids[i]].push_back(tok);
        h = extend_hash(h, tok);
        hashes.push_back(h);
      }
      // Write layers in a scrambled order and in uneven pieces; the row's
      // codec quantizes the f32 K/V directly.
      for (int l = int(layers_.size()) - 1; l >= 0; --l) {
        int done = 0;
        while (done < counts[i]) {
          const int piece = std::min<int>(counts[i] - done, 1 + int(splitmix(seed_) % 4));
          std::vector<float> k, v;
          for (int t = done; t < done + piece; ++t) {
            const auto kk = kv_for(l, hashes[std::size_t(t)], false), vv = kv_for(l, hashes[std::size_t(t)], true);
            k.insert(k.end(), kk.begin(), kk.end());
            v.insert(v.end(), vv.begin(), vv.end());
          }
          testing::write_host(cache_, l, ids[i], first + done, piece, k.data(), v.data());
          done += piece;
        }
      }
    }
    if (splitmix(seed_) % 10 == 0) {
      cache_.abort_step();
      return;
    }
    cache_.end_step();
    for (auto& [id, toks] : fed)
      for (int32_t t : toks) oracle_push(rows_.at(id), t);
    for (auto& [id, o] : rows_)
      if (o.publishes || splitmix(seed_) % 4 == 0) cache_.publish(id, o.tokens);
  }

  void op_round() {
    const RowId id = pick();
    if (id < 0) return;
    OracleRow& o = rows_.at(id);
    if (!o.in_round) {
      cache_.begin_round({&id, 1});
      o.in_round = true;
      o.round_start = int64_t(o.tokens.size());
    } else if (splitmix(seed_) % 3 == 0) {
      cache_.commit_round({&id, 1});
      o.in_round = false;
    } else {
      const int64_t appended = int64_t(o.tokens.size()) - o.round_start;
      const int64_t keep = int64_t(splitmix(seed_) % uint64_t(appended + 1));
      cache_.rollback_round({&id, 1}, {&keep, 1});
      oracle_truncate(o, o.round_start + keep);
      o.in_round = false;
    }
  }

  void op_trim() {
    const RowId id = pick(true);
    if (id < 0) return;
    OracleRow& o = rows_.at(id);
    const int64_t lo = cache_.min_trim_length(id);
    const int64_t len = int64_t(o.tokens.size());
    if (len == lo) {
      EXPECT_THROW(cache_.trim(id, 1), Error);
      return;
    }
    const int64_t count = 1 + int64_t(splitmix(seed_) % uint64_t(len - lo));
    cache_.trim(id, count);
    oracle_truncate(o, len - count);
    for (auto& s : o.start) s = std::min(s, len - count);
  }

  void op_fork() {
    const RowId id = pick();
    if (id < 0 || rows_.size() >= 7) return;
    const RowId child = cache_.fork(id);
    OracleRow o = rows_.at(id);
    o.in_round = false;
    o.publishes = false;
    rows_.emplace(child, std::move(o));
    cache_.retain_for_publish(child, false);
  }

  void op_extract_restore() {
    const RowId id = pick();
    if (id < 0) return;
    const OracleRow& src = rows_.at(id);
    const int64_t limit = splitmix(seed_) % 2 ? -1 : int64_t(splitmix(seed_) % 40);
    RowCache saved = cache_.extract(id, limit);
    // What the saved row holds equals the oracle's records.
    for (int l = 0; l < int(layers_.size()); ++l)
      for (int64_t p = saved.data[std::size_t(l)].first; p < saved.length; ++p) {
        const std::byte* rec = saved.record(l, p);
        const auto& want = src.records[std::size_t(l)][std::size_t(p)];
        ASSERT_TRUE(std::equal(want.begin(), want.end(), rec)) << "extract layer " << l << " pos " << p;
      }
    if (splitmix(seed_) % 2) {
      const std::string path = ::testing::TempDir() + "kv_random_" + std::to_string(seed_ % 1000) + ".bin";
      save_row_cache(saved, path);
      saved = load_row_cache(path);
      std::remove(path.c_str());
    }
    RowId restored;
    try {
      restored = cache_.restore(saved);
    } catch (const OutOfBlocks&) {
      ++out_of_blocks_;
      return;
    }
    OracleRow o = src;  // a switched row restores switched
    o.in_round = false;
    o.publishes = false;
    for (int l = 0; l < int(layers_.size()); ++l) o.start[std::size_t(l)] = saved.data[std::size_t(l)].first;
    rows_.emplace(restored, std::move(o));
  }

  void op_retire() {
    const RowId id = pick();
    if (id < 0) return;
    cache_.retire(id);
    rows_.erase(id);
  }

  void op_min_offset() {
    const RowId id = pick();
    if (id < 0) return;
    OracleRow& o = rows_.at(id);
    const int64_t off = int64_t(splitmix(seed_) % uint64_t(o.tokens.size() + 1));
    cache_.set_minimum_reusable_offset(id, off);
    o.min_reusable = off;
  }

  // A switch before the row reaches `after` (the library allows it).
  void op_early_switch() {
    const RowId id = pick(true);
    if (id < 0 || !switch_ || rows_.at(id).switched) return;
    try {
      cache_.switch_precision(id);
    } catch (const OutOfBlocks&) {
      ++out_of_blocks_;
      return;
    }
    oracle_switch(rows_.at(id));
  }

  void run(int ops) {
    for (int i = 0; i < ops; ++i) {
      const uint64_t r = splitmix(seed_) % 100;
      const char* what = "";
      if (rows_.size() < 2 || (r < 8 && rows_.size() < 6)) op_create(), what = "create";
      else if (r < 55) op_step(), what = "step";
      else if (r < 70) op_round(), what = "round";
      else if (r < 76) op_trim(), what = "trim";
      else if (r < 81) op_fork(), what = "fork";
      else if (r < 87) op_extract_restore(), what = "extract/restore";
      else if (r < 89) op_min_offset(), what = "minimum reusable offset";
      else if (r < 91 && switch_) op_early_switch(), what = "early precision switch";
      else op_retire(), what = "retire";
      // Long rows retire so that the run keeps mixing.
      for (auto it = rows_.begin(); it != rows_.end();)
        if (it->second.tokens.size() > 150 && !it->second.in_round) {
          cache_.retire(it->first);
          it = rows_.erase(it);
        } else {
          ++it;
        }
      // An idle engine hands free blocks' memory back; every record a row
      // or the prefix cache holds must come through it (check_all reads
      // them, and later attaches read the cached ones).
      if (i % 7 == 6) {
        released_ += cache_.release_free_memory();
        ++counts_["release free memory"];
      }
      ++counts_[what];
      check_all(what);
      if (::testing::Test::HasFatalFailure()) return;
    }
    for (const auto& [id, o] : rows_) cache_.retire(id);
    rows_.clear();
    cache_.clear_prefix_cache();
    EXPECT_EQ(cache_.used_bytes(), 0u) << "the pool returns to empty";
    cache_.check_consistency();
    std::string summary;
    for (const auto& [what, n] : counts_) summary += std::string(what) + " " + std::to_string(n) + ", ";
    std::printf("[ ops      ] %sprefix tokens attached %lld, capacity failures %lld\n", summary.c_str(),
                (long long)attached_, (long long)out_of_blocks_);
  }

  int64_t attached() const { return attached_; }
  int64_t switches() const { return switches_; }
  int64_t out_of_blocks() const { return out_of_blocks_; }
  std::size_t released() const { return released_; }

 private:
  KvCache cache_;
  std::vector<LayerSpec> layers_;
  std::optional<PrecisionSwitch> switch_;
  uint64_t seed_;
  std::size_t prefix_bytes_;
  std::size_t released_ = 0;
  std::map<RowId, OracleRow> rows_;
  int64_t attached_ = 0;
  int64_t out_of_blocks_ = 0;
  int64_t switches_ = 0;
  std::map<std::string, int> counts_;
};

std::vector<LayerSpec> mixed_layers() {
  return {layer_spec(2, 32, 0, "q4:32"), layer_spec(1, 16, 6, "bf16"), layer_spec(1, 8, 0, "f32"),
          layer_spec(1, 64, 3, "q8:64"), layer_spec(1, 4, 11, "f16")};
}

TEST(KvRandom, OperationSequencesMatchTheSerialOracle) {
  for (uint64_t seed : {1, 2, 3}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Harness h(mixed_layers(), seed == 3 ? 5 : 4, 0, 64 << 10, seed);
    h.run(250);
    EXPECT_GT(h.attached(), 0) << "the run should exercise prefix reuse";
    EXPECT_GT(h.released(), 0u) << "the run should hand free memory back";
  }
}

// Layers 1-3 switch (a full f32 layer to bf16, window layers to f16 and
// q4), layers 0 and 4 keep their codecs.
PrecisionSwitch mixed_switch(int64_t after) {
  return PrecisionSwitch{after, {parse_codec("q4:32"), parse_codec("f16"), parse_codec("bf16"), parse_codec("q4:64"),
                                 parse_codec("f16")}};
}

TEST(KvRandom, PrecisionSwitchesMatchTheSerialOracle) {
  for (const auto& [seed, after] : {std::pair<uint64_t, int64_t>{21, 13}, {22, 0}}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Harness h(mixed_layers(), 4, 0, 64 << 10, seed, mixed_switch(after));
    h.run(150);
    EXPECT_GT(h.switches(), 0) << "the run should switch rows";
  }
  // Under capacity pressure: a switch that does not fit changes nothing.
  Harness h(mixed_layers(), 4, 48 << 10, 8 << 10, 23, mixed_switch(9));
  h.run(150);
  EXPECT_GT(h.out_of_blocks(), 0) << "the run should hit the capacity";
}

TEST(KvRandom, UnderCapacityPressureFailuresChangeNothing) {
  for (uint64_t seed : {11, 12}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Harness h(mixed_layers(), 4, 48 << 10, 8 << 10, seed);
    h.run(250);
    EXPECT_GT(h.out_of_blocks(), 0) << "the run should hit the capacity";
  }
}

}  // namespace
}  // namespace rowlm::kv
