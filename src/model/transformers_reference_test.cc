// Every family's forward pass against transformers (tests/fixtures/<family>,
// made by tools/oracle/make_<family>_fixtures.py), and its batch invariance.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "backend/factory/make_backend.h"
#include "core/npy.h"
#include "kv/kv_cache.h"
#include "model/awaiting_fixtures.h"
#include "model/logits_test_util.h"
#include "model/model.h"

namespace rowlm {
namespace {

// <family>/<case> under tests/fixtures.
const char* kCases[] = {"gemma4/e_series",  "gemma4/e2b_like_mqa", "gemma4/dense_keqv",   "gemma4/moe_keqv",
                        "gemma4/everything", "gemma4/bf16",        "qwen3/gqa_tied",     "qwen3/mqa_untied",
                        "qwen3/sliding_bias", "qwen3/bf16",        "qwen3/chat"};

// The new families' cases, by tools/oracle/make_family_fixtures.py
// (awaiting_fixtures.h: skipped until their fixtures are committed).
const char* kNewFamilyCases[] = {"llama/llama3_tied",    "llama/linear_untied_bias", "llama/bf16",
                                 "qwen2/sliding_gqa",    "qwen2/mqa_tied",           "mistral/window",
                                 "mistral/no_window",    "gemma3/text",              "gemma3/conditional",
                                 "gemma3/bf16",          "qwen3_moe/norm_topk",      "qwen3_moe/step2_window"};

std::string fixture_dir(const std::string& name) { return std::string(ROWLM_SOURCE_DIR) + "/tests/fixtures/" + name; }

bool fixture_present(const std::string& name) {
  return std::filesystem::exists(fixture_dir(name) + "/reference.json");
}


nlohmann::json reference(const std::string& name) {
  std::ifstream in(fixture_dir(name) + "/reference.json");
  return nlohmann::json::parse(in);
}

struct Harness {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
  std::unique_ptr<kv::KvCache> cache;

  explicit Harness(const std::string& name, const std::string& codec = "f32", int threads = 2,
                   MatmulPrecision precision = MatmulPrecision::F32)
      : backend(make_backend({"cpu", threads, precision})), model(load_model(fixture_dir(name), *backend)) {
    kv::CacheOptions opt;
    opt.layers = model->kv_layers(kv::parse_codec(codec));
    opt.block_size = 4;  // small blocks so sequences span many of them
    cache = std::make_unique<kv::KvCache>(opt, *backend);
  }

