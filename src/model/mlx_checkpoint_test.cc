// rowlm quantize's checkpoints, loaded back: each family's forward pass on
// the quantized checkpoint is bitwise its forward pass on a dense f32
// checkpoint of the dequantized values (dequantized here by the shared codec,
// quant/affine.h, not by the backend), and the layout is MLX's.

#include "model/mlx_checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "backend/factory/make_backend.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "io/temp_dir.h"
#include "kv/kv_cache.h"
#include "model/logits_test_util.h"
#include "model/model.h"
#include "quant/affine.h"

namespace rowlm {
namespace {

namespace fs = std::filesystem;

std::string fixture(const std::string& name) { return std::string(ROWLM_SOURCE_DIR) + "/tests/fixtures/" + name; }

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// `quantized` with every quantized matrix replaced by its dequantized f32
// values under the same name, and config.json without its quantization.
void write_dequantized(const std::string& quantized, const std::string& dst) {
  const Checkpoint ck = Checkpoint::open(quantized);
  const auto config = read_json(quantized + "/config.json");
  NamedTensors out;
  for (const std::string& name : ck.names()) {
    if (name.ends_with(".scales") || name.ends_with(".biases")) continue;
    const Tensor t = ck.tensor(name);
    const std::string stem = name.substr(0, name.size() - 7);
    if (!ck.contains(stem + ".scales")) {
      out.emplace_back(name, t);
      continue;
    }
    const Tensor scales = ck.tensor(stem + ".scales"), biases = ck.tensor(stem + ".biases");
    const auto& q = config["quantization"];
    const int bits = q.contains(stem) ? int(q[stem]["bits"]) : int(q["bits"]);
    const int group = q.contains(stem) ? int(q[stem]["group_size"]) : int(q["group_size"]);
    const int64_t words = t.dim(-1), groups = scales.dim(-1), rows = t.numel() / words, cols = words * 32 / bits;
    EXPECT_EQ(cols, groups * group) << name;
    Shape shape = t.shape();
    shape.back() = cols;
    Tensor values(DType::F32, shape);
    const std::size_t param_bytes = std::size_t(groups) * dtype_size(scales.dtype());
    for (int64_t r = 0; r < rows; ++r)
      quant::dequantize({t.data<uint32_t>() + r * words, std::size_t(words)},
                        static_cast<const std::byte*>(scales.raw()) + std::size_t(r) * param_bytes,
                        static_cast<const std::byte*>(biases.raw()) + std::size_t(r) * param_bytes, scales.dtype(),
                        {bits, group}, {values.data<float>() + r * cols, std::size_t(cols)});
    out.emplace_back(name, values);
  }
  fs::create_directories(dst);
  write_safetensors(dst + "/model.safetensors", out);
  auto plain = config;
  plain.erase("quantization");
  plain.erase("quantization_config");
  std::ofstream(dst + "/config.json") << plain.dump();
}

using model_testing::prefill_logits;

struct Case {
  const char* fixture;
  QuantizeOptions options;
};

// Dense, tied and untied heads, MoE (transformers' fused experts, written
// under switch_glu's names), per-layer embeddings; 4 and 8 bits, a mixed
// checkpoint, an odd width.
TEST(MlxCheckpoint, QuantizedForwardIsTheDequantizedForwardBitwise) {
  const std::vector<int32_t> ids = {2, 17, 99, 5, 64, 3, 127, 40, 8, 11};
  const Case cases[] = {
      {"gemma4/moe_keqv", {{4, 32}, {}}},
      {"gemma4/everything", {{8, 16}, {}}},
      {"gemma4/e_series", {{4, 32}, {{"mlp.down_proj", quant::AffineSpec{8, 32}}, {"layers.1.", std::nullopt}}}},
      {"qwen3/mqa_untied", {{3, 32}, {{"lm_head", quant::AffineSpec{6, 16}}}}},
      {"qwen3/gqa_tied", {{4, 64}, {}}},
  };
  for (const Case& c : cases) {
    TempDir dir;
    const std::string q = dir.file("q"), d = dir.file("d");
    const QuantizeReport report = quantize_checkpoint(fixture(c.fixture), q, c.options);
    EXPECT_GT(report.quantized, 0) << c.fixture;
    EXPECT_LT(report.bytes_out, report.bytes_in) << c.fixture;
    write_dequantized(q, d);
    const Tensor got = prefill_logits(q, ids), want = prefill_logits(d, ids);
    ASSERT_EQ(got.shape(), want.shape());
    EXPECT_EQ(std::memcmp(got.raw(), want.raw(), got.nbytes()), 0) << c.fixture;
  }
}

TEST(MlxCheckpoint, LayoutIsMlxs) {
  TempDir dir;
  const std::string q = dir.file("q");
  quantize_checkpoint(fixture("gemma4/moe_keqv"), q,
                      {{4, 32}, {{"self_attn.o_proj", quant::AffineSpec{8, 64}}, {"layers.0.mlp.up_proj", std::nullopt}}});
  const Checkpoint ck = Checkpoint::open(q);
  const auto config = read_json(q + "/config.json");
  const auto& quant = config["quantization"];
  EXPECT_EQ(quant["bits"], 4);
  EXPECT_EQ(quant["group_size"], 32);
  EXPECT_EQ(quant["mode"], "affine");
  EXPECT_EQ(config["quantization_config"], quant);
  const std::string p = "model.layers.0.";
  // Codes [out, in·bits/32] u32, scales and biases [out, in/group] in the model's dtype.
  const SafetensorsEntry* codes = ck.find(p + "self_attn.q_proj.weight");
  ASSERT_NE(codes, nullptr);
  EXPECT_EQ(codes->dtype, DType::U32);
  EXPECT_EQ(codes->shape, (Shape{64, 64 * 4 / 32}));
  EXPECT_EQ(ck.find(p + "self_attn.q_proj.scales")->shape, (Shape{64, 2}));
  EXPECT_EQ(ck.find(p + "self_attn.q_proj.biases")->shape, (Shape{64, 2}));
  // Per-module entries for specs other than the defaults and for matrices left unquantized.
  EXPECT_EQ(quant[p + "self_attn.o_proj"], (nlohmann::json{{"bits", 8}, {"group_size", 64}}));
  EXPECT_EQ(quant[p + "router.proj"], (nlohmann::json{{"bits", 8}, {"group_size", 64}}));  // mlx-lm's router rule
  EXPECT_EQ(quant[p + "mlp.up_proj"], false);
  EXPECT_FALSE(ck.contains(p + "mlp.up_proj.scales"));
  // Experts under switch_glu's names, as stacks [E, out, in·bits/32]; the
  // down stack's 16 inputs are not a group of 32, so it stays in floating point.
  EXPECT_EQ(ck.find(p + "experts.switch_glu.gate_proj.weight")->shape, (Shape{8, 16, 8}));
  EXPECT_EQ(ck.find(p + "experts.switch_glu.up_proj.scales")->shape, (Shape{8, 16, 2}));
  EXPECT_EQ(quant[p + "experts.switch_glu.down_proj"], false);
  EXPECT_FALSE(ck.contains(p + "experts.gate_up_proj"));
  // Norms are never quantized; inspect's listing names each format.
  EXPECT_FALSE(ck.contains(p + "input_layernorm.scales"));
  bool saw_q4 = false, saw_q8 = false;
  for (const TensorFormat& t : tensor_formats(q)) {
    if (t.name == p + "self_attn.q_proj.weight") {
      saw_q4 = true;
      EXPECT_EQ(t.shape, (Shape{64, 64}));
      EXPECT_EQ(t.format.rfind("q4/32 (", 0), 0u) << t.format;
      EXPECT_EQ(t.bytes, std::size_t(64 * 8 * 4 + 2 * 64 * 2 * dtype_size(ck.find(p + "self_attn.q_proj.scales")->dtype)));
    }
    if (t.name == p + "self_attn.o_proj.weight") saw_q8 = t.format.rfind("q8/64", 0) == 0;
    EXPECT_FALSE(t.name.ends_with(".scales") || t.name.ends_with(".biases")) << t.name;
  }
  EXPECT_TRUE(saw_q4);
  EXPECT_TRUE(saw_q8);
}

TEST(MlxCheckpoint, ConfigThatDisagreesWithTheTensorsIsAnError) {
  TempDir dir;
  const std::string q = dir.file("q");
  quantize_checkpoint(fixture("qwen3/gqa_tied"), q, {{4, 32}, {}});
  auto config = read_json(q + "/config.json");
  config["quantization"]["model.layers.1.mlp.up_proj"] = {{"bits", 8}, {"group_size", 32}};
  std::ofstream(q + "/config.json") << config.dump();
  auto backend = make_backend({"cpu", 1, MatmulPrecision::F32});
  try {
    load_model(q, *backend);
    FAIL() << "accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'model.layers.1.mlp.up_proj.weight'"), std::string::npos) << m;
    EXPECT_NE(m.find("4-bit codes in groups of 32"), std::string::npos) << m;
    EXPECT_NE(m.find("8 bits"), std::string::npos) << m;
  }
}

