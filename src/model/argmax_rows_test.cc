// The output head's argmax-only rows (ForwardBatch::argmax_only): a marked
// row's code is the argmax of the row an unmarked forward gives (found by
// its definition here), the unmarked rows are that forward's bits, in
// order, and nothing else changes. On the CPU backend; the GPU's head is
// held to the CPU's in backend/cuda/cuda_backend_test.cc.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/factory/make_backend.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace rowlm {
namespace {

// The first index of the row's largest value (rows of a model's logits
// are finite).
int32_t first_largest(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (row[i] > row[best]) best = i;
  return int32_t(best);
}

TEST(ArgmaxRows, MarkedRowsGiveTheirArgmaxAndTheOthersCrossUnchanged) {
  auto backend = make_backend(BackendOptions{"cpu", 2});
  for (const char* name : {"gemma4/e_series", "qwen3/gqa_tied"}) {
    const std::string dir = std::string(ROWLM_SOURCE_DIR) + "/tests/fixtures/" + name;
    auto model = load_model(dir, *backend);
    const int64_t V = model->info().vocab_size;
    kv::CacheOptions opt;
    opt.layers = model->kv_layers(kv::parse_codec("bf16"));
    opt.block_size = 4;
    // Three rows with logits at every one of their positions: 12 rows, of
    // which the marks take every third and the last two.
    auto run = [&](const std::vector<uint8_t>& marks, Tensor& logits, std::vector<int32_t>& codes) {
      RowPicks picks;
      kv::KvCache cache(opt, *backend);
      ForwardBatch batch;
      for (int r = 0; r < 3; ++r) {
        const kv::RowId row = cache.create_row();
        for (int p = 0; p < 4; ++p) batch.add(row, p, 5 + 7 * r + 3 * p, true);
      }
      if (!marks.empty()) batch.argmax_only = marks;
      model->forward(batch, cache, logits, nullptr, &picks);
      codes = picks.argmax;
    };
    Tensor full, part;
    std::vector<int32_t> none, codes;
    run({}, full, none);
    EXPECT_TRUE(none.empty()) << name << ": codes without marks";
    const std::vector<uint8_t> marks = {1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 1, 1};
    run(marks, part, codes);
    ASSERT_EQ(full.dim(0), 12);
    ASSERT_EQ(part.dim(0), 6) << name << ": the unmarked rows cross, no more";
    ASSERT_EQ(codes.size(), 12u);
    int64_t kept = 0;
    for (int64_t i = 0; i < 12; ++i) {
      const float* want = full.data<float>() + i * V;
      EXPECT_EQ(codes[std::size_t(i)], first_largest(want, V)) << name << " row " << i;
      if (marks[std::size_t(i)]) continue;
      EXPECT_EQ(std::memcmp(part.data<float>() + kept * V, want, std::size_t(V) * sizeof(float)), 0)
          << name << ": row " << i << " differs from the unmarked forward's";
      ++kept;
    }
    // Marks for another number of rows are refused.
    kv::KvCache cache(opt, *backend);
    ForwardBatch bad;
    bad.add(cache.create_row(), 0, 5, true);
    bad.argmax_only = {1, 0};
    Tensor l;
    RowPicks c;
    EXPECT_THROW(model->forward(bad, cache, l, nullptr, &c), Error);
  }
}

}  // namespace
}  // namespace rowlm
