// The one request check: each failure names its field, in the caller's
// words for the prompt, and the rules that differ between the library and
// the HTTP API (prompt + max_tokens within the context) are the caller's
// choice. Needs the bundled model's tokenizer only, not its weights.

#include "engine/validate_request.h"

#include <gtest/gtest.h>

#include <string>

namespace rowlm::engine {
namespace {

const Tokenizer& tokenizer() {
  static const Tokenizer t = Tokenizer::load(std::string(ROWLM_SOURCE_DIR) + "/models/rowlm-tiny");
  return t;
}

RequestLimits limits(int64_t context = 64, bool with_tokenizer = true) {
  return RequestLimits{tokenizer().vocab_size(), context, with_tokenizer ? &tokenizer() : nullptr};
}

Request ids(std::size_t n, int32_t id = 5) {
  Request r;
  r.prompt_ids.assign(n, id);
  return r;
}

// The InvalidRequest a request gets; fails the test if it passes.
InvalidRequest rejection(const Request& r, const RequestLimits& l, const ValidationRules& rules = {}) {
  try {
    validate_request(r, l, rules);
  } catch (const InvalidRequest& e) {
    return e;
  }
  ADD_FAILURE() << "the request was accepted";
  return InvalidRequest("", "");
}

TEST(ValidateRequest, ReturnsThePromptsIds) {
  EXPECT_EQ(validate_request(ids(3, 7), limits()), (std::vector<int32_t>{7, 7, 7}));
  Request text;
  text.prompt = "In the beginning";
  EXPECT_EQ(validate_request(text, limits()), tokenizer().encode("In the beginning", true));
  text.add_special_tokens = false;
  EXPECT_EQ(validate_request(text, limits()), tokenizer().encode("In the beginning", false));
}

TEST(ValidateRequest, PromptProblemsNameThePrompt) {
  Request empty;
  empty.add_special_tokens = false;
  EXPECT_EQ(rejection(empty, limits()).field(), "prompt");
  EXPECT_STREQ(rejection(empty, limits()).what(), "prompt: is empty (no tokens)");
  Request text;
  text.prompt = "hi";
  EXPECT_EQ(rejection(text, limits(64, /*with_tokenizer=*/false)).field(), "prompt");
  Request bad_id = ids(2);
  bad_id.prompt_ids[1] = int32_t(tokenizer().vocab_size());
  EXPECT_EQ(rejection(bad_id, limits()).field(), "prompt");
  bad_id.prompt_ids[1] = -1;
  EXPECT_EQ(rejection(bad_id, limits()).field(), "prompt");
}

TEST(ValidateRequest, APromptLeavesRoomForOneGeneratedToken) {
  EXPECT_NO_THROW(validate_request(ids(63), limits(64)));
  const InvalidRequest e = rejection(ids(64), limits(64));
  EXPECT_EQ(e.field(), "prompt");
  EXPECT_STREQ(e.what(),
               "prompt: is 64 tokens; the model's context is 64 tokens, which must also hold at least one "
               "generated token");
  EXPECT_NO_THROW(validate_request(ids(5000), limits(0)));  // context unknown: not checked
}

TEST(ValidateRequest, ErrorsNameTheCallersPromptField) {
  const InvalidRequest e = rejection(ids(64), limits(64), {.prompt_field = "messages"});
  EXPECT_EQ(e.field(), "messages");
  EXPECT_EQ(std::string(e.what()).rfind("messages: is 64 tokens", 0), 0u) << e.what();
  Request empty;
  empty.add_special_tokens = false;
  EXPECT_EQ(rejection(empty, limits(), {.prompt_field = "prompt[2]"}).field(), "prompt[2]");
}

TEST(ValidateRequest, MaxTokensPastTheContextIsTheCallersRule) {
  Request r = ids(60);
  r.sampling.max_tokens = 10;
  // The library's rule: the request runs, and ends with Length at the context.
  EXPECT_NO_THROW(validate_request(r, limits(64)));
  // The HTTP API's rule.
  const ValidationRules api{.max_tokens_within_context = true};
  const InvalidRequest e = rejection(r, limits(64), api);
  EXPECT_EQ(e.field(), "max_tokens");
  EXPECT_STREQ(e.what(),
               "max_tokens: is 10, but the prompt is 60 tokens and the model's context 64 tokens, leaving room for 4");
  r.sampling.max_tokens = 4;
  EXPECT_NO_THROW(validate_request(r, limits(64), api));
  r.sampling.max_tokens.reset();
  EXPECT_NO_THROW(validate_request(r, limits(64), api));
}

TEST(ValidateRequest, SamplingProblemsNameTheParameter) {
  Request r = ids(3);
  r.sampling.temperature = -1;
  EXPECT_EQ(rejection(r, limits()).field(), "temperature");
  EXPECT_NE(std::string(rejection(r, limits()).what()).find("temperature"), std::string::npos);
  r = ids(3);
  r.sampling.stop = {"a", ""};
  EXPECT_EQ(rejection(r, limits()).field(), "stop[1]");
  r = ids(3);
  r.sampling.logit_bias[int32_t(tokenizer().vocab_size())] = 1;
  EXPECT_EQ(rejection(r, limits()).field(), "logit_bias");
  r = ids(3);
  r.sampling.max_tokens = 0;
  EXPECT_EQ(rejection(r, limits(), {.max_tokens_within_context = true}).field(), "max_tokens");
}

TEST(ValidateRequest, StopStringsNeedATokenizer) {
  Request r = ids(3);
  r.sampling.stop = {"END"};
  EXPECT_EQ(rejection(r, limits(64, /*with_tokenizer=*/false)).field(), "stop");
  EXPECT_NO_THROW(validate_request(r, limits()));
}

}  // namespace
}  // namespace rowlm::engine