TEST(MlxCheckpoint, QuantizeRefusesBadRequests) {
  TempDir dir;
  const std::string q = dir.file("q");
  quantize_checkpoint(fixture("qwen3/gqa_tied"), q, {{8, 64}, {}});
  auto message = [](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { quantize_checkpoint(q, dir.file("again"), {}); }).find("already quantized"), std::string::npos);
  EXPECT_NE(message([&] { quantize_checkpoint(fixture("qwen3/gqa_tied"), q, {}); }).find("not empty"), std::string::npos);
  EXPECT_NE(message([&] { quantize_checkpoint(fixture("qwen3/gqa_tied"), dir.file("x"), {{7, 64}, {}}); })
                .find("bits must be"),
            std::string::npos);
  EXPECT_NE(message([] { parse_quantize_override("mlp=9"); }).find("bits must be"), std::string::npos);
  EXPECT_NE(message([] { parse_quantize_override("mlp"); }).find("PATTERN=BITS"), std::string::npos);
  EXPECT_NE(message([] { parse_quantize_override("mlp=4/x"); }).find("not BITS"), std::string::npos);
  EXPECT_NE(message([] { parse_quantize_spec("4/"); }).find("'4/' is not BITS"), std::string::npos);
  EXPECT_NE(message([] { parse_quantize_spec("4/48"); }).find("group size must be"), std::string::npos);
  EXPECT_EQ(parse_quantize_spec("8"), (quant::AffineSpec{8, 64}));
  EXPECT_EQ(parse_quantize_spec("3/128"), (quant::AffineSpec{3, 128}));
  const QuantizeOverride o = parse_quantize_override("layers.3.=6/32");
  EXPECT_EQ(o.pattern, "layers.3.");
  EXPECT_EQ(o.spec, (quant::AffineSpec{6, 32}));
  EXPECT_FALSE(parse_quantize_override("embed_tokens=none").spec);
}

}  // namespace
}  // namespace rowlm
