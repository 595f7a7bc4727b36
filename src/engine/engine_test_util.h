#pragma once
// Shared by the engine's tests: requests on the bundled model submitted at
// chosen engine steps, and a bitwise comparison of two results.

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "constrain/grammar.h"
#include "constrain/json_constraint.h"
#include "rowlm/engine.h"

namespace rowlm::test {

inline std::string model_dir() { return std::string(ROWLM_SOURCE_DIR) + "/models/rowlm-tiny"; }
inline std::string draft_model_dir() { return std::string(ROWLM_SOURCE_DIR) + "/models/rowlm-tiny-draft"; }

// The device the engine tests run on: ROWLM_TEST_DEVICE (scripts/test-cuda.sh
// sets cuda), else the CPU.
inline std::string test_device() {
  const char* d = std::getenv("ROWLM_TEST_DEVICE");
  return d && *d ? d : "cpu";
}

inline EngineOptions manual(const std::string& codec = "bf16") {
  EngineOptions o;
  o.model_dir = model_dir();
  o.device = test_device();
  o.threads = 2;
  o.kv_codec = codec;
  o.background = false;
  o.kv_budget_bytes = std::size_t(256) << 20;
  return o;
}

struct Spec {
  std::string prompt;
  float temperature;
  uint64_t seed;
  int max_tokens;
  int arrival;  // engine step at which it is submitted
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids = {};
  int32_t top_k = 0;
  std::optional<int32_t> logprobs = 2;  // nullopt: none asked (a greedy row then needs only its argmax)
  std::vector<int32_t> prompt_ids = {};  // used instead of prompt when non-empty
  std::shared_ptr<const constrain::Grammar> response_format = nullptr;
  std::shared_ptr<const constrain::ToolCallRules> tool_calls = nullptr;  // the text keeps special tokens then
  std::map<int32_t, float> logit_bias = {};
};

inline Request make_request(const Spec& s) {
  Request r;
  r.prompt = s.prompt;
  r.prompt_ids = s.prompt_ids;
  r.sampling.temperature = s.temperature;
  r.sampling.seed = s.seed;
  r.sampling.max_tokens = s.max_tokens;
  r.sampling.logprobs = s.logprobs;
  r.sampling.stop = s.stop;
  r.sampling.stop_token_ids = s.stop_token_ids;
  r.sampling.top_k = s.top_k;
  r.response_format = s.response_format;
  r.tool_calls = s.tool_calls;
  r.skip_special_tokens = !s.tool_calls;
  r.sampling.logit_bias = s.logit_bias;
  return r;
}

// Runs the specs through one engine with arrivals at their steps; the
// engine's stats at the end go to *stats if given.
inline std::vector<RequestResult> run_schedule(EngineOptions opt, const std::vector<Spec>& specs,
                                               EngineStats* stats = nullptr) {
  auto engine = Engine::create(opt);
  std::vector<std::shared_ptr<RequestHandle>> handles(specs.size());
  int step = 0;
  std::size_t submitted = 0;
  for (;;) {
    for (std::size_t i = 0; i < specs.size(); ++i)
      if (!handles[i] && specs[i].arrival <= step) {
        handles[i] = engine->submit(make_request(specs[i]));
        ++submitted;
      }
    const bool more = engine->step();
    ++step;
    if (!more && submitted == specs.size()) break;
    if (step > 100000) {  // stuck: fail, and stop rather than hang
      ADD_FAILURE() << "engine did not finish in 100000 steps";
      engine->shutdown();  // cancels what still runs, so result() returns
      break;
    }
  }
  std::vector<RequestResult> out;
  for (auto& h : handles) out.push_back(h ? h->result() : RequestResult{});
  if (stats) *stats = engine->stats();
  return out;
}

inline void expect_same(const RequestResult& a, const RequestResult& b, const std::string& what) {
  EXPECT_EQ(a.token_ids, b.token_ids) << what;
  EXPECT_EQ(a.text, b.text) << what;
  EXPECT_EQ(a.finish, b.finish) << what;
  EXPECT_EQ(a.stop, b.stop) << what;
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size()) << what;
  for (std::size_t i = 0; i < a.logprobs.size(); ++i) {
    // Bitwise: the same float, not merely close.
    EXPECT_EQ(std::memcmp(&a.logprobs[i].chosen, &b.logprobs[i].chosen, sizeof(float)), 0) << what << " token " << i;
    ASSERT_EQ(a.logprobs[i].top.size(), b.logprobs[i].top.size());
    for (std::size_t k = 0; k < a.logprobs[i].top.size(); ++k) {
      EXPECT_EQ(a.logprobs[i].top[k].token, b.logprobs[i].top[k].token);
      EXPECT_EQ(std::memcmp(&a.logprobs[i].top[k].logprob, &b.logprobs[i].top[k].logprob, sizeof(float)), 0);
    }
  }
}

inline const char* const kPrompts[] = {
    "In the beginning God created",
    "The Python interpreter reads",
    "And the king said unto",
    "A river is a large natural stream of water flowing in a channel to the sea, a lake, or another river; "
    "rivers have carried boats and goods for as long as there have been people on their banks, and the",
    "What does the word",
    "Lists in Python",
};

inline std::vector<Spec> random_specs(std::mt19937& rng, int n) {
  std::vector<Spec> out;
  for (int i = 0; i < n; ++i) {
    Spec s;
    s.prompt = kPrompts[rng() % std::size(kPrompts)];
    if (rng() % 2) s.prompt += " " + std::string(kPrompts[rng() % std::size(kPrompts)]);
    s.temperature = (rng() % 3 == 0) ? 0.0f : 0.9f;
    s.seed = rng();
    s.max_tokens = 4 + int(rng() % 20);
    s.arrival = int(rng() % 12);
    out.push_back(s);
  }
  return out;
}

// Every request alone in a fresh engine: the reference.
inline std::vector<RequestResult> solo(const EngineOptions& opt, const std::vector<Spec>& specs) {
  std::vector<RequestResult> out;
  for (Spec s : specs) {
    s.arrival = 0;
    EngineOptions o = opt;
    o.prefix_cache = false;
    out.push_back(run_schedule(o, {s})[0]);
  }
  return out;
}

}  // namespace rowlm::test
