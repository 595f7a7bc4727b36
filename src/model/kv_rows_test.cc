// Row operations at model level: a row's logits are bitwise the same alone
// and inside a scripted schedule where other rows join and retire, where it
// runs speculative rounds whose drafts are rolled back with random keep
// counts, and where it starts from another row's published prefix; with
// prompts longer than the window, for bf16, q8 and q4 KV; on a model of
// every family.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include "backend/factory/make_backend.h"
#include "kv/kv_cache.h"
#include "model/awaiting_fixtures.h"
#include "model/model.h"

namespace rowlm {
namespace {

struct ModelCodec {
  std::string model;  // directory under the source tree
  std::string codec;
};

class KvRowsModel : public ::testing::TestWithParam<ModelCodec> {
 protected:
  void SetUp() override {
    const std::string dir = std::string(ROWLM_SOURCE_DIR) + "/" + GetParam().model;
    if (std::filesystem::exists(dir + "/config.json")) return;
    const std::string prefix = "tests/fixtures/";
    const std::string& model = GetParam().model;
    if (model.starts_with(prefix) && test::awaiting_fixture(model.substr(prefix.size())))
      GTEST_SKIP() << dir << " is not generated yet (tools/oracle/make_family_fixtures.py)";
    FAIL() << dir << " is missing";
  }
};

// Logits of `seq` for every position, one row alone, fed in chunks of 3.
std::vector<std::vector<float>> solo(Model& model, Backend& backend, const kv::CacheOptions& opt,
                                     const std::vector<int32_t>& seq) {
  kv::KvCache cache(opt, backend);
  const kv::RowId row = cache.create_row();
  std::vector<std::vector<float>> out;
  const int64_t V = model.info().vocab_size;
  for (std::size_t start = 0; start < seq.size(); start += 3) {
    ForwardBatch b;
    const std::size_t end = std::min(seq.size(), start + 3);
    for (std::size_t i = start; i < end; ++i) b.add(row, int64_t(i), seq[i], true);
    Tensor logits;
    model.forward(b, cache, logits);
    for (std::size_t i = 0; i < end - start; ++i)
      out.emplace_back(logits.data<float>() + int64_t(i) * V, logits.data<float>() + int64_t(i + 1) * V);
  }
  return out;
}

TEST_P(KvRowsModel, RowLogitsIndependentOfSchedule) {
  const ModelCodec setup = GetParam();
  auto backend = make_backend({"cpu", 2});
  auto model = load_model(std::string(ROWLM_SOURCE_DIR) + "/" + setup.model, *backend);
  kv::CacheOptions opt;
  opt.layers = model->kv_layers(kv::parse_codec(setup.codec));
  opt.block_size = 8;
  opt.prefix_cache_bytes = std::size_t(64) << 20;
  int64_t window = 0;
  for (const auto& l : opt.layers) window = std::max<int64_t>(window, l.window);
  const int64_t V = model->info().vocab_size;

  std::mt19937 rng(42);
  auto tok = [&] { return int32_t(4 + rng() % uint32_t(std::min<int64_t>(V - 4, 3000))); };
  // Four rows; rows 2 and 3 begin with row 0's first tokens (prefix reuse).
  const int64_t len = window + 40;
  std::vector<std::vector<int32_t>> seqs(4);
  for (auto& s : seqs)
    for (int64_t i = 0; i < len; ++i) s.push_back(tok());
  for (int64_t i = 0; i < len / 2; ++i) seqs[2][i] = seqs[3][i] = seqs[0][i];
  std::vector<std::vector<std::vector<float>>> want;
  for (const auto& s : seqs) want.push_back(solo(*model, *backend, opt, s));

  kv::KvCache cache(opt, *backend);
  struct Row {
    kv::RowId id = -1;
    int64_t done = 0;  // tokens of its sequence stored
    bool retired = false;
  };
  std::vector<Row> rows(4);
  int64_t reused[4] = {0, 0, 0, 0};
  const int join_step[4] = {0, 3, 9, 14};
  int checked = 0;
  for (int step = 0; step < 400; ++step) {
    for (int r = 0; r < 4; ++r) {
      if (rows[r].id >= 0 || rows[r].retired || step < join_step[r]) continue;
      rows[r].id = cache.create_row();
      cache.retain_for_publish(rows[r].id);
      if (r >= 2) rows[r].done = reused[r] = cache.attach_prefix(rows[r].id, seqs[r], int64_t(seqs[r].size()) - 1);
    }
    // Each live row: a plain chunk, or a speculative round (its next real
    // tokens plus junk drafts, then a rollback keeping the real ones).
    ForwardBatch batch;
    struct Part {
      int r;
      int64_t first, real, drafts;
      int32_t logit0;
    };
    std::vector<Part> parts;
    std::vector<kv::RowId> round_rows;
    for (int r = 0; r < 4; ++r) {
      Row& row = rows[r];
      if (row.id < 0 || row.retired) continue;
      const int64_t left = len - row.done;
      const int64_t real = std::min<int64_t>(left, 1 + rng() % 4);
      const int64_t drafts = (rng() % 2) ? int64_t(rng() % 4) : 0;
      Part p{r, row.done, real, drafts, int32_t(batch.logit_rows.size())};
      for (int64_t i = 0; i < real + drafts; ++i) {
        const int32_t t = i < real ? seqs[r][std::size_t(row.done + i)] : tok();
        batch.add(row.id, row.done + i, t, i < real);
      }
      if (drafts) round_rows.push_back(row.id);
      parts.push_back(p);
    }
    if (parts.empty()) break;
    cache.begin_round(round_rows);
    Tensor logits;
    model->forward(batch, cache, logits);
    std::vector<int64_t> keep;
    for (const Part& p : parts) {
      for (int64_t i = 0; i < p.real; ++i) {
        const float* got = logits.data<float>() + (p.logit0 + i) * V;
        ASSERT_EQ(std::memcmp(got, want[p.r][std::size_t(p.first + i)].data(), std::size_t(V) * sizeof(float)), 0)
            << setup.model << " " << setup.codec << ": row " << p.r << " position " << p.first + i << " step " << step;
        ++checked;
      }
      if (p.drafts) keep.push_back(p.real);
      rows[p.r].done += p.real;
    }
    cache.rollback_round(round_rows, keep);
    for (int r = 0; r < 4; ++r) {
      Row& row = rows[r];
      if (row.id < 0 || row.retired) continue;
      cache.publish(row.id, seqs[r]);
      if (row.done == len) {
        cache.retire(row.id);
        row.retired = true;
      }
    }
    cache.check_consistency();
  }
  // Every position was checked once, except those reused from the prefix cache.
  int64_t expected = 0, reused_total = 0;
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(rows[r].retired) << "row " << r;
    expected += len - reused[r];
    reused_total += reused[r];
  }
  EXPECT_EQ(checked, expected);
  EXPECT_GT(reused_total, 0) << "rows 2 and 3 were meant to reuse row 0's published prefix";
  cache.clear_prefix_cache();
  EXPECT_EQ(cache.used_bytes(), 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, KvRowsModel,
    ::testing::Values(ModelCodec{"tests/fixtures/gemma4/e_series", "f32"}, ModelCodec{"tests/fixtures/gemma4/e_series", "bf16"},
                      ModelCodec{"tests/fixtures/gemma4/everything", "bf16"}, ModelCodec{"models/rowlm-tiny", "bf16"},
                      ModelCodec{"models/rowlm-tiny", "q8:32"}, ModelCodec{"models/rowlm-tiny", "q4:32"},
                      ModelCodec{"tests/fixtures/qwen3/sliding_bias", "bf16"},
                      ModelCodec{"tests/fixtures/qwen3/mqa_untied", "f16"},
                      // The family fixtures' heads are 16 and 24 wide, narrower than or not a
                      // multiple of the smallest quantized group (32): the q8/q4 codecs run on
                      // the models above, these on the float codecs.
                      ModelCodec{"tests/fixtures/llama/llama3_tied", "f16"},
                      ModelCodec{"tests/fixtures/mistral/window", "bf16"},
                      ModelCodec{"tests/fixtures/qwen2/sliding_gqa", "f32"},
                      ModelCodec{"tests/fixtures/gemma3/text", "bf16"},
                      ModelCodec{"tests/fixtures/qwen3_moe/step2_window", "f16"}),
    [](const auto& param_info) {
      const ModelCodec& p = param_info.param;
      // <family>_<case>_<codec>
      const std::size_t cut = p.model.rfind('/', p.model.rfind('/') - 1);
      std::string n = p.model.substr(cut + 1) + "_" + p.codec;
      for (char& c : n)
        if (!isalnum(static_cast<unsigned char>(c))) c = '_';
      return n;
    });

}  // namespace
}  // namespace rowlm
