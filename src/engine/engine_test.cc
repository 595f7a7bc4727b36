// The engine against its promises, on the bundled model: a request's tokens
// and log-probabilities are bitwise the same alone or in any schedule
// (arrivals, chunked prefill, prefix reuse, preemption, every KV codec);
// cancellation frees KV at once; bad requests are refused with a reason.

#include "rowlm/engine.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <thread>

#include "core/error.h"
#include "engine/engine_test_util.h"
#include "model/mlx_checkpoint.h"

namespace rowlm {
namespace {

using test::expect_same;
using test::kPrompts;
using test::make_request;
using test::manual;
using test::random_specs;
using test::run_schedule;
using test::solo;
using test::Spec;

struct DeterminismCase {
  const char* codec;
  MatmulPrecision precision;
  std::string name() const {
    return std::string(codec) + (precision == MatmulPrecision::Bf16 ? "_bf16_matmul" : "");
  }
};

// Six random requests, each alone and then together in two random
// schedules (chunked prefill; the second with prefix reuse): the same
// tokens and log-probabilities, bit for bit.
void expect_independent_of_schedule(const EngineOptions& options, uint32_t seed, const std::string& what) {
  std::mt19937 rng(seed);
  const auto specs = random_specs(rng, 6);
  const auto alone = solo(options, specs);
  for (int trial = 0; trial < 2; ++trial) {
    EngineOptions opt = options;
    opt.max_running = 2 + int(rng() % 4);
    opt.token_budget = 8 + int(rng() % 40);  // forces chunked prefill
    opt.prefix_cache = trial == 1;
    const auto batched = run_schedule(opt, specs);
    for (std::size_t i = 0; i < specs.size(); ++i)
      expect_same(batched[i], alone[i], what + " trial " + std::to_string(trial) + " request " + std::to_string(i));
  }
}

class EngineDeterminism : public ::testing::TestWithParam<DeterminismCase> {};

TEST_P(EngineDeterminism, RequestOutputIndependentOfSchedule) {
  EngineOptions o = manual(GetParam().codec);
  o.matmul_precision = GetParam().precision;
  expect_independent_of_schedule(o, 1234, GetParam().name());
}

INSTANTIATE_TEST_SUITE_P(Codecs, EngineDeterminism,
                         ::testing::Values(DeterminismCase{"bf16", MatmulPrecision::F32},
                                           DeterminismCase{"f32", MatmulPrecision::F32},
                                           DeterminismCase{"q8", MatmulPrecision::F32},
                                           DeterminismCase{"q4", MatmulPrecision::F32},
                                           DeterminismCase{"bf16", MatmulPrecision::Bf16},
                                           DeterminismCase{"q4", MatmulPrecision::Bf16}),
                         [](const auto& param_info) { return param_info.param.name(); });

// Under --matmul-precision int8 (8-bit activations against quantized
// weights) on the bundled model quantized as `rowlm quantize` does (q4/64,
// the MLP's down projections 8/32): a request's output is still bitwise the
// same alone and in any schedule, on whichever kernels the CPU runs.
TEST(EngineInt8, RequestOutputIndependentOfScheduleOnQuantizedWeights) {
  if (test::test_device() != "cpu") GTEST_SKIP() << "int8 activations are the CPU's precision";
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("rowlm_int8_engine_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  QuantizeOptions q;
  q.overrides.push_back(parse_quantize_override("mlp.down_proj=8/32"));
  quantize_checkpoint(test::model_dir(), dir.string(), q);
  EngineOptions o = manual("bf16");
  o.model_dir = dir.string();
  o.matmul_precision = MatmulPrecision::Int8;
  expect_independent_of_schedule(o, 808, "int8");
  std::filesystem::remove_all(dir);
}

// Preemption in randomized schedules, for every KV codec: overcommitted
// admission under a budget of about three rows' prompts preempts rows as
// they grow; their KV is swapped to host memory and restored, or (swap
// off, or the prefix cache holding it) recomputed; with and without prefix
// reuse, every request's output is bitwise the one it has alone.
struct PreemptionCase {
  const char* codec;
  std::size_t budget;  // bytes: about three rows' prompts in this codec
};

class EnginePreemption : public ::testing::TestWithParam<PreemptionCase> {};

TEST_P(EnginePreemption, OutputsIndependentOfScheduleWithSwapAndPrefixReuse) {
  std::mt19937 rng(4321);
  auto specs = random_specs(rng, 5);
  for (auto& s : specs) s.max_tokens = 40 + int(rng() % 16);
  specs[4].prompt = specs[1].prompt;  // a prefix to reuse
  const auto alone = solo(manual(GetParam().codec), specs);
  struct Trial {
    bool prefix_cache, swap;
  };
  for (const Trial t : {Trial{true, true}, Trial{false, true}, Trial{true, false}}) {
    EngineOptions opt = manual(GetParam().codec);
    opt.prefix_cache = t.prefix_cache;
    opt.kv_swap = t.swap;
    opt.kv_overcommit = true;
    opt.kv_budget_bytes = GetParam().budget;
    opt.max_running = 5;
    opt.token_budget = 8 + int(rng() % 24);
    EngineStats stats;
    const auto batched = run_schedule(opt, specs, &stats);
    const std::string what = std::string(GetParam().codec) + " prefix cache " + std::to_string(t.prefix_cache) +
                             " swap " + std::to_string(t.swap);
    for (std::size_t i = 0; i < specs.size(); ++i) expect_same(batched[i], alone[i], what + " request " + std::to_string(i));
    EXPECT_GT(stats.preemptions, 0) << what << ": the budget was meant to force preemption";
    if (t.swap) {
      EXPECT_GT(stats.kv_swaps, 0) << what;
    } else {
      EXPECT_EQ(stats.kv_swaps, 0) << what;
    }
    EXPECT_EQ(stats.requests_failed, 0) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Codecs, EnginePreemption,
                         ::testing::Values(PreemptionCase{"f32", 600 * 1024}, PreemptionCase{"bf16", 300 * 1024},
                                           PreemptionCase{"q8", 170 * 1024}, PreemptionCase{"q4", 80 * 1024}),
                         [](const auto& param_info) { return std::string(param_info.param.codec); });

TEST(Engine, PreemptionKeepsOutputsIdentical) {
  std::mt19937 rng(99);
  auto specs = random_specs(rng, 5);
  for (auto& s : specs) { s.arrival = 0; s.max_tokens = 24; }
  const auto alone = solo(manual(), specs);
  EngineOptions opt = manual();
  opt.prefix_cache = false;
  // Room for about three rows' prompts (a token costs 5 window layers x 256 B
  // + 1 full layer x 512 B in bf16, in blocks of 16). Overcommitted, rows are
  // admitted while their prompts fit, and preempted when their growth
  // outruns the pool.
  opt.kv_budget_bytes = 300 * 1024;
  opt.kv_overcommit = true;
  opt.max_running = 5;
  const auto batched = run_schedule(opt, specs);
  int64_t preemptions = 0;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    expect_same(batched[i], alone[i], "request " + std::to_string(i));
    preemptions += batched[i].preemptions;
  }
  EXPECT_GT(preemptions, 0) << "the budget was meant to force preemption";
}

// The same tight budget without overcommit: admission holds room for each
// row's whole sequence, counting each byte once (blocks only the prefix
// cache holds are room until a row attaches them), so requests wait instead
// of being admitted and preempted, and several still run at once.
TEST(Engine, AdmissionUnderATightBudgetNeverPreempts) {
  std::mt19937 rng(99);
  auto specs = random_specs(rng, 5);
  for (auto& s : specs) s.max_tokens = 24;
  specs[3].prompt = specs[0].prompt;  // a prefix to reuse
  const auto alone = solo(manual(), specs);
  for (const bool prefix_cache : {false, true}) {
    EngineOptions opt = manual();
    opt.prefix_cache = prefix_cache;
    opt.kv_budget_bytes = 300 * 1024;
    opt.max_running = 5;
    auto engine = Engine::create(opt);
    std::vector<std::shared_ptr<RequestHandle>> handles;
    for (const Spec& s : specs) handles.push_back(engine->submit(make_request(s)));
    int64_t most_running = 0, most_waiting = 0;
    while (engine->step()) {
      const EngineStats st = engine->stats();
      most_running = std::max(most_running, st.running);
      most_waiting = std::max(most_waiting, st.waiting);
      ASSERT_EQ(st.preemptions, 0) << "prefix cache " << prefix_cache;
    }
    EXPECT_GE(most_running, 2) << "the budget holds more than one row";
    EXPECT_GE(most_waiting, 1) << "the budget was meant to make requests wait";
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const RequestResult r = handles[i]->result();
      EXPECT_EQ(r.preemptions, 0);
      expect_same(r, alone[i], "request " + std::to_string(i) + " prefix cache " + std::to_string(prefix_cache));
    }
  }
}

TEST(Engine, PrefixReuseSkipsCachedPromptTokens) {
  EngineOptions opt = manual();
  auto engine = Engine::create(opt);
  Spec s{std::string(kPrompts[3]) + " " + kPrompts[3], 0.0f, 1, 8, 0, {}};
  auto first = engine->submit(make_request(s));
  engine->run_until_idle();
  auto second = engine->submit(make_request(s));
  engine->run_until_idle();
  const auto a = first->result(), b = second->result();
  EXPECT_EQ(a.usage.cached_prompt_tokens, 0);
  EXPECT_GT(b.usage.cached_prompt_tokens, a.usage.prompt_tokens / 2);
  expect_same(a, b, "same request with and without its prefix cached");
}

// One request alone: its prompt in one step, then one decode step per
// further token; the decode steps' times are a part of all steps' times.
TEST(Engine, StatsCountDecodeStepsApart) {
  auto engine = Engine::create(manual());
  auto h = engine->submit(make_request(Spec{kPrompts[3], 0.0f, 1, 8, 0, {}}));
  engine->run_until_idle();
  ASSERT_EQ(h->result().usage.completion_tokens, 8);
  const EngineStats st = engine->stats();
  EXPECT_EQ(st.steps, 8);
  EXPECT_EQ(st.decode_steps, 7) << "every step after the prompt's";
  EXPECT_GT(st.decode_forward_seconds, 0.0);
  EXPECT_LT(st.decode_forward_seconds, st.forward_seconds) << "the prompt's step is not a decode step";
  EXPECT_GE(st.decode_step_seconds, st.decode_forward_seconds);
  EXPECT_LT(st.decode_step_seconds, st.step_seconds);
}

TEST(Engine, CancelFreesBlocks) {
  auto engine = Engine::create(manual());
  Spec s{kPrompts[3], 0.9f, 5, 200, 0, {}};
  auto h = engine->submit(make_request(s));
  for (int i = 0; i < 5; ++i) engine->step();
  EXPECT_GT(engine->stats().kv_used_bytes, 0u);
  h->cancel();
  engine->step();
  EXPECT_TRUE(h->done());
  EXPECT_EQ(h->result().finish, FinishReason::Cancelled);
  EXPECT_EQ(engine->stats().running, 0);
  EXPECT_EQ(engine->stats().kv_used_bytes - engine->stats().prefix_cache_bytes, 0u);
}

// The prefix cache's budget: stated by default, held through distinct
// prompts (each starts with its own word, so none reuses another's blocks),
// and 0 with the cache on is refused by name.
TEST(Engine, PrefixCacheStaysWithinItsBudget) {
  EXPECT_EQ(EngineOptions{}.prefix_cache_bytes, kDefaultPrefixCacheBytes);
  EngineOptions o = manual();
  o.prefix_cache_bytes = 0;
  try {
    Engine::create(o);
    ADD_FAILURE() << "prefix_cache_bytes 0 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("prefix_cache_bytes"), std::string::npos) << e.what();
  }
  constexpr std::size_t kBudget = std::size_t(128) << 10;
  o.prefix_cache_bytes = kBudget;
  auto engine = Engine::create(o);
  std::size_t most = 0;
  for (int i = 0; i < 6; ++i) {
    std::string prompt = std::to_string(i);
    for (int r = 0; r < 6; ++r) prompt += std::string(" ") + kPrompts[(i + r) % 4];
    auto h = engine->submit(make_request(Spec{prompt, 0.0f, 1, 4, 0, {}}));
    engine->run_until_idle();
    EXPECT_EQ(h->result().usage.cached_prompt_tokens, 0) << "prompt " << i;
    const EngineStats s = engine->stats();
    EXPECT_LE(s.prefix_cache_bytes, kBudget) << "after prompt " << i;
    EXPECT_EQ(s.kv_used_bytes, s.prefix_cache_bytes) << "only the cache holds blocks while idle";
    most = std::max(most, s.prefix_cache_bytes);
  }
  EXPECT_GT(most, kBudget / 2) << "the prompts were meant to fill the budget";
}

TEST(Engine, StopStringEndsTextBeforeIt) {
  auto engine = Engine::create(manual());
  Spec base{"And the king said unto", 0.0f, 1, 40, 0, {}};
  auto h = engine->submit(make_request(base));
  engine->run_until_idle();
  const std::string full = h->result().text;
  ASSERT_GT(full.size(), 12u);
  const std::string stop = full.substr(6, 4);
  Spec with_stop = base;
  with_stop.stop = {stop};
  auto h2 = engine->submit(make_request(with_stop));
  engine->run_until_idle();
  const auto r = h2->result();
  EXPECT_EQ(r.finish, FinishReason::Stop);
  EXPECT_EQ(r.stop, stop);
  EXPECT_EQ(r.text, full.substr(0, full.find(stop)));
}

TEST(Engine, StreamedTextEqualsResult) {
  auto engine = Engine::create(manual());
  Spec s{"The Python interpreter", 0.8f, 7, 30, 0, {}};
  auto h = engine->submit(make_request(s));
  engine->run_until_idle();
  std::string streamed;
  TokenEvent ev;
  int tokens = 0;
  while (h->next(ev)) {
    streamed += ev.text;
    tokens += ev.token >= 0;
  }
  const auto r = h->result();
  EXPECT_EQ(streamed, r.text);
  EXPECT_EQ(tokens, int(r.token_ids.size()));
}

TEST(Engine, RejectsBadRequests) {
  EngineOptions opt = manual();
  opt.max_waiting = 2;
  auto engine = Engine::create(opt);
  Request empty;
  empty.prompt_ids = {};
  empty.prompt = "";
  empty.add_special_tokens = false;
  EXPECT_THROW(engine->submit(empty), Error);
  Request bad = make_request({"hi", 0.5f, 1, 4, 0, {}});
  bad.sampling.top_p = 2.0f;
  EXPECT_THROW(engine->submit(bad), Error);
  Request bad_id;
  bad_id.prompt_ids = {1, 999999};
  EXPECT_THROW(engine->submit(bad_id), Error);
  Request too_long;
  too_long.prompt_ids.assign(std::size_t(engine->model_info().max_position) + 1, 5);
  EXPECT_THROW(engine->submit(too_long), Error);
  engine->submit(make_request({"a", 0.0f, 1, 2, 0, {}}));
  engine->submit(make_request({"b", 0.0f, 1, 2, 0, {}}));
  EXPECT_THROW(engine->submit(make_request({"c", 0.0f, 1, 2, 0, {}})), QueueFull);
}

// The library's request rules (engine/validate_request.h): a refusal names
// the field at fault; max_tokens past the context is no refusal, the
// request ends with Length where the context does.
TEST(Engine, InvalidRequestsNameTheirFieldAndLongMaxTokensEndAtTheContext) {
  auto engine = Engine::create(manual());
  auto refused_field = [&](const Request& r) -> std::string {
    try {
      engine->submit(r);
    } catch (const InvalidRequest& e) {
      return e.field();
    }
    return "(accepted)";
  };
  Request empty;
  empty.add_special_tokens = false;
  EXPECT_EQ(refused_field(empty), "prompt");
  Request bad = make_request({"hi", 0.5f, 1, 4, 0, {}});
  bad.sampling.top_p = 2.0f;
  EXPECT_EQ(refused_field(bad), "top_p");

  // A model with a short context (256), so that reaching it is cheap (the
  // bundled model's is long enough to take a minute under the sanitizers).
  EngineOptions short_context = manual();
  short_context.model_dir = std::string(ROWLM_SOURCE_DIR) + "/tests/fixtures/gemma4/e_series";
  engine = Engine::create(short_context);
  const int64_t context = engine->model_info().max_position;
  ASSERT_EQ(context, 256);
  Request near_end;
  near_end.prompt_ids.assign(std::size_t(context) - 3, 5);
  near_end.sampling.temperature = 0;
  near_end.sampling.max_tokens = 100;
  near_end.ignore_eos = true;
  auto h = engine->submit(near_end);
  engine->run_until_idle();
  const RequestResult r = h->result();
  EXPECT_EQ(r.finish, FinishReason::Length);
  EXPECT_EQ(r.usage.completion_tokens, 3);
}

TEST(Engine, BackgroundThreadServesManySubmitters) {
  std::mt19937 rng(7);
  auto specs = random_specs(rng, 8);
  const auto alone = solo(manual(), specs);
  EngineOptions opt = manual();
  opt.background = true;
  auto engine = Engine::create(opt);
  std::vector<RequestResult> got(specs.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < specs.size(); ++i)
    threads.emplace_back([&, i] { got[i] = engine->submit(make_request(specs[i]))->result(); });
  for (auto& t : threads) t.join();
  for (std::size_t i = 0; i < specs.size(); ++i) expect_same(got[i], alone[i], "request " + std::to_string(i));
}

}  // namespace
}  // namespace rowlm

