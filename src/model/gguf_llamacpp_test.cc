// GGUF files written by llama.cpp itself (convert_hf_to_gguf.py + llama-quantize of the
// v0.4.0 bundle; tools/gguf/make_llamacpp_fixtures.py, run on the accelerator machine):
// rowlm's logits within 1e-4 of transformers' fp32 logits on the weights gguf-py
// dequantizes, and greedy continuations equal to transformers'. Skipped, saying why,
// while tests/fixtures/gguf/llamacpp is awaited (awaiting_fixtures.h); a missing
// fixture that is not awaited fails.

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "backend/factory/make_backend.h"
#include "core/npy.h"
#include "kv/kv_cache.h"
#include "model/awaiting_fixtures.h"
#include "model/model.h"

namespace rowlm {
namespace {

const char* kTypes[] = {"Q8_0", "Q4_0", "Q4_K_M", "Q5_K_M", "Q6_K", "Q3_K_S", "Q2_K"};

// The fixture's path under tests/fixtures, as awaiting_fixtures.h lists it.
std::string fixture_name(const std::string& type) { return "gguf/llamacpp/" + type; }

std::string dir_of(const std::string& type) {
  return std::string(ROWLM_SOURCE_DIR) + "/tests/fixtures/" + fixture_name(type);
}

class LlamaCppGguf : public ::testing::TestWithParam<const char*> {};

TEST_P(LlamaCppGguf, MatchesTransformersOnTheDequantizedWeights) {
  const std::string d = dir_of(GetParam());
  if (!std::filesystem::exists(d + "/reference.json")) {
    const std::string why = d + " is missing: run tools/gguf/make_llamacpp_fixtures.py on the accelerator machine";
    if (test::awaiting_fixture(fixture_name(GetParam()))) GTEST_SKIP() << why;
    FAIL() << why;
  }
  std::ifstream in(d + "/reference.json");
  const auto ref = nlohmann::json::parse(in);
  auto backend = make_backend({"cpu", 2, MatmulPrecision::F32});
  auto model = load_model(d + "/model.gguf", *backend);
  kv::CacheOptions opt;
  opt.layers = model->kv_layers(kv::parse_codec("f32"));
  opt.block_size = 4;
  kv::KvCache cache(opt, *backend);

  const auto ids = ref["ids_a"].get<std::vector<int32_t>>();
  {
    ForwardBatch b;
    const kv::RowId row = cache.create_row();
    for (std::size_t i = 0; i < ids.size(); ++i) b.add(row, int64_t(i), ids[i], true);
    Tensor logits;
    model->forward(b, cache, logits);
    const Tensor want = read_npy(d + "/logits_a.npy");
    ASSERT_EQ(logits.shape(), want.shape());
    float m = 0;
    for (int64_t i = 0; i < want.numel(); ++i)
      m = std::max(m, std::fabs(logits.data<float>()[i] - want.data<float>()[i]));
    EXPECT_LE(m, 1e-4f) << GetParam();
  }
  // Greedy continuation, one token at a time after the prompt.
  const kv::RowId row = cache.create_row();
  std::vector<int32_t> seq = ref["greedy_prompt"].get<std::vector<int32_t>>(), out;
  const auto want = ref["greedy_tokens"].get<std::vector<int32_t>>();
  int64_t pos = 0;
  while (out.size() < want.size()) {
    ForwardBatch b;
    for (std::size_t i = std::size_t(pos); i < seq.size(); ++i) b.add(row, int64_t(i), seq[i], i + 1 == seq.size());
    Tensor logits;
    model->forward(b, cache, logits);
    pos = int64_t(seq.size());
    const float* l = logits.data<float>();
    const int64_t V = logits.dim(1);
    const int32_t next = int32_t(std::max_element(l, l + V) - l);
    out.push_back(next);
    seq.push_back(next);
  }
  EXPECT_EQ(out, want) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Types, LlamaCppGguf, ::testing::ValuesIn(kTypes));

}  // namespace
}  // namespace rowlm
