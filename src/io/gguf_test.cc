#include "io/gguf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>

#include "core/error.h"
#include "core/npy.h"
#include "io/gguf_affine.h"
#include "io/gguf_dequant.h"
#include "io/gguf_test_util.h"

namespace rowlm::gguf {
namespace {

using testing::Image;
using testing::parse;

std::string fixture(const std::string& rel) {
  const char* root = std::getenv("ROWLM_SOURCE_DIR");
  return std::string(root ? root : ".") + "/tests/fixtures/gguf/" + rel;
}

void expect_error(const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

std::vector<float> dequantized(const TensorInfo& t) {
  std::vector<float> out(std::size_t(t.numel()));
  dequantize(t.type, t.bytes, out);
  return out;
}

std::vector<float> reference(const std::string& name) {
  const Tensor t = read_npy(fixture("blocks/" + name + ".npy"));
  return {t.data<float>(), t.data<float>() + t.numel()};
}

// tests/fixtures/gguf/blocks.gguf: written by gguf-py's GGUFWriter
// (tools/gguf/make_block_fixtures.py), one [3, 512] tensor per type.
TEST(GgufFile, ReadsWhatGgufPyWrote) {
  const File f = File::open(fixture("blocks.gguf"));
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.get_string("general.architecture"), "rowlm-blocks");
  EXPECT_EQ(f.tensors().size(), 18u);
  for (const TensorInfo& t : f.tensors()) {
    EXPECT_EQ(t.shape(), (std::vector<int64_t>{3, 512})) << t.name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.bytes.data()) % 32, 0u) << t.name;
  }
  EXPECT_EQ(f.tensor("random.q6_k").type, GgmlType::Q6_K);
  EXPECT_EQ(f.tensor("dense.bf16").type, GgmlType::BF16);
}

// rowlm's dequantizer against gguf-py's gguf.quants.dequantize, bit for bit,
// on random blocks of every type and on values gguf-py quantized.
TEST(GgufDequantize, EqualsGgufPyOnEveryType) {
  const File f = File::open(fixture("blocks.gguf"));
  for (const TensorInfo& t : f.tensors()) {
    const std::vector<float> got = dequantized(t), want = reference(t.name);
    ASSERT_EQ(got.size(), want.size()) << t.name;
    int mismatches = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
      if (std::memcmp(&got[i], &want[i], 4) != 0 && mismatches++ < 3)
        ADD_FAILURE() << t.name << " [" << i << "]: " << got[i] << " vs gguf-py " << want[i];
    EXPECT_EQ(mismatches, 0) << t.name;
  }
}

// The affine form of every block type: codes within 2^bits and
// scale · code + bias (f32, two roundings, as the affine kernels compute)
// equal to the dequantized values (exactly but Q6_K, within its rounding;
// a zero may come out +0 where ggml's 0·d gives −0).
TEST(GgufAffine, ReproducesTheDequantizedValues) {
  const File f = File::open(fixture("blocks.gguf"));
  int checked = 0;
  for (const TensorInfo& t : f.tensors()) {
    const auto layout = affine_layout(t.type);
    if (!layout) {
      EXPECT_TRUE(t.type == GgmlType::F32 || t.type == GgmlType::F16 || t.type == GgmlType::BF16) << t.name;
      continue;
    }
    ++checked;
    const std::size_t n = std::size_t(t.numel()), groups = n / std::size_t(layout->group_size);
    std::vector<uint8_t> codes(n);
    std::vector<float> scales(groups), biases(groups);
    decode_affine(t.type, t.bytes, codes, scales, biases);
    const std::vector<float> want = reference(t.name);
    int mismatches = 0;
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_LT(codes[i], 1 << layout->bits) << t.name;
      const std::size_t g = i / std::size_t(layout->group_size);
      const float product = scales[g] * float(codes[i]);
      const float v = product + biases[g];
      bool ok = v == want[i];  // +0 where ggml's 0·d may give −0: the same value in every sum
      if (t.type == GgmlType::Q6_K)  // one rounding apart: within half an ulp of each operand's magnitude
        ok = std::fabs(v - want[i]) <= 1e-6f * (std::fabs(product) + std::fabs(biases[g]));
      if (!ok && mismatches++ < 3)
        ADD_FAILURE() << t.name << " [" << i << "]: " << v << " vs " << want[i];
    }
    EXPECT_EQ(mismatches, 0) << t.name;
  }
  EXPECT_EQ(checked, 15);
}