  // Prefill of whole sequences, several rows in one step; logits for every token.
  std::vector<Tensor> prefill(const std::vector<std::vector<int32_t>>& seqs) {
    ForwardBatch b;
    std::vector<kv::RowId> rows;
    for (const auto& s : seqs) {
      rows.push_back(cache->create_row());
      for (std::size_t i = 0; i < s.size(); ++i) b.add(rows.back(), int64_t(i), s[i], true);
    }
    Tensor logits;
    model->forward(b, *cache, logits);
    std::vector<Tensor> out;
    int64_t offset = 0;
    for (const auto& s : seqs) {
      out.push_back(logits.rows(offset, offset + int64_t(s.size())));
      offset += int64_t(s.size());
    }
    return out;
  }
};

std::vector<int32_t> ids_of(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

using model_testing::max_abs_diff;

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() &&
         std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

class TransformersReference : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const std::string name = GetParam();
    if (fixture_present(name)) return;
    const std::string why = "fixture " + fixture_dir(name) +
                            " is missing (made by tools/oracle/make_family_fixtures.py or make_<family>_fixtures.py "
                            "with transformers on the accelerator machine)";
    if (test::awaiting_fixture(name)) GTEST_SKIP() << why;
    FAIL() << why;
  }
};

TEST_P(TransformersReference, PrefillLogitsMatchTransformers) {
  const std::string name = GetParam();
  const auto ref = reference(name);
  Harness h(name);
  const auto out = h.prefill({ids_of(ref["ids_a"]), ids_of(ref["ids_b"])});
  const Tensor want_a = read_npy(fixture_dir(name) + "/logits_a.npy");
  const Tensor want_b = read_npy(fixture_dir(name) + "/logits_b.npy");
  EXPECT_LE(max_abs_diff(out[0], want_a), 1e-4f) << name;
  EXPECT_LE(max_abs_diff(out[1], want_b), 1e-4f) << name;
}

TEST_P(TransformersReference, IncrementalDecodeMatchesPrefill) {
  const std::string name = GetParam();
  const auto ref = reference(name);
  const auto ids = ids_of(ref["ids_a"]);
  const Tensor want = read_npy(fixture_dir(name) + "/logits_a.npy");
  Harness h(name);
  const kv::RowId row = h.cache->create_row();
  // A prefill chunk of 7, then one token at a time.
  const int64_t V = want.dim(1);
  for (std::size_t start = 0; start < ids.size();) {
    const std::size_t n = start == 0 ? 7 : 1;
    ForwardBatch b;
    for (std::size_t i = start; i < start + n; ++i) b.add(row, int64_t(i), ids[i], true);
    Tensor logits;
    h.model->forward(b, *h.cache, logits);
    for (std::size_t i = 0; i < n; ++i) {
      float m = 0;
      for (int64_t v = 0; v < V; ++v)
        m = std::max(m, std::fabs(logits.data<float>()[int64_t(i) * V + v] -
                                  want.data<float>()[int64_t(start + i) * V + v]));
      EXPECT_LE(m, 1e-4f) << name << " position " << start + i;
    }
    start += n;
  }
}

TEST_P(TransformersReference, GreedyContinuationMatchesTransformers) {
  const std::string name = GetParam();
  const auto ref = reference(name);
  Harness h(name);
  const kv::RowId row = h.cache->create_row();
  std::vector<int32_t> prompt = ids_of(ref["greedy_prompt"]), got;
  ForwardBatch b;
  for (std::size_t i = 0; i < prompt.size(); ++i) b.add(row, int64_t(i), prompt[i], i + 1 == prompt.size());
  Tensor logits;
  const std::size_t want_n = ref["greedy_tokens"].size();
  int64_t pos = int64_t(prompt.size());
  while (got.size() < want_n) {
    h.model->forward(b, *h.cache, logits);
    const float* row_logits = logits.data<float>();
    const int32_t next = int32_t(std::max_element(row_logits, row_logits + logits.dim(1)) - row_logits);
    got.push_back(next);
    b = ForwardBatch();
    b.add(row, pos++, next, true);
  }
  EXPECT_EQ(got, ids_of(ref["greedy_tokens"])) << name;
}

// A row's logits are bitwise the same alone or flattened with other rows of
// different lengths, at different positions, in any order, any thread count.
TEST_P(TransformersReference, RowLogitsIndependentOfBatch) {
  const std::string name = GetParam();
  const auto ref = reference(name);
  const auto a = ids_of(ref["ids_a"]), bseq = ids_of(ref["ids_b"]);
  Harness solo(name, "f32", 1);
  const Tensor alone = solo.prefill({a})[0];

  Harness mixed(name, "f32", 2);
  // Row b first gets a head start, so in the shared step the rows sit at
  // different positions; then a joins with its whole prompt.
  const kv::RowId rb = mixed.cache->create_row();
  ForwardBatch first;
  for (int i = 0; i < 5; ++i) first.add(rb, i, bseq[std::size_t(i)], false);
  Tensor ignored;
  mixed.model->forward(first, *mixed.cache, ignored);
  const kv::RowId ra = mixed.cache->create_row();
  ForwardBatch step;
  for (std::size_t i = 5; i < bseq.size(); ++i) step.add(rb, int64_t(i), bseq[i], true);
  for (std::size_t i = 0; i < a.size(); ++i) step.add(ra, int64_t(i), a[i], true);
  Tensor logits;
  mixed.model->forward(step, *mixed.cache, logits);
  const int64_t nb = int64_t(bseq.size()) - 5;
  EXPECT_TRUE(bitwise_equal(logits.rows(nb, nb + int64_t(a.size())), alone)) << name;
}

std::string case_name(const ::testing::TestParamInfo<const char*>& param_info) {
  std::string name = param_info.param;
  std::replace(name.begin(), name.end(), '/', '_');
  return name;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TransformersReference, ::testing::ValuesIn(kCases), case_name);
INSTANTIATE_TEST_SUITE_P(NewFamilies, TransformersReference, ::testing::ValuesIn(kNewFamilyCases), case_name);

// bf16 KV storage stays close to the f32 reference: K and V carry a relative
// rounding error of at most 2^-9, which moves these logits (|logit| up to ~10)
// by a few hundredths.
TEST(Gemma4KvCodec, Bf16StorageStaysClose) {
  const auto ref = reference("gemma4/e_series");
  Harness h("gemma4/e_series", "bf16");
  const Tensor got = h.prefill({ids_of(ref["ids_a"])})[0];
  const Tensor want = read_npy(fixture_dir("gemma4/e_series") + "/logits_a.npy");
  EXPECT_LE(max_abs_diff(got, want), 5e-2f);
}

// Matmul precision bf16 rounds activations to bf16 (relative error up to
// 2^-9) where they meet bf16 weights: the logits move, and a row's logits
// still do not depend on the batch. This random 6-layer model amplifies the
// rounding (measured: 0.19 against logits of std 0.66); the bundled trained
// model moves by 0.05 of 13.6 and keeps its greedy tokens and perplexity
// (cli_contract_test). The bound catches a wrong pair order or pairing,
// which give errors of the logits' own size.
TEST(Gemma4MatmulPrecision, Bf16ActivationsStayCloseAndBatchInvariant) {
  const auto ref = reference("gemma4/bf16");
  const auto a = ids_of(ref["ids_a"]), b = ids_of(ref["ids_b"]);
  const Tensor want = read_npy(fixture_dir("gemma4/bf16") + "/logits_a.npy");
  Harness exact("gemma4/bf16");
  Harness rounded("gemma4/bf16", "f32", 2, MatmulPrecision::Bf16);
  const Tensor f32_logits = exact.prefill({a})[0];
  const auto together = rounded.prefill({a, b});
  Harness alone("gemma4/bf16", "f32", 1, MatmulPrecision::Bf16);
  const Tensor bf16_alone = alone.prefill({a})[0];
  EXPECT_TRUE(bitwise_equal(together[0], bf16_alone));
  EXPECT_FALSE(bitwise_equal(together[0], f32_logits)) << "the bf16 path did not run";
  const float err = max_abs_diff(together[0], want);
  std::printf("bf16 matmul: max |logit - reference| = %g (f32 matmul: %g)\n", err, max_abs_diff(f32_logits, want));
  EXPECT_LE(err, 0.3f);
}

TEST(Gemma4Forward, RejectsBadBatches) {
  Harness h("gemma4/e_series");
  const kv::RowId row = h.cache->create_row();
  Tensor logits;
  ForwardBatch bad_id;
  bad_id.add(row, 0, 100000, true);
  EXPECT_THROW(h.model->forward(bad_id, *h.cache, logits), Error);
  ForwardBatch bad_pos;
  bad_pos.add(row, 3, 1, true);
  EXPECT_THROW(h.model->forward(bad_pos, *h.cache, logits), Error);
  EXPECT_EQ(h.cache->length(row), 0);
  ForwardBatch ok;
  ok.add(row, 0, 1, true);
  h.model->forward(ok, *h.cache, logits);
  EXPECT_EQ(h.cache->length(row), 1);
}

}  // namespace
}  // namespace rowlm
