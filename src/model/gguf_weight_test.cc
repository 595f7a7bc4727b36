// GGUF tensors as engine weights: dense views, and block types converted to
// the affine format, whose dequantization (quant::dequantize, the affine
// codec the kernels implement) must give gguf-py's dequantized values
// (tests/fixtures/gguf, tools/gguf/make_block_fixtures.py).

#include "model/gguf_weight.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>

#include "core/error.h"
#include "core/npy.h"
#include "quant/affine.h"

namespace rowlm {
namespace {

std::string fixture(const std::string& rel) { return std::string(ROWLM_SOURCE_DIR) + "/tests/fixtures/gguf/" + rel; }

std::vector<float> dequantize_weight(const Weight& w) {
  std::vector<float> out(std::size_t(w.rows * w.cols));
  const quant::AffineSpec spec{w.bits, w.group_size};
  const int64_t words = w.cols * w.bits / 32, groups = w.cols / w.group_size;
  const std::size_t p = dtype_size(w.scales.dtype());
  for (int64_t r = 0; r < w.rows; ++r)
    quant::dequantize(std::span(w.values.data<uint32_t>() + r * words, std::size_t(words)),
                      static_cast<const char*>(w.scales.raw()) + std::size_t(r * groups) * p,
                      static_cast<const char*>(w.biases.raw()) + std::size_t(r * groups) * p, w.scales.dtype(), spec,
                      std::span(out.data() + r * w.cols, std::size_t(w.cols)));
  return out;
}

TEST(GgufWeight, DenseTensorsAreViewsOfTheFile) {
  const gguf::File f = gguf::File::open(fixture("blocks.gguf"));
  for (const char* name : {"dense.f32", "dense.f16", "dense.bf16"}) {
    const gguf::TensorInfo& t = f.tensor(name);
    const Weight w = gguf_weight(f, t);
    EXPECT_EQ(w.format, WeightFormat::Dense) << name;
    EXPECT_EQ(w.shape(), (Shape{3, 512})) << name;
    EXPECT_EQ(w.values.raw(), static_cast<const void*>(t.bytes.data())) << name;
  }
}

// The affine layouts quant/affine.h accepts today (bits 2, 4, 8; groups of
// 32 to 128); the other types are refused by name until it takes 3, 5 and
// 6 bits and groups of 16.
const std::set<gguf::GgmlType> kAffineNow = {gguf::GgmlType::Q4_0, gguf::GgmlType::Q4_1, gguf::GgmlType::Q8_0,
                                             gguf::GgmlType::Q4_K};

TEST(GgufWeight, BlockTypesBecomeAffineWeightsThatDequantizeAsGgufPy) {
  const gguf::File f = gguf::File::open(fixture("blocks.gguf"));
  int converted = 0, refused = 0;
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (t.name.starts_with("dense.")) continue;
    if (!kAffineNow.count(t.type)) {
      try {
        gguf_weight(f, t);
        ADD_FAILURE() << t.name << " converted";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("GGUF tensor '" + t.name + "'"), std::string::npos) << e.what();
        ++refused;
      }
      continue;
    }
    const Weight w = gguf_weight(f, t);
    ASSERT_EQ(w.format, WeightFormat::Affine) << t.name;
    EXPECT_EQ(w.shape(), (Shape{3, 512})) << t.name;
    const Tensor ref = read_npy(fixture("blocks/" + t.name + ".npy"));
    const std::vector<float> got = dequantize_weight(w);
    int mismatches = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
      if (!(got[i] == ref.data<float>()[i]) && mismatches++ < 3)  // +0 for ggml's −0 allowed
        ADD_FAILURE() << t.name << " [" << i << "]: " << got[i] << " vs gguf-py " << ref.data<float>()[i];
    EXPECT_EQ(mismatches, 0) << t.name;
    // Q4_0 / Q4_1 / Q8_0 parameters are f16 values times powers of two: stored as f16.
    if (t.type != gguf::GgmlType::Q4_K) {
      EXPECT_EQ(w.scales.dtype(), DType::F16) << t.name;
    }
    ++converted;
  }
  EXPECT_EQ(converted, 2 * 3 + 1);  // random and quantized Q4_0/Q4_1/Q8_0, random Q4_K
  EXPECT_EQ(refused, 15 - converted);
}

}  // namespace
}  // namespace rowlm
