// RoPE entries of config.json and their frequencies. The llama3 oracle below
// is the published formula evaluated in double with its three bands written
// out, not rowlm's f32 code path.

#include "model/rope_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "core/error.h"

namespace rowlm::rope {
namespace {

using config::json;

RopeSpec parse(const json& entry, int max_position = 256) {
  return parse_entry(config::Fields(entry, "rope_parameters.", "config.json"), 10000.0, max_position, "llama");
}

std::string error_of(const json& entry) {
  try {
    parse(entry);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(RopeConfig, Llama3BandsFollowTheWavelength) {
  // Llama 3.1's released parameters on a 128-wide head, θ 500000.
  const json entry = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 8.0},
                      {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  const RopeSpec s = parse(entry);
  ASSERT_EQ(s.type, RopeType::Llama3);
  EXPECT_EQ(s.original_max_position, 8192);
  const decoder::RopeFrequencies f = frequencies(s, 128);
  int high = 0, medium = 0, low = 0;
  for (int k = 0; k < 64; ++k) {
    const double inv = 1.0 / std::pow(500000.0, 2.0 * k / 128.0);
    const double wavelen = 2 * std::numbers::pi / inv;
    double want;
    if (wavelen < 8192.0 / 4.0) {  // high frequencies: unchanged
      want = inv;
      ++high;
    } else if (wavelen > 8192.0 / 1.0) {  // low frequencies: divided by the factor
      want = inv / 8.0;
      ++low;
    } else {  // between: interpolated
      const double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
      want = (1 - smooth) * inv / 8.0 + smooth * inv;
      ++medium;
    }
    EXPECT_NEAR(f.inv_freq[std::size_t(k)], want, 2e-6 * want) << "pair " << k;
  }
  EXPECT_GT(high, 0);
  EXPECT_GT(medium, 0);
  EXPECT_GT(low, 0);
}

TEST(RopeConfig, LinearDividesDynamicIsDefaultWithinTheContext) {
  const decoder::RopeFrequencies plain = frequencies(parse({{"rope_type", "default"}}), 16);
  const decoder::RopeFrequencies linear = frequencies(parse({{"rope_type", "linear"}, {"factor", 4.0}}), 16);
  const decoder::RopeFrequencies dynamic = frequencies(parse({{"type", "dynamic"}, {"factor", 4.0}}), 16);
  for (std::size_t k = 0; k < 8; ++k) {
    EXPECT_FLOAT_EQ(plain.inv_freq[k], float(1.0 / std::pow(10000.0, 2.0 * double(k) / 16.0)));
    EXPECT_FLOAT_EQ(linear.inv_freq[k], plain.inv_freq[k] / 4.0f);
    EXPECT_EQ(dynamic.inv_freq[k], plain.inv_freq[k]);
  }
  EXPECT_EQ(parse(json::object()).type, RopeType::Default);  // no rope_type: default
  EXPECT_EQ(parse(json::object()).theta, 10000.0);           // the family's fallback base
}

TEST(RopeConfig, Llama3ContextDefaultsToMaxPosition) {
  const json entry = {{"rope_type", "llama3"}, {"factor", 32.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0}};
  EXPECT_EQ(parse(entry, 131072).original_max_position, 131072);
}

TEST(RopeConfig, BadEntriesAreNamed) {
  EXPECT_NE(error_of({{"rope_type", "yarn"}, {"factor", 4.0}}).find("'rope_parameters.rope_type' 'yarn' is not supported"),
            std::string::npos);
  EXPECT_NE(error_of({{"type", "longrope"}}).find("rope_parameters.type"), std::string::npos);
  EXPECT_NE(error_of({{"rope_type", "linear"}}).find("'rope_parameters.factor' is required"), std::string::npos);
  EXPECT_NE(error_of({{"rope_type", "linear"}, {"factor", -2.0}}).find("factor"), std::string::npos);
  EXPECT_NE(error_of({{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}})
                .find("high_freq_factor"),
            std::string::npos);
  EXPECT_NE(error_of({{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 4.0}, {"high_freq_factor", 1.0}})
                .find("must be greater than low_freq_factor"),
            std::string::npos);
  EXPECT_NE(error_of({{"rope_type", "default"}, {"rope_theta", 1.0}}).find("rope_theta"), std::string::npos);
}

}  // namespace
}  // namespace rowlm::rope
