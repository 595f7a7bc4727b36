// Models from GGUF files: a Qwen 3 fixture written by gguf-py as llama.cpp's
// converter writes it (tools/gguf/make_model_fixtures.py) against the same
// weights in safetensors and against transformers; metadata and tensor
// errors that name the key or tensor.

#include "model/gguf_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "backend/factory/make_backend.h"
#include "core/error.h"
#include "core/npy.h"
#include "io/gguf_dequant.h"
#include "io/gguf_test_util.h"
#include "io/temp_dir.h"
#include "kv/kv_cache.h"
#include "model/load_test_util.h"
#include "model/logits_test_util.h"
#include "model/model.h"

namespace rowlm {
namespace {

using gguf::testing::Image;

std::string fixtures() { return std::string(ROWLM_SOURCE_DIR) + "/tests/fixtures/"; }

using model_testing::prefill_logits;

TEST(GgufModel, Qwen3LogitsEqualTheSafetensorsModelAndTransformers) {
  std::ifstream in(fixtures() + "qwen3/chat/reference.json");
  const auto ids = nlohmann::json::parse(in)["ids_a"].get<std::vector<int32_t>>();
  const Tensor from_gguf = prefill_logits(fixtures() + "gguf/qwen3_chat_f32.gguf", ids);
  const Tensor from_safetensors = prefill_logits(fixtures() + "qwen3/chat", ids);
  ASSERT_EQ(from_gguf.shape(), from_safetensors.shape());
  EXPECT_EQ(std::memcmp(from_gguf.raw(), from_safetensors.raw(), from_gguf.nbytes()), 0);
  const Tensor want = read_npy(fixtures() + "qwen3/chat/logits_a.npy");
  ASSERT_EQ(want.shape(), from_gguf.shape());
  float m = 0;
  for (int64_t i = 0; i < want.numel(); ++i)
    m = std::max(m, std::fabs(want.data<float>()[i] - from_gguf.data<float>()[i]));
  EXPECT_LE(m, 1e-4f);
}

// tests/fixtures/gguf/qwen3_chat_mixed.gguf holds its matrices in Q4_0,
// Q4_1, Q5_0, Q5_1 and Q8_0 (quantized by gguf-py). Run as affine weights,
// its logits equal those of the same file with every tensor dequantized to
// F32 (by gguf::dequantize, itself equal to gguf-py's) bit for bit, as the
// affine matmul promises; and they stay near the unquantized model's.
TEST(GgufModel, QuantizedQwen3EqualsItsDequantizedWeights) {
  const std::string mixed = fixtures() + "gguf/qwen3_chat_mixed.gguf";
  const gguf::File f = gguf::File::open(mixed);
  int quantized = 0;
  const std::string dense = gguf::testing::rewrite(f, [&](const gguf::TensorInfo& t) {
    std::vector<float> v(std::size_t(t.numel()));
    gguf::dequantize(t.type, t.bytes, v);
    quantized += t.type != gguf::GgmlType::F32;
    return gguf::testing::TensorData{uint32_t(gguf::GgmlType::F32),
                                     std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4)};
  });
  EXPECT_EQ(quantized, 1 + 2 * 7);  // the embedding and every layer's seven matrices
  TempDir dir("gguf_model_test");
  const std::string dense_path = dir.file("dense.gguf");
  std::ofstream(dense_path, std::ios::binary) << dense;