TEST(GgufFile, EveryTruncationIsAnError) {
  std::ifstream in(fixture("blocks.gguf"), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  const File whole = parse(bytes);
  const auto* base = reinterpret_cast<const std::byte*>(static_cast<const std::string*>(whole.owner().get())->data());
  std::size_t needed = 0;  // the last tensor's end; GGUFWriter pads the file past it
  for (const TensorInfo& t : whole.tensors())
    needed = std::max(needed, std::size_t(t.bytes.data() + t.bytes.size() - base));
  ASSERT_GT(needed, bytes.size() - 32);
  const std::size_t data_start = std::size_t(whole.tensors()[0].bytes.data() - base);
  // Every cut through the header and infos; through the data, every 37th
  // (each of those cuts only moves the bounds check).
  for (std::size_t n = 0; n < needed; n += n < data_start ? 1 : 37) {
    try {
      File::parse(std::as_bytes(std::span(bytes.data(), n)), nullptr, "mem.gguf");  // no copy per prefix
      ADD_FAILURE() << "a prefix of " << n << " bytes parsed";
      break;
    } catch (const Error& e) {
      const std::string what = e.what();
      if (n >= 4 && what.find("truncated") == std::string::npos) {
        ADD_FAILURE() << n << ": " << what;
        break;
      }
    }
  }
}

TEST(GgufFile, BadHeadersAreNamed) {
  expect_error([] { parse("GGML0000"); }, "not a GGUF file");
  expect_error([] { parse(Image().header(0, 0, 1).bytes()); }, "version 1 is not supported");
  expect_error([] { parse(Image().header(0, 0, 0x03000000).bytes()); }, "big-endian");
  expect_error([] { parse(Image().header(0, uint64_t(1) << 60).bytes()); }, "truncated");
  expect_error([] { parse(Image().header(uint64_t(1) << 62, 0).bytes()); }, "truncated");
  EXPECT_EQ(parse(Image().header(0, 0).bytes()).tensors().size(), 0u);
}

TEST(GgufFile, MetadataIsTypedAndChecked) {
  Image img;
  img.header(0, 5).kv_string("general.architecture", "qwen3").kv_u32("qwen3.block_count", 28);
  img.str("f").put<uint32_t>(uint32_t(ValueType::F32)).put<float>(0.5f);
  img.str("ids").put<uint32_t>(uint32_t(ValueType::Array)).put<uint32_t>(uint32_t(ValueType::I32)).put<uint64_t>(3);
  img.put<int32_t>(-1).put<int32_t>(0).put<int32_t>(7);
  img.str("toks").put<uint32_t>(uint32_t(ValueType::Array)).put<uint32_t>(uint32_t(ValueType::String)).put<uint64_t>(2);
  img.str("a").str("\xe2\x96\x81" "b");
  const File f = parse(img.bytes());
  EXPECT_EQ(f.get_string("general.architecture"), "qwen3");
  EXPECT_EQ(f.get_int("qwen3.block_count"), 28);
  EXPECT_EQ(f.get_float("qwen3.block_count"), 28.0);
  EXPECT_EQ(f.get_float("f"), 0.5);
  EXPECT_EQ(f.get_ints("ids"), (std::vector<int64_t>{-1, 0, 7}));
  EXPECT_EQ(f.get_strings("toks"), (std::vector<std::string>{"a", "\xe2\x96\x81" "b"}));
  expect_error([&] { f.get_int("general.architecture"); }, "'general.architecture' must be an integer, not string");
  expect_error([&] { f.get_strings("ids"); }, "'ids' must be an array of strings, not array of i32");
  expect_error([&] { f.get_string("missing.key"); }, "'missing.key' is missing");

  expect_error([] { parse(Image().header(0, 2).kv_u32("k", 1).kv_u32("k", 2).bytes()); }, "'k' appears twice");
  expect_error([] { parse(Image().header(0, 1).str("k").put<uint32_t>(13).bytes()); }, "'k': unknown value type 13");
  expect_error([] { parse(Image().header(0, 1).str("b").put<uint32_t>(uint32_t(ValueType::Bool)).put<uint8_t>(2).bytes()); },
               "bool value 2");
  expect_error([] {
    parse(Image().header(0, 1).str("nest").put<uint32_t>(uint32_t(ValueType::Array))
              .put<uint32_t>(uint32_t(ValueType::Array)).put<uint64_t>(0).bytes());
  }, "arrays of arrays");
  expect_error([] {  // a count whose byte size would wrap around 2^64
    parse(Image().header(0, 1).str("big").put<uint32_t>(uint32_t(ValueType::Array))
              .put<uint32_t>(uint32_t(ValueType::U64)).put<uint64_t>(uint64_t(1) << 61).bytes());
  }, "truncated");
  expect_error([] { parse(Image().header(0, 1).kv_u32("general.alignment", 48).bytes()); }, "not a power of two");
  expect_error([] { parse(Image().header(0, 1).kv_string("general.alignment", "32").bytes()); },
               "'general.alignment' must be u32");
}

TEST(GgufFile, BadTensorInfosNameTheTensor) {
  const uint32_t f32 = uint32_t(GgmlType::F32), q4_0 = uint32_t(GgmlType::Q4_0);
  auto one = [](const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset, std::size_t data) {
    return Image().header(1, 0).tensor(name, std::move(ne), type, offset).data(data).bytes();
  };
  EXPECT_EQ(parse(one("w", {64, 2}, q4_0, 0, 72)).tensor("w").shape(), (std::vector<int64_t>{2, 64}));
  expect_error([&] { parse(one("blk.0.attn_q.weight", {64, 2}, 77, 0, 72)); }, "'blk.0.attn_q.weight' has unknown type 77");
  expect_error([&] { parse(one("w", {48, 2}, q4_0, 0, 72)); }, "'w' of type Q4_0 has 48 elements per row");
  expect_error([&] { parse(one("w", {64, 2}, q4_0, 0, 71)); }, "tensor 'w' needs bytes [0, 72)");
  expect_error([&] { parse(one("w", {8}, f32, 16, 64)); }, "'w' starts at data offset 16, not a multiple of the alignment 32");
  expect_error([&] { parse(one("w", {8, 1, 1, 1, 1}, f32, 0, 32)); }, "'w' has 5 dimensions");
  expect_error([&] { parse(one("w", {8, 0}, f32, 0, 32)); }, "'w' has an invalid dimension 0");
  expect_error([&] { parse(one("w", {uint64_t(1) << 40, uint64_t(1) << 40}, f32, 0, 32)); }, "'w' has an invalid dimension");
  expect_error([&] { parse(one("w", {uint64_t(1) << 62}, f32, 0, 32)); }, "'w' is too large");
  expect_error([&] {
    parse(Image().header(2, 0).tensor("a", {16}, f32, 0).tensor("a", {8}, f32, 64).data(96).bytes());
  }, "'a' appears twice");
  expect_error([&] {
    parse(Image().header(2, 0).tensor("a", {16}, f32, 0).tensor("b", {8}, f32, 32).data(96).bytes());
  }, "'a' and 'b' overlap");
}

TEST(GgufTypes, NamesAndSizes) {
  EXPECT_EQ(ggml_type_name(12), "Q4_K");
  EXPECT_EQ(ggml_type_name(5), "type 5");
  EXPECT_EQ(traits(GgmlType::Q6_K).block_bytes, 210);
  EXPECT_EQ(traits(GgmlType::Q3_K).block_bytes, 110);
  EXPECT_FALSE(traits(GgmlType::IQ4_XS).supported);
  std::vector<float> out(256);
  std::vector<std::byte> blocks(std::size_t(traits(GgmlType::IQ4_XS).block_bytes));
  expect_error([&] { dequantize(GgmlType::IQ4_XS, blocks, out); }, "IQ4_XS cannot be dequantized");
}

}  // namespace
}  // namespace rowlm::gguf
