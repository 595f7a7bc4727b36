// The request options of the CLI and of batch lines: every integer is
// range-checked and every non-integer refused, naming the flag or field,
// never wrapped into a narrower type or truncated.

#include "cli/request_options.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace rowlm::cli {
namespace {

using nlohmann::json;

std::string batch_error(const std::string& line) {
  try {
    parse_batch_line(json::parse(line), "line 1");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string flag_error(const std::vector<std::string>& argv) {
  Args args("generate", "test");
  add_sampling_options(args, 0.0f);
  try {
    args.parse(argv);
    Request r;
    apply_sampling_options(args, r);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(RequestOptions, FlagsOutOfRangeAreRefusedNotWrapped) {
  // 4294967298 = 2^32 + 2: as int32_t it would be 2 (<bos>).
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--logit-bias", "4294967298=100"}, "--logit-bias ID"},
      {{"--logit-bias", "-1=1"}, "--logit-bias ID"},
      {{"--stop-token-id", "4294967403"}, "--stop-token-id"},
      {{"--top-k", "4294967297"}, "--top-k"},
      {{"--top-k", "-1"}, "--top-k"},
      {{"--logprobs", "4294967297"}, "--logprobs"},
      {{"--logprobs", "2.5"}, "--logprobs"},
  };
  for (const auto& [argv, names] : cases) {
    const std::string error = flag_error(argv);
    EXPECT_NE(error.find(names), std::string::npos) << argv[0] << " " << argv[1] << " -> '" << error << "'";
  }
  EXPECT_EQ(flag_error({"--logit-bias", "2147483647=1", "--top-k", "2147483647", "--stop-token-id", "7"}), "");
}

TEST(RequestOptions, BatchFieldsAreIntegersInRange) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"ids": [4294967298, 500]})", "ids[0]"},
      {R"({"ids": [2, 5.9]})", "ids[1] must be an integer"},
      {R"({"ids": [2, -1]})", "ids[1]"},
      {R"({"ids": [2, "3"]})", "ids[1] must be an integer"},
      {R"({"ids": 5})", "'ids' must be an array"},
      {R"({"prompt": "x", "max_tokens": 2.7})", "'max_tokens' must be an integer"},
      {R"({"prompt": "x", "max_tokens": 0})", "'max_tokens' must be between 1"},
      {R"({"prompt": "x", "top_k": 4294967297})", "'top_k'"},
      {R"({"prompt": "x", "logprobs": 4294967297})", "'logprobs'"},
      {R"({"prompt": "x", "stop_token_ids": [4294967403]})", "stop_token_ids[0]"},
      {R"({"prompt": "x", "logit_bias": {"4294967298": 100}})", "logit_bias key"},
      {R"({"prompt": "x", "seed": 18446744073709551615})", "'seed'"},
      {R"({"prompt": "x", "seed": -1})", "'seed'"},
      {R"({"prompt": "x", "arrival_step": 1000000000000})", "'arrival_step' must be between 0 and 1000000"},
      {R"({"prompt": "x", "arrival_step": 1.5})", "'arrival_step' must be an integer"},
      {R"({"prompt": "x", "json_schema": {"type": "string", "pattern": "a"}})", "json_schema.pattern"},
      {R"({"prompt": "x", "json_schema": 3})", "json_schema: a schema must be"},
  };
  for (const auto& [line, says] : cases) {
    const std::string error = batch_error(line);
    EXPECT_NE(error.find(says), std::string::npos) << line << " -> '" << error << "'";
    EXPECT_NE(error.find("line 1"), std::string::npos) << error;
  }
  const BatchLine ok = parse_batch_line(
      json::parse(R"({"ids": [2, 2147483647], "max_tokens": 16777216, "top_k": 5, "seed": 9223372036854775807,
                      "logprobs": 3, "stop_token_ids": [1], "logit_bias": {"7": 1}, "arrival_step": 1000000})"),
      "line 1");
  EXPECT_EQ(ok.request.prompt_ids, (std::vector<int32_t>{2, 2147483647}));
  EXPECT_EQ(ok.request.sampling.max_tokens, 16777216);
  EXPECT_EQ(ok.request.sampling.seed, 9223372036854775807ull);
  EXPECT_EQ(ok.arrival_step, 1000000);
  EXPECT_EQ(ok.request.response_format, nullptr);
  const BatchLine schema = parse_batch_line(json::parse(R"({"prompt": "x", "json_schema": {"type": "integer"}})"), "line 1");
  ASSERT_NE(schema.request.response_format, nullptr);
  EXPECT_EQ(schema.request.response_format->node(schema.request.response_format->root()).kind,
            constrain::NodeKind::Integer);
}

// The prefix cache has an explicit default budget, settable, never "0 = a
// quarter of the KV budget" by accident.
TEST(RequestOptions, PrefixCacheBytesHasAnExplicitDefault) {
  auto options = [](const std::vector<std::string>& argv) {
    Args args("serve", "test");
    add_engine_options(args);
    args.parse(argv);
    return engine_options_from(args, "models/rowlm-tiny", true);
  };
  EXPECT_EQ(options({}).prefix_cache_bytes, std::size_t(256) << 20);
  EXPECT_EQ(options({"--prefix-cache-bytes", "1M"}).prefix_cache_bytes, std::size_t(1) << 20);
  EXPECT_THROW(options({"--prefix-cache-bytes", "0"}), Error);
  EXPECT_FALSE(options({"--no-prefix-cache", "--prefix-cache-bytes", "0"}).prefix_cache);
}

// --kv-quantize-after N [--kv-quantize-to CODEC]: the engine options, or
// an error naming the flag (the codec itself is checked against the model
// when the engine is built: setup's precision_switch).
TEST(RequestOptions, KvQuantizeFlags) {
  auto options = [](const std::vector<std::string>& argv) {
    Args args("serve", "test");
    add_engine_options(args);
    args.parse(argv);
    return engine_options_from(args, "models/rowlm-tiny", true);
  };
  EXPECT_FALSE(options({}).kv_quantize_after.has_value());
  const EngineOptions o = options({"--kv-quantize-after", "512", "--kv-quantize-to", "q4:32"});
  EXPECT_EQ(o.kv_quantize_after, 512);
  EXPECT_EQ(o.kv_quantize_to, "q4:32");
  EXPECT_EQ(options({"--kv-quantize-after", "0"}).kv_quantize_to, "q8");
  const auto message = [&](const std::vector<std::string>& argv) {
    try {
      options(argv);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({"--kv-quantize-after", "-1"}).find("--kv-quantize-after must not be negative"), std::string::npos);
  EXPECT_NE(message({"--kv-quantize-after", "x"}).find("--kv-quantize-after"), std::string::npos);
  EXPECT_NE(message({"--kv-quantize-to", "q8"}).find("--kv-quantize-to needs --kv-quantize-after"), std::string::npos);
}

}  // namespace
}  // namespace rowlm::cli