  std::ifstream in(fixtures() + "qwen3/chat/reference.json");
  const auto ids = nlohmann::json::parse(in)["ids_a"].get<std::vector<int32_t>>();
  const Tensor got = prefill_logits(mixed, ids), want = prefill_logits(dense_path, ids);
  ASSERT_EQ(got.shape(), want.shape());
  EXPECT_EQ(std::memcmp(got.raw(), want.raw(), got.nbytes()), 0);
  const Tensor f32 = read_npy(fixtures() + "qwen3/chat/logits_a.npy");
  float m = 0, scale = 0;
  for (int64_t i = 0; i < f32.numel(); ++i) {
    m = std::max(m, std::fabs(f32.data<float>()[i] - got.data<float>()[i]));
    scale = std::max(scale, std::fabs(f32.data<float>()[i]));
  }
  EXPECT_GT(m, 0.0f);  // it is quantized
  EXPECT_LT(m, 0.25f * scale) << "quantization error out of proportion";
}

// tests/fixtures/gguf/gemma4_bf16.gguf: the gemma4/bf16 fixture (per-layer
// embeddings, KV sharing, double-wide MLP, proportional RoPE through
// rope_freqs, softcap) as llama.cpp's Gemma4Model writes it.
TEST(GgufModel, Gemma4LogitsEqualTheSafetensorsModelAndTransformers) {
  std::ifstream in(fixtures() + "gemma4/bf16/reference.json");
  const auto ids = nlohmann::json::parse(in)["ids_a"].get<std::vector<int32_t>>();
  const Tensor from_gguf = prefill_logits(fixtures() + "gguf/gemma4_bf16.gguf", ids);
  const Tensor from_safetensors = prefill_logits(fixtures() + "gemma4/bf16", ids);
  ASSERT_EQ(from_gguf.shape(), from_safetensors.shape());
  EXPECT_EQ(std::memcmp(from_gguf.raw(), from_safetensors.raw(), from_gguf.nbytes()), 0);
  const Tensor want = read_npy(fixtures() + "gemma4/bf16/logits_a.npy");
  ASSERT_EQ(want.shape(), from_gguf.shape());
  float m = 0;
  for (int64_t i = 0; i < want.numel(); ++i)
    m = std::max(m, std::fabs(want.data<float>()[i] - from_gguf.data<float>()[i]));
  EXPECT_LE(m, 1e-4f);
}

TEST(GgufModel, Qwen3MetadataReadsAsItsConfigJson) {
  const gguf::File f = gguf::File::open(fixtures() + "gguf/qwen3_chat_f32.gguf");
  const config::json got = gguf_hf_config(f);
  std::ifstream in(fixtures() + "qwen3/chat/config.json");
  const config::json want = config::json::parse(in);
  for (const char* key : {"model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings",
                          "tie_word_embeddings", "attention_bias"})
    EXPECT_EQ(got[key], want[key]) << key;
  EXPECT_EQ(got["rope_parameters"]["rope_theta"], want["rope_parameters"]["rope_theta"]);
  EXPECT_FLOAT_EQ(float(got["rms_norm_eps"].get<double>()), float(want["rms_norm_eps"].get<double>()));
  EXPECT_EQ(got["eos_token_id"], config::json::array({286}));  // tokenizer_config's eos_token
  EXPECT_FALSE(got.contains("bos_token_id"));
}

// A one-layer Qwen 3 GGUF built by hand (hidden 8, 2 heads of 4, 1 KV head,
// MLP 16, vocab 32), zero weights, with `edit` applied to its parts.
struct Parts {
  std::string arch = "qwen3";
  uint32_t embedding_length = 8;
  bool with_block_count = true;
  std::vector<std::tuple<std::string, std::vector<uint64_t>, uint32_t>> tensors = {
      {"token_embd.weight", {8, 32}, 0},     {"output_norm.weight", {8}, 0},
      {"blk.0.attn_norm.weight", {8}, 0},    {"blk.0.ffn_norm.weight", {8}, 0},
      {"blk.0.attn_q.weight", {8, 8}, 0},    {"blk.0.attn_k.weight", {8, 4}, 0},
      {"blk.0.attn_v.weight", {8, 4}, 0},    {"blk.0.attn_output.weight", {8, 8}, 0},
      {"blk.0.attn_q_norm.weight", {4}, 0},  {"blk.0.attn_k_norm.weight", {4}, 0},
      {"blk.0.ffn_gate.weight", {8, 16}, 0}, {"blk.0.ffn_up.weight", {8, 16}, 0},
      {"blk.0.ffn_down.weight", {16, 8}, 0},
  };
};

std::string write_parts(const Parts& p, const TempDir& dir) {
  const uint64_t n_kv = 7 + (p.with_block_count ? 1 : 0);
  Image img;
  img.header(p.tensors.size(), n_kv).kv_string("general.architecture", p.arch);
  if (p.with_block_count) img.kv_u32(p.arch + ".block_count", 1);
  img.kv_u32(p.arch + ".embedding_length", p.embedding_length).kv_u32(p.arch + ".feed_forward_length", 16);
  img.kv_u32(p.arch + ".attention.head_count", 2).kv_u32(p.arch + ".attention.head_count_kv", 1);
  img.kv_u32(p.arch + ".attention.key_length", 4).kv_u32(p.arch + ".context_length", 64);
  uint64_t offset = 0;
  std::vector<uint64_t> sizes;
  for (const auto& [name, ne, type] : p.tensors) {
    img.tensor(name, ne, type, offset);
    uint64_t n = 1;
    for (uint64_t d : ne) n *= d;
    const auto t = gguf::ggml_type_traits(type);
    const uint64_t bytes = t ? n / uint64_t(t->block_size) * uint64_t(t->block_bytes) : n * 4;
    offset += (bytes + 31) / 32 * 32;
  }
  img.data(offset);
  const std::string path = dir.path() + "/m.gguf";
  std::ofstream(path, std::ios::binary) << img.bytes();
  return path;
}

std::string load_error(const Parts& p) {
  TempDir dir("gguf_model_test");
  return model_testing::load_error_at(write_parts(p, dir));
}

TEST(GgufModel, TheHandMadeFileLoads) { EXPECT_EQ(load_error(Parts{}), "no error"); }

TEST(GgufModel, ErrorsNameTheKeyOrTensor) {
  auto has = [](const std::string& s, const std::string& needle) {
    return s.find(needle) != std::string::npos ? ::testing::AssertionSuccess()
                                               : ::testing::AssertionFailure() << s;
  };
  Parts p;
  p.arch = "falcon";
  EXPECT_TRUE(has(load_error(p), "GGUF architecture 'falcon' is not supported (supported: gemma3, gemma4, llama, "
                                 "qwen2, qwen3, qwen3moe)"));
  p = Parts{};
  p.with_block_count = false;
  EXPECT_TRUE(has(load_error(p), "'qwen3.block_count' is missing"));
  p = Parts{};
  p.embedding_length = 16;  // every matrix now disagrees with the metadata
  EXPECT_TRUE(has(load_error(p), "GGUF tensor 'token_embd.weight' has shape [32, 8]"));
  p = Parts{};
  std::get<1>(p.tensors[6]) = {8, 8};
  EXPECT_TRUE(has(load_error(p), "'blk.0.attn_v.weight' has shape [8, 8] (ggml ne [8, 8]); the metadata implies [4, 8]"));
  p = Parts{};
  p.tensors.erase(p.tensors.begin() + 4);
  EXPECT_TRUE(has(load_error(p), "GGUF tensor 'blk.0.attn_q.weight' is missing"));
  p = Parts{};
  p.tensors.push_back({"blk.1.attn_q.weight", {8, 8}, 0});
  EXPECT_TRUE(has(load_error(p), "GGUF tensor 'blk.1.attn_q.weight' is not part of the qwen3 model"));
}

// A matrix of a type rowlm cannot read is refused by name (ne[0] must be a
// whole block, so this one sits where the shape check cannot reject it
// first: a file whose embedding is IQ4_XS of the right shape).
TEST(GgufModel, UnreadableTypesAreNamed) {
  Parts p;
  p.embedding_length = 256;
  // Shapes for hidden 256: only the embedding is checked before failing.
  std::get<1>(p.tensors[0]) = {256, 32};
  std::get<2>(p.tensors[0]) = uint32_t(gguf::GgmlType::IQ4_XS);
  const std::string e = load_error(p);
  EXPECT_NE(e.find("GGUF tensor 'token_embd.weight' (IQ4_XS) has a type rowlm does not read"), std::string::npos) << e;
}

}  // namespace
}  // namespace rowlm
