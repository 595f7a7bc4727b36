#include "model/quantization_config.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace rowlm::decoder {
namespace {

using nlohmann::json;

QuantizationConfig parse(const std::string& text) { return QuantizationConfig::parse(json::parse(text), "config.json"); }

std::string error_of(const std::string& text) {
  try {
    parse(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(QuantizationConfig, AbsentMeansNothingToCheck) {
  const QuantizationConfig q = parse(R"({"model_type": "qwen3"})");
  EXPECT_FALSE(q.present());
  EXPECT_FALSE(q.spec_for("model.layers.0.mlp.up_proj"));
  EXPECT_FALSE(parse(R"({"quantization": null})").present());
}

// mlx-lm's layout: defaults, per-module overrides, `false` for a module left
// in floating point; quantization_config is read when quantization is absent.
TEST(QuantizationConfig, DefaultsAndPerModuleEntries) {
  for (const char* key : {"quantization", "quantization_config"}) {
    const QuantizationConfig q = parse(std::string(R"({")") + key + R"(": {"group_size": 32, "bits": 4, "mode": "affine",
        "language_model.model.layers.3.router.proj": {"group_size": 64, "bits": 8},
        "language_model.model.embed_tokens": false}})");
    ASSERT_TRUE(q.present()) << key;
    EXPECT_EQ(q.spec_for("language_model.model.layers.0.mlp.up_proj"), (quant::AffineSpec{4, 32}));
    EXPECT_EQ(q.spec_for("language_model.model.layers.3.router.proj"), (quant::AffineSpec{8, 64}));
    EXPECT_FALSE(q.spec_for("language_model.model.embed_tokens"));
    EXPECT_TRUE(q.excluded("language_model.model.embed_tokens"));
    EXPECT_FALSE(q.excluded("language_model.model.layers.0.mlp.up_proj"));
  }
  // An override naming only bits keeps the default group.
  const QuantizationConfig q = parse(R"({"quantization": {"group_size": 128, "bits": 4, "lm_head": {"bits": 6}}})");
  EXPECT_EQ(q.spec_for("lm_head"), (quant::AffineSpec{6, 128}));
}

TEST(QuantizationConfig, BadEntriesNameTheField) {
  EXPECT_NE(error_of(R"({"quantization": 4})").find("'quantization' must be an object"), std::string::npos);
  EXPECT_NE(error_of(R"({"quantization": {"bits": 7, "group_size": 64}})").find("'quantization.bits' is 7"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"quantization": {"bits": 4, "group_size": 48}})").find("'quantization.group_size' is 48"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"quantization": {"bits": 4, "group_size": 64, "mode": "mxfp4"}})").find("'quantization.mode'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"quantization": {"bits": 4, "group_size": 64, "m.up": {"bits": 9}}})").find("'quantization.m.up.bits'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"quantization": {"bits": 4, "group_size": 64, "m.up": 3}})").find("'quantization.m.up'"),
            std::string::npos);
}

}  // namespace
}  // namespace rowlm::decoder
