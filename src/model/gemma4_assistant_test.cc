// The Gemma 4 assistant: its config and what it refuses; a draft step is
// batch invariant and reads the target's keys only below the key limit; and
// its drafts and logits equal transformers' (tools/oracle/
// make_assistant_fixtures.py: random target + random assistant pairs).

#include "model/gemma4_assistant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "backend/factory/make_backend.h"
#include "core/error.h"
#include "core/npy.h"
#include "io/safetensors.h"
#include "io/temp_dir.h"
#include "model/awaiting_fixtures.h"
#include "model/gemma4_assistant_test_util.h"
#include "model/gemma4_config.h"

namespace rowlm::gemma4 {
namespace {

using json = nlohmann::json;

std::string fixture_dir(const std::string& name) { return std::string(ROWLM_SOURCE_DIR) + "/tests/fixtures/" + name; }

// The e_series target of make_gemma4_fixtures.py (KV sharing, per-layer
// inputs; vocab 128, hidden 64, 2 KV heads of 16 / 32, window 4) and an
// assistant shaped for it.
std::string small_target() { return fixture_dir("gemma4/e_series"); }
test::AssistantShape small_shape() {
  test::AssistantShape s;
  s.vocab = 128;
  s.backbone = 64;
  s.hidden = 32;
  s.kv_heads = 2;
  s.head_dim = 16;
  s.global_head_dim = 32;
  s.window = 4;
  s.intermediate = 48;
  return s;
}

// A target with its cache (f32 KV, small blocks) and an assistant for it.
struct Pair {
  std::unique_ptr<Backend> backend = make_backend({"cpu", 2, MatmulPrecision::F32});
  std::unique_ptr<Model> target;
  std::unique_ptr<Assistant> assistant;
  std::unique_ptr<kv::KvCache> cache;

  Pair(const std::string& target_dir, const std::string& assistant_dir)
      : target(load_model(target_dir, *backend)), assistant(Assistant::load(assistant_dir, *backend, *target)) {
    kv::CacheOptions opt;
    opt.layers = target->kv_layers(kv::parse_codec("f32"));
    assistant->widen_target_windows(opt.layers);
    opt.block_size = 4;
    cache = std::make_unique<kv::KvCache>(opt, *backend);
  }

  // A row holding `tokens` (all computed); the target's final-normed state of its last position.
  std::pair<kv::RowId, std::vector<float>> prefill(const std::vector<int32_t>& tokens) {
    const kv::RowId row = cache->create_row();
    ForwardBatch b;
    for (std::size_t i = 0; i < tokens.size(); ++i) b.add(row, int64_t(i), tokens[i], i + 1 == tokens.size());
    Tensor logits, hidden;
    target->forward(b, *cache, logits, &hidden);
    return {row, std::vector<float>(hidden.data<float>(), hidden.data<float>() + hidden.numel())};
  }

