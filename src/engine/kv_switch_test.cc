// The precision switch (EngineOptions::kv_quantize_after / kv_quantize_to)
// through the engine, on the bundled model: a request whose KV passes the
// switch gives bitwise the same tokens and log-probabilities alone and in
// any schedule (chunked prefill across the switch, prefix reuse, preemption
// with swap, speculation), beside requests that switch at other steps or
// never; the KV it holds falls by the codecs' ratio; bad options are
// refused naming the option.

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "core/error.h"
#include "engine/engine_test_util.h"
#include "engine/setup.h"
#include "kvcodec/codec.h"
#include "rowlm/engine.h"

namespace rowlm {
namespace {

using test::expect_same;
using test::manual;
using test::run_schedule;
using test::solo;
using test::Spec;

constexpr int64_t kSwitchAt = 24;

EngineOptions switching(int64_t after = kSwitchAt) {
  EngineOptions o = manual("bf16");
  o.kv_quantize_after = after;
  o.kv_quantize_to = "q8";
  return o;
}

// Positions the request's KV reached: its last sampled token is never fed.
int64_t kv_reached(const RequestResult& r) { return r.usage.prompt_tokens + r.usage.completion_tokens - 1; }

TEST(EngineKvSwitch, OutputIndependentOfScheduleAndOfWhenOthersSwitch) {
  std::mt19937 rng(2468);
  std::vector<Spec> specs = test::random_specs(rng, 4);
  // Short and long prompts: rows switch in prefill, in decode, or never.
  specs[0].prompt = "What does the word";
  specs[0].max_tokens = 4;
  specs[1].prompt = test::kPrompts[3];
  for (std::size_t i = 1; i < specs.size(); ++i) specs[i].max_tokens = 20 + int(rng() % 12);
  specs[2].temperature = 0.0f;  // greedy rows: the speculative schedule must give their plain output
  specs[3].temperature = 0.0f;
  const auto alone = solo(switching(), specs);
  // A greedy request that switches while decoding: its speculative rounds
  // near the switch keep their drafts below it.
  const auto in_decode = [&](std::size_t i) {
    return alone[i].usage.prompt_tokens <= kSwitchAt && kv_reached(alone[i]) > kSwitchAt;
  };
  EXPECT_TRUE(in_decode(2) || in_decode(3)) << "a greedy request was meant to switch while decoding";
  EXPECT_LE(kv_reached(alone[0]), kSwitchAt) << "request 0 was meant never to switch";
  EXPECT_GT(alone[1].usage.prompt_tokens, kSwitchAt) << "request 1 was meant to switch inside its prompt";

  // The switch changes the output of a request that passes it, not of one that does not.
  const auto plain = solo(manual("bf16"), {specs[0], specs[1]});
  expect_same(alone[0], plain[0], "request 0 never passes the switch");
  bool differs = alone[1].token_ids != plain[1].token_ids;
  for (std::size_t t = 0; !differs && t < alone[1].logprobs.size(); ++t)
    differs = alone[1].logprobs[t].chosen != plain[1].logprobs[t].chosen;
  EXPECT_TRUE(differs) << "request 1 passed the switch but reads bf16 KV still";

  struct Trial {
    const char* name;
    bool prefix_cache, overcommit, speculate;
    std::size_t budget;
    int token_budget;
  };
  for (const Trial t : {Trial{"chunked", true, false, false, std::size_t(256) << 20, 7},
                        Trial{"preempted", true, true, false, 120 * 1024, 16},
                        Trial{"speculative", true, false, true, std::size_t(256) << 20, 32}}) {
    EngineOptions opt = switching();
    opt.prefix_cache = t.prefix_cache;
    opt.kv_overcommit = t.overcommit;
    opt.kv_budget_bytes = t.budget;
    opt.token_budget = t.token_budget;
    opt.max_running = 5;
    if (t.speculate) opt.draft = "ngram";
    std::vector<Spec> arriving = specs;
    for (std::size_t i = 0; i < arriving.size(); ++i) arriving[i].arrival = int(i % 3);
    arriving.push_back(specs[1]);  // the long prompt again: prefix reuse, which stops at the switch
    arriving.back().arrival = 9;
    EngineStats stats;
    const auto batched = run_schedule(opt, arriving, &stats);
    for (std::size_t i = 0; i < arriving.size(); ++i) {
      const std::size_t ref = i < specs.size() ? i : 1;
      // Sampled speculation draws differently from plain decoding; greedy does not.
      if (t.speculate && specs[ref].temperature > 0) continue;
      expect_same(batched[i], alone[ref], std::string(t.name) + " request " + std::to_string(i));
    }
    EXPECT_EQ(stats.requests_failed, 0) << t.name;
    if (t.overcommit) {
      EXPECT_GT(stats.kv_swaps, 0) << "the budget was meant to preempt rows by swap";
    }
    if (t.speculate) {
      EXPECT_GT(stats.draft_accepted, 0) << "the n-gram drafter was meant to speculate";
    }
    EXPECT_LE(batched.back().usage.cached_prompt_tokens, kSwitchAt) << t.name;
    if (!t.overcommit) {  // (under the tight budget the cached prefix may be evicted)
      EXPECT_GT(batched.back().usage.cached_prompt_tokens, 0) << t.name;
    }
  }
}

// The bundled model stores 5 window layers of 1 x 64 and a full one of
// 1 x 128: bf16 heads of 128 and 256 bytes, q8:64 heads of 68 and 136, so
// once a row switched it holds 17/32 of the bytes for the same blocks.
TEST(EngineKvSwitch, KvBytesFallByTheCodecRatio) {
  auto plain_engine = Engine::create(manual("bf16"));
  EngineOptions so = switching(16);
  auto switch_engine = Engine::create(so);
  Request r;
  r.prompt = "In the beginning";
  r.sampling.temperature = 0.0f;
  r.sampling.max_tokens = 48;
  r.ignore_eos = true;
  auto a = plain_engine->submit(r);
  auto b = switch_engine->submit(r);
  int compared = 0;
  for (int step = 0; step < 200 && !a->done(); ++step) {
    plain_engine->step();
    switch_engine->step();
    const std::size_t plain = plain_engine->stats().kv_used_bytes, sw = switch_engine->stats().kv_used_bytes;
    if (a->done()) break;
    ASSERT_GT(plain, 0u);
    // Before the switch the same bytes; after it, 17/32 of them. The prefix
    // cache holds what the row published, so compare what is not cached.
    const std::size_t plain_rows = plain - plain_engine->stats().prefix_cache_bytes;
    const std::size_t sw_rows = sw - switch_engine->stats().prefix_cache_bytes;
    if (sw_rows != plain_rows) {
      EXPECT_EQ(sw_rows * 32, plain_rows * 17) << "step " << step;
      ++compared;
    }
  }
  EXPECT_GT(compared, 10) << "the row was meant to run well past the switch";
}

TEST(EngineKvSwitch, RejectsBadOptionsNamingThem) {
  const std::vector<kv::LayerSpec> bf16 = {{1, 64, 64, kv::parse_codec("bf16")}, {1, 128, 0, kv::parse_codec("bf16")}};
  const auto message = [](EngineOptions o, const std::vector<kv::LayerSpec>& layers) {
    try {
      engine::precision_switch(o, layers);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EngineOptions o = switching();
  const kv::PrecisionSwitch ok = engine::precision_switch(o, bf16);
  EXPECT_EQ(ok.after, kSwitchAt);
  EXPECT_EQ(ok.codecs, (std::vector<kv::CodecSpec>{kv::parse_codec("q8"), kv::parse_codec("q8")}));
  o.kv_quantize_after = -1;
  EXPECT_NE(message(o, bf16).find("kv_quantize_after must not be negative"), std::string::npos);
  o = switching();
  o.kv_quantize_to = "q3";
  EXPECT_NE(message(o, bf16).find("unknown KV codec 'q3'"), std::string::npos);
  for (const char* wide : {"bf16", "f16", "f32"}) {
    o.kv_quantize_to = wide;
    EXPECT_NE(message(o, bf16).find("is not narrower than the KV codec"), std::string::npos) << wide;
  }
  o.kv_quantize_to = "q8:128";
  EXPECT_NE(message(o, bf16).find("head_dim 64 is not a multiple of the group size 128"), std::string::npos);
  // A layer already at or below the target keeps its codec; one must switch.
  std::vector<kv::LayerSpec> mixed = bf16;
  mixed[1].codec = kv::parse_codec("q4");
  o.kv_quantize_to = "q8";
  EXPECT_EQ(engine::precision_switch(o, mixed).codecs[1], kv::parse_codec("q4"));
  mixed[0].codec = kv::parse_codec("q8");
  EXPECT_NE(message(o, mixed).find("nothing would switch"), std::string::npos);
  // The engine reports it when it is built.
  o = switching();
  o.kv_quantize_to = "bf16";
  EXPECT_THROW(Engine::create(o), Error);
}

}  // namespace
}  // namespace rowlm
