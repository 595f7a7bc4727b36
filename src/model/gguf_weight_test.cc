// GGUF tensors as engine weights: dense views, and block types converted to
// the affine format, whose dequantization (quant::dequantize, the affine
// codec the kernels implement) must give gguf-py's dequantized values
// (tests/fixtures/gguf, tools/gguf/make_block_fixtures.py).

#include "model/gguf_weight.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "io/gguf_affine.h"
#include "core/npy.h"
#include "quant/affine.h"

namespace rowlm {
namespace {

std::string gguf_fixture(const std::string& rel) { return std::string(ROWLM_SOURCE_DIR) + "/tests/fixtures/gguf/" + rel; }

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
  const gguf::File f = gguf::File::open(gguf_fixture("blocks.gguf"));
  for (const char* name : {"dense.f32", "dense.f16", "dense.bf16"}) {
    const gguf::TensorInfo& t = f.tensor(name);
    const Weight w = gguf_weight(f, t);
    EXPECT_EQ(w.format, WeightFormat::Dense) << name;
    EXPECT_EQ(w.shape(), (Shape{3, 512})) << name;
    EXPECT_EQ(w.values.raw(), static_cast<const void*>(t.bytes.data())) << name;
  }
}

// Every block type becomes an affine weight of its own bits and group size
// (gguf_affine.h), and the affine codec's dequantization of it gives what
// gguf-py gives: exactly (a zero may be +0 where ggml's 0·d is −0), Q6_K
// within the rounding its ggml order differs by.
TEST(GgufWeight, BlockTypesBecomeAffineWeightsThatDequantizeAsGgufPy) {
  const gguf::File f = gguf::File::open(gguf_fixture("blocks.gguf"));
  int converted = 0;
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (t.name.starts_with("dense.")) continue;
    const Weight w = gguf_weight(f, t);
    ASSERT_EQ(w.format, WeightFormat::Affine) << t.name;
    EXPECT_EQ(w.shape(), (Shape{3, 512})) << t.name;
    const auto layout = gguf::affine_layout(t.type);
    EXPECT_EQ(w.bits, layout->bits) << t.name;
    EXPECT_EQ(w.group_size, layout->group_size) << t.name;
    const Tensor ref = read_npy(gguf_fixture("blocks/" + t.name + ".npy"));
    const std::vector<float> got = dequantize_weight(w);
    int mismatches = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const float want = ref.data<float>()[i];
      bool ok = got[i] == want;
      if (t.type == gguf::GgmlType::Q6_K) {  // |scale·code| + |bias| <= 95·|scale|
        const float scale = quant::load_param(w.scales.raw(), w.scales.dtype(), int64_t(i) / w.group_size);
        ok = std::fabs(got[i] - want) <= 1e-6f * 95.0f * std::fabs(scale);
      }
      if (!ok && mismatches++ < 3) ADD_FAILURE() << t.name << " [" << i << "]: " << got[i] << " vs gguf-py " << want;
    }
    EXPECT_EQ(mismatches, 0) << t.name;
    // Legacy types' parameters are f16 values times powers of two: stored as f16.
    if (t.type == gguf::GgmlType::Q4_0 || t.type == gguf::GgmlType::Q8_0 || t.type == gguf::GgmlType::Q5_1) {
      EXPECT_EQ(w.scales.dtype(), DType::F16) << t.name;
    }
    ++converted;
  }
  EXPECT_EQ(converted, 15);
}

}  // namespace
}  // namespace rowlm
