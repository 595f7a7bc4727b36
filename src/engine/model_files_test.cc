// What a GGUF file's tokenizer keys become (engine/model_files.h): the keys
// reach the vocabulary as llama.cpp writes them. The pipelines themselves
// are checked against HF tokenizers in tokenizer/gguf_vocab_test.cc; here a
// nine-token vocabulary whose ids are worked out by hand: "ab ab" is
// "▁ab▁ab" with Llama 2's space prefix (add_space_prefix true or absent)
// and "ab▁ab" without it, the merges coming from the scores.

#include "engine/model_files.h"

#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "io/gguf_test_util.h"
#include "io/temp_dir.h"

namespace rowlm {
namespace {

using gguf::ValueType;

std::string tokenizer_gguf(std::optional<bool> add_space_prefix) {
  // ids: 0 <unk>, 1 <s>, 2 </s>, 3 ▁, 4 a, 5 b, 6 ▁a, 7 ab, 8 ▁ab
  const std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", "\xe2\x96\x81", "a", "b",
                                           "\xe2\x96\x81" "a", "ab", "\xe2\x96\x81" "ab"};
  const std::vector<double> scores = {0, 0, 0, -1, -2, -3, -4, -5, -6};
  const std::vector<int64_t> types = {2, 3, 3, 1, 1, 1, 1, 1, 1};
  gguf::testing::Image img;
  img.header(0, 5 + (add_space_prefix ? 1 : 0));
  img.kv_string("general.architecture", "llama");
  img.kv_string("tokenizer.ggml.model", "llama");
  img.str("tokenizer.ggml.tokens").put<uint32_t>(uint32_t(ValueType::Array));
  gguf::testing::put_value(img, ValueType::Array, gguf::Value{ValueType::Array, ValueType::String, tokens});
  img.str("tokenizer.ggml.scores").put<uint32_t>(uint32_t(ValueType::Array));
  gguf::testing::put_value(img, ValueType::Array, gguf::Value{ValueType::Array, ValueType::F32, scores});
  img.str("tokenizer.ggml.token_type").put<uint32_t>(uint32_t(ValueType::Array));
  gguf::testing::put_value(img, ValueType::Array, gguf::Value{ValueType::Array, ValueType::I32, types});
  if (add_space_prefix)
    img.str("tokenizer.ggml.add_space_prefix").put<uint32_t>(uint32_t(ValueType::Bool)).put<uint8_t>(*add_space_prefix);
  img.data(0);
  return img.bytes();
}

std::vector<int32_t> ids_of(const std::string& bytes, const std::string& text) {
  TempDir dir("model_files_test");
  const std::string path = dir.file("model.gguf");
  std::ofstream(path, std::ios::binary) << bytes;
  const auto tok = load_model_tokenizer(path);
  EXPECT_TRUE(tok.has_value());
  return tok ? tok->encode(text) : std::vector<int32_t>{};
}

TEST(GgufTokenizerKeys, ScoresAndTheSpacePrefixAreRead) {
  // ▁ab ▁ab: ▁a (score -4) merges before ab (-5); then ▁a + b is ▁ab.
  EXPECT_EQ(ids_of(tokenizer_gguf(std::nullopt), "ab ab"), (std::vector<int32_t>{8, 8}));
  EXPECT_EQ(ids_of(tokenizer_gguf(true), "ab ab"), (std::vector<int32_t>{8, 8}));
  // ab▁ab (the split on spaces finds none once they are "▁"): ▁a first,
  // then the leftmost ab (-5) before ▁a + b (-6).
  EXPECT_EQ(ids_of(tokenizer_gguf(false), "ab ab"), (std::vector<int32_t>{7, 8}));
  // <unk> (UNKNOWN) is special text: one id.
  EXPECT_EQ(ids_of(tokenizer_gguf(false), "<unk>"), (std::vector<int32_t>{0}));
}

}  // namespace
}  // namespace rowlm