  // One assistant step over rows; returns logits and next states.
  std::pair<Tensor, Tensor> step(const std::vector<int32_t>& tokens, const std::vector<std::vector<float>>& states,
                                 const std::vector<kv::AttentionQuery>& queries) {
    const int64_t S = assistant->state_size();
    Tensor in = Tensor::uninitialized(DType::F32, {int64_t(tokens.size()), S});
    for (std::size_t i = 0; i < states.size(); ++i)
      std::memcpy(in.data<float>() + int64_t(i) * S, states[i].data(), std::size_t(S) * sizeof(float));
    Tensor logits, next;
    assistant->step(tokens, in, queries, *target, *cache, logits, next);
    return {std::move(logits), std::move(next)};
  }
};

std::vector<float> row_of(const Tensor& t, int64_t i) {
  return std::vector<float>(t.data<float>() + i * t.dim(1), t.data<float>() + (i + 1) * t.dim(1));
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(AssistantConfig, ReadsTheAssistantFieldsAndEveryLayerReadsTheTarget) {
  test::AssistantShape s = small_shape();
  s.centroids = 8;
  s.top_k = 2;
  const Config c = parse_config(test::assistant_config(s).dump(), "config.json");
  ASSERT_TRUE(c.assistant.has_value());
  EXPECT_EQ(c.assistant->backbone_hidden_size, 64);
  EXPECT_TRUE(c.assistant->use_ordered_embeddings);
  EXPECT_EQ(c.assistant->num_centroids, 8);
  EXPECT_EQ(c.assistant->centroid_intermediate_top_k, 2);
  ASSERT_EQ(c.layers.size(), 3u);
  for (const LayerConfig& l : c.layers) EXPECT_EQ(l.kv_source, -1);
  EXPECT_EQ(c.layers[2].head_dim, 32);
  EXPECT_FALSE(parse_config(test::assistant_config(small_shape()).dump(), "c").assistant->use_ordered_embeddings);
}

TEST(AssistantConfig, RefusesWhatTransformersRefuses) {
  auto error = [](const std::function<void(json&)>& edit) {
    test::AssistantShape s = small_shape();
    s.centroids = 8;
    s.top_k = 2;
    json j = test::assistant_config(s);
    edit(j);
    const std::string e = error_of([&] { parse_config(j.dump(), "a/config.json"); });
    EXPECT_NE(e, "");
    return e;
  };
  EXPECT_NE(error([](json& j) { j["text_config"]["hidden_size_per_layer_input"] = 8; })
                .find("text_config.hidden_size_per_layer_input' must be 0 in an assistant"),
            std::string::npos);
  EXPECT_NE(error([](json& j) { j["text_config"]["num_kv_shared_layers"] = 2; }).find("must be num_hidden_layers"),
            std::string::npos);
  EXPECT_NE(error([](json& j) { j["num_centroids"] = 7; }).find("does not divide vocab_size"), std::string::npos);
  EXPECT_NE(error([](json& j) { j["centroid_intermediate_top_k"] = 9; }).find("exceeds num_centroids"),
            std::string::npos);
  EXPECT_NE(error([](json& j) { j["text_config"]["use_double_wide_mlp"] = true; }).find("use_double_wide_mlp"),
            std::string::npos);
}

TEST(Assistant, IsFoundByModelTypeOrArchitectureAndRefusedAlone) {
  TempDir dir("rowlm_assistant");
  test::write_random_assistant(dir.path(), small_shape(), 1);
  EXPECT_TRUE(is_assistant_dir(dir.path()));
  EXPECT_FALSE(is_assistant_dir(small_target()));
  EXPECT_FALSE(is_assistant_dir(dir.path() + "/missing"));
  auto backend = make_backend({"cpu", 1, MatmulPrecision::F32});
  const std::string e = error_of([&] { load_model(dir.path(), *backend); });
  EXPECT_NE(e.find("pass it as --draft"), std::string::npos) << e;
}

TEST(Assistant, RefusesATargetItDoesNotFit) {
  auto backend = make_backend({"cpu", 1, MatmulPrecision::F32});
  const auto target = load_model(small_target(), *backend);
  auto error = [&](const std::function<void(test::AssistantShape&)>& edit) {
    TempDir dir("rowlm_assistant");
    test::AssistantShape s = small_shape();
    edit(s);
    test::write_random_assistant(dir.path(), s, 2);
    return error_of([&] { Assistant::load(dir.path(), *backend, *target); });
  };
  EXPECT_NE(error([](auto& s) { s.vocab = 256; }).find("vocabulary has 256 tokens, the model's 128"),
            std::string::npos);
  EXPECT_NE(error([](auto& s) { s.backbone = 32; }).find("backbone_hidden_size is 32 but the model's hidden size is 64"),
            std::string::npos);
  EXPECT_NE(error([](auto& s) { s.kv_heads = 1; }).find("has 1 KV heads of 16, but the model's KV it reads has 2 of 16"),
            std::string::npos);
  EXPECT_NE(error([](auto& s) { s.global_head_dim = 16; }).find("(full_attention) has 2 KV heads of 16"),
            std::string::npos);
}

// Rows of several lengths past the window: each row's step alone equals the
// batched step, bitwise, with and without ordered embeddings; and a row
// holding more tokens than the key limit drafts as if it held only those.
TEST(Assistant, StepIsBatchInvariantAndStopsAtTheKeyLimit) {
  for (const int centroids : {0, 8}) {
    TempDir dir("rowlm_assistant");
    test::AssistantShape s = small_shape();
    s.centroids = centroids;
    s.top_k = 3;
    test::write_random_assistant(dir.path(), s, 3);
    Pair p(small_target(), dir.path());
    const std::vector<std::vector<int32_t>> seqs = {{5, 9, 2, 77, 3, 8, 41, 1, 100, 6, 7}, {3, 4}, {90, 12, 5, 5, 1, 60}};
    std::vector<kv::RowId> rows;
    std::vector<std::vector<float>> states;
    std::vector<int32_t> last;
    std::vector<kv::AttentionQuery> queries;
    for (const auto& q : seqs) {
      auto [row, state] = p.prefill(std::vector<int32_t>(q.begin(), q.end() - 1));
      rows.push_back(row);
      states.push_back(state);
      last.push_back(q.back());
      const int64_t computed = int64_t(q.size()) - 1;
      queries.push_back({row, computed, computed});
    }
    auto [logits, next] = p.step(last, states, queries);
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      auto [l1, n1] = p.step({last[i]}, {states[i]}, {queries[i]});
      EXPECT_EQ(row_of(l1, 0), row_of(logits, int64_t(i))) << "row " << i << " centroids " << centroids;
      EXPECT_EQ(row_of(n1, 0), row_of(next, int64_t(i))) << "row " << i << " centroids " << centroids;
    }
    // The second row again, with three more tokens written past its key
    // limit (a row shorter than the window: one past it would have let its
    // oldest keys go, which a row at its key limit never has).
    auto [row, state] = p.prefill({3, 4, 11, 12});
    (void)state;
    auto [l2, n2] = p.step({last[1]}, {states[1]}, {{row, queries[1].position, queries[1].key_limit}});
    EXPECT_EQ(row_of(l2, 0), row_of(logits, 1)) << "centroids " << centroids;
    EXPECT_EQ(row_of(n2, 0), row_of(next, 1)) << "centroids " << centroids;
    if (centroids > 0) {  // only the 3 · 16 tokens of the top centroids have their own logits
      const std::vector<float> r = row_of(logits, 0);
      const float lowest = *std::min_element(r.begin(), r.end());
      EXPECT_EQ(std::count(r.begin(), r.end(), lowest), 128 - 48);
    }
  }
}

// With ordered embeddings, the scored tokens are whole centroid groups of
// the checkpoint's token_ordering, `top_k` of them, each scored as the full
// head scores it (the same assistant without ordered embeddings), every
// other token at the smallest scored logit minus 1.
TEST(Assistant, OrderedEmbeddingScoresWholeCentroidGroupsAsTheFullHeadDoes) {
  TempDir ordered_dir("rowlm_assistant"), full_dir("rowlm_assistant");
  test::AssistantShape s = small_shape();
  test::write_random_assistant(full_dir.path(), s, 4);
  s.centroids = 8;
  s.top_k = 3;
  test::write_random_assistant(ordered_dir.path(), s, 4);  // the same weights, and the centroids
  const SafetensorsFile file = SafetensorsFile::open(ordered_dir.path() + "/model.safetensors");
  const Tensor ordering = file.tensor("masked_embedding.token_ordering");
  Pair ordered(small_target(), ordered_dir.path()), full(small_target(), full_dir.path());
  const std::vector<int32_t> seq = {5, 9, 2, 77, 3, 8, 41, 1, 100, 6};
  auto [row_o, state_o] = ordered.prefill(seq);
  auto [row_f, state_f] = full.prefill(seq);
  ASSERT_EQ(state_o, state_f);
  const int64_t P = int64_t(seq.size());
  auto [lo, no] = ordered.step({7}, {state_o}, {{row_o, P, P}});
  auto [lf, nf] = full.step({7}, {state_f}, {{row_f, P, P}});
  EXPECT_EQ(row_of(no, 0), row_of(nf, 0));
  const std::vector<float> o = row_of(lo, 0), f = row_of(lf, 0);
  const float lowest = *std::min_element(o.begin(), o.end());
  int groups = 0;
  float lowest_scored = INFINITY;
  for (int64_t c = 0; c < 8; ++c) {
    int scored = 0;
    for (int64_t j = 0; j < 16; ++j) {
      const int64_t token = ordering.data<int64_t>()[c * 16 + j];
      if (o[std::size_t(token)] == lowest) continue;
      ++scored;
      EXPECT_NEAR(o[std::size_t(token)], f[std::size_t(token)], 1e-5f) << "token " << token;
      lowest_scored = std::min(lowest_scored, o[std::size_t(token)]);
    }
    EXPECT_TRUE(scored == 0 || scored == 16) << "centroid " << c << ": " << scored << " of its tokens scored";
    groups += scored == 16;
  }
  EXPECT_EQ(groups, 3);
  EXPECT_EQ(lowest, lowest_scored - 1.0f);
}

// --- transformers' drafts (tools/oracle/make_assistant_fixtures.py) -----------

class AssistantReference : public ::testing::TestWithParam<const char*> {};

TEST_P(AssistantReference, DraftsAndLogitsMatchTransformers) {
  const std::string name = std::string("gemma4_assistant/") + GetParam();
  const std::string dir = fixture_dir(name);
  if (!std::filesystem::exists(dir + "/reference.json")) {
    const std::string why = "fixture " + dir + " is missing (made by tools/oracle/make_assistant_fixtures.py with "
                            "transformers on the accelerator machine)";
    if (test::awaiting_fixture(name)) GTEST_SKIP() << "awaiting fixtures: " << why;
    FAIL() << why;
  }
  std::ifstream in(dir + "/reference.json");
  const json ref = json::parse(in);
  // The direct-call rounds used this wiring (gemma4_assistant.h's). The
  // script reads it off transformers' own assisted generation where that
  // matches (the scaled embedding did; reference.json's hf_generate says what
  // its state and KV were).
  EXPECT_EQ(ref["wiring"]["embedding"], "scaled") << ref["hf_generate"].dump(1);
  EXPECT_EQ(ref["wiring"]["hidden"], "final_norm") << ref["hf_generate"].dump(1);
  const Tensor want = read_npy(dir + "/draft_logits.npy");
  const int64_t K = ref["draft_steps"].get<int64_t>(), V = want.dim(2);
  ASSERT_EQ(want.dim(0), int64_t(ref["rounds"].size()));
  Pair p(dir + "/target", dir + "/assistant");
  int64_t r = 0, compared = 0;
  for (const json& round : ref["rounds"]) {
    const auto committed = round["committed"].get<std::vector<int32_t>>();
    auto [row, state] = p.prefill(std::vector<int32_t>(committed.begin(), committed.end() - 1));
    const int64_t computed = int64_t(committed.size()) - 1;
    int32_t token = committed.back();
    for (int64_t k = 0; k < K; ++k) {
      auto [logits, next] = p.step({token}, {state}, {{row, computed, computed}});
      const float* w = want.data<float>() + (r * K + k) * V;
      float diff = 0, scale = 1;
      for (int64_t v = 0; v < V; ++v) {
        diff = std::max(diff, std::fabs(logits.data<float>()[v] - w[v]));
        scale = std::max(scale, std::fabs(w[v]));
      }
      EXPECT_LE(diff, 1e-4f * scale) << name << " round " << r << " step " << k;
      const int32_t draft = round["drafts"][std::size_t(k)].get<int32_t>();
      if (round["draft_margins"][std::size_t(k)].get<double>() > 1e-3) {
        EXPECT_EQ(std::max_element(logits.data<float>(), logits.data<float>() + V) - logits.data<float>(), draft)
            << name << " round " << r << " step " << k;
        ++compared;
      }
      token = draft;  // transformers' draft, so that later steps follow its round
      state = row_of(next, 0);
    }
    p.cache->retire(row);
    ++r;
  }
  EXPECT_GT(compared, r) << "too few drafts were clear of a tie";
}

INSTANTIATE_TEST_SUITE_P(Cases, AssistantReference, ::testing::Values("plain", "e_series_ordered", "keqv"));

}  // namespace
}  // namespace rowlm::gemma4