namespace rowlm {
namespace {

// Chunked prefill: while a 2,000-token prompt is admitted, a running row
// keeps producing one token at every step.
TEST(Engine, LongPromptDoesNotStallRunningRows) {
  EngineOptions opt = manual();
  opt.token_budget = 256;
  auto engine = Engine::create(opt);
  Request running = make_request({"And the king said unto", 0.0f, 1, 200, 0, {}});
  running.ignore_eos = true;
  int64_t tokens = 0;
  auto a = engine->submit(running, [&](const TokenEvent& ev) { tokens += ev.token >= 0; });
  while (tokens == 0) engine->step();

  Request long_prompt;
  for (int i = 0; i < 2000; ++i) long_prompt.prompt_ids.push_back(int32_t(10 + (i * 7919) % 8000));
  long_prompt.sampling.temperature = 0;
  long_prompt.sampling.max_tokens = 4;
  int64_t long_tokens = 0;
  auto b = engine->submit(long_prompt, [&](const TokenEvent& ev) { long_tokens += ev.token >= 0; });
  int steps = 0;
  while (long_tokens == 0) {
    const int64_t before = tokens;
    ASSERT_TRUE(engine->step());
    ++steps;
    EXPECT_EQ(tokens, before + 1) << "the running row missed step " << steps;
  }
  // 2,000 prompt tokens in chunks that leave room for the running row's token.
  EXPECT_GE(steps, 2000 / 256);
  a->cancel();
  engine->run_until_idle();
  EXPECT_EQ(b->result().usage.prompt_tokens, 2000);
}

}  // namespace
}  // namespace rowlm
