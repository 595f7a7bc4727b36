// Speculative decoding inside the batch, on the bundled model and its draft:
// greedy speculation emits exactly what plain decoding does (tokens and
// bitwise log-probabilities) for both drafters, every KV codec, prompts and
// generations past the sliding window, any schedule and preemption; with
// sampling, a request's output depends on its seed only, never on the
// schedule; and the verified tokens follow the target's distribution.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "backend/factory/make_backend.h"
#include "engine/drafter.h"
#include "engine/engine_test_util.h"
#include "engine/step_runner.h"
#include "model/model.h"
#include "sampling/speculative.h"
#include "io/temp_dir.h"
#include "model/gemma4_assistant_test_util.h"

namespace rowlm {
namespace {

using namespace test;

// One thread: the properties hold for any count, and CI shares its cores.
EngineOptions options(const std::string& codec = "bf16", const std::string& draft = "") {
  EngineOptions o = manual(codec);
  o.threads = 1;
  o.draft = draft;
  return o;
}

// A random Gemma 4 assistant for the bundled model (its KV geometry and
// hidden size), with ordered embeddings: written once per test binary.
const std::string& assistant_dir() {
  static const TempDir dir("rowlm_assistant");
  static const bool written = [] {
    AssistantShape s;  // vocab 8192, backbone 256, 1 KV head of 64 / 128, window 64
    s.centroids = 64;
    s.top_k = 8;
    write_random_assistant(dir.path(), s, 11);
    return true;
  }();
  (void)written;
  return dir.path();
}

std::string drafter_dir(const std::string& name) {
  return name == "model" ? draft_model_dir() : name == "assistant" ? assistant_dir() : name;
}

// Prompts past the 64-token window, and short ones.
std::string prompt(std::mt19937& rng) {
  std::string p = kPrompts[rng() % std::size(kPrompts)];
  if (rng() % 3) p += " " + std::string(kPrompts[3]) + " " + kPrompts[rng() % std::size(kPrompts)] + " " + kPrompts[3];
  return p;
}

// Requests arriving over the first steps, long enough to wrap the window;
// some end on a stop string or a stop token that plain decoding reaches.
std::vector<Spec> specs_for(std::mt19937& rng, int n, float temperature) {
  std::vector<Spec> out;
  for (int i = 0; i < n; ++i) {
    Spec s{prompt(rng), temperature, rng(), 20 + int(rng() % 50), int(rng() % 16), {}};
    if (i % 4 == 1) s.stop = {" of the", ".\n"};
    if (i % 4 == 2) s.stop_token_ids = {107};  // "\n"
    if (temperature > 0 && rng() % 2) s.top_k = 40;
    // Greedy rows without logprobs are verified from their argmax codes
    // (verify_draft_argmax), those with them from their logits rows.
    if (temperature == 0 && i % 2 == 1) s.logprobs = std::nullopt;
    out.push_back(s);
  }
  return out;
}

void expect_stats_add_up(const std::vector<RequestResult>& results, const EngineStats& stats) {
  int64_t proposed = 0, accepted = 0;
  for (const auto& r : results) {
    EXPECT_LE(r.draft_accepted, r.draft_proposed);
    EXPECT_GE(r.draft_accepted, 0);
    proposed += r.draft_proposed;
    accepted += r.draft_accepted;
  }
  EXPECT_EQ(stats.draft_proposed, proposed);
  EXPECT_EQ(stats.draft_accepted, accepted);
  EXPECT_GT(proposed, 0) << "nothing was drafted";
}

TEST(NgramLookup, ProposesWhatFollowedTheLongestRecentMatch) {
  using V = std::vector<int32_t>;
  // The 3-gram (1 2 3) occurred at 0: 4 followed, and the pattern goes on
  // through the proposal itself.
  EXPECT_EQ(engine::ngram_lookup(V{1, 2, 3, 4, 1, 2, 3}, 6), (V{4, 1, 2, 3, 4, 1}));
  // (5 1) occurred twice; the more recent one was followed by 7.
  EXPECT_EQ(engine::ngram_lookup(V{5, 1, 9, 5, 1, 7, 5, 1}, 2), (V{7, 5}));
  // A longer match beats a more recent shorter one: (8 5 1) at 0 vs (5 1) at 5.
  EXPECT_EQ(engine::ngram_lookup(V{8, 5, 1, 6, 0, 5, 1, 2, 8, 5, 1}, 1), (V{6}));
  // Only a 1-gram matches.
  EXPECT_EQ(engine::ngram_lookup(V{3, 9, 4, 3}, 3), (V{9, 4, 3}));
  // A run of one token continues as that token.
  EXPECT_EQ(engine::ngram_lookup(V{2, 7, 7, 7}, 4), (V{7, 7, 7, 7}));
  EXPECT_TRUE(engine::ngram_lookup(V{1, 2, 3}, 4).empty());
  EXPECT_TRUE(engine::ngram_lookup(V{1, 2, 1}, 0).empty());
  EXPECT_TRUE(engine::ngram_lookup(V{}, 4).empty());
  EXPECT_TRUE(engine::ngram_lookup(V{1}, 4).empty());
}

// Plain decoding, each request alone: computed once per codec.
const std::vector<RequestResult>& plain_reference(const std::string& codec, const std::vector<Spec>& specs) {
  static std::map<std::string, std::vector<RequestResult>> cache;
  auto it = cache.find(codec);
  if (it == cache.end()) it = cache.emplace(codec, solo(options(codec), specs)).first;
  return it->second;
}

class GreedySpeculation : public ::testing::TestWithParam<std::tuple<const char*, const char*>> {};

TEST_P(GreedySpeculation, EmitsExactlyWhatPlainDecodingDoes) {
  const auto [drafter, codec] = GetParam();
  std::mt19937 rng(2024);
  const auto specs = specs_for(rng, 4, 0.0f);
  const std::vector<RequestResult> plain = plain_reference(codec, specs);  // a copy: g++ 13 warns of a dangling reference otherwise
  // Stops fire in the middle of accepted runs too.
  EXPECT_GT(std::count_if(plain.begin(), plain.end(), [](const auto& r) { return r.finish == FinishReason::Stop; }), 0);
  rng.seed(std::hash<std::string>{}(std::string(drafter) + codec));
  // Each request alone (bf16 only, to keep the test short), then all of
  // them in a random schedule (every codec).
  for (int trial = std::string(codec) == "bf16" ? 0 : 1; trial < 2; ++trial) {
    EngineOptions opt = options(codec, drafter_dir(drafter));
    opt.draft_tokens = 2 + int(rng() % 4);
    std::vector<RequestResult> got;
    EngineStats stats;
    if (trial == 0) {
      got = solo(opt, specs);
    } else {
      opt.max_running = 2 + int(rng() % 3);
      opt.token_budget = 8 + int(rng() % 24);  // chunked prefill, trimmed drafts
      opt.prefix_cache = rng() % 2;
      got = run_schedule(opt, specs, &stats);
      expect_stats_add_up(got, stats);
    }
    int64_t proposed = 0;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      expect_same(got[i], plain[i], std::string(drafter) + " " + codec + " trial " + std::to_string(trial) +
                                        " request " + std::to_string(i));
      proposed += got[i].draft_proposed;
    }
    EXPECT_GT(proposed, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(DraftersAndCodecs, GreedySpeculation,
                         ::testing::Combine(::testing::Values("ngram", "model"), ::testing::Values("bf16", "q8", "q4")),
                         [](const auto& p) {
                           return std::string(std::get<0>(p.param)) + "_" + std::get<1>(p.param);
                         });
// The assistant reads the target's KV through the same attention as the
// target, whatever its codec; one codec keeps the test short.
INSTANTIATE_TEST_SUITE_P(Assistant, GreedySpeculation,
                         ::testing::Combine(::testing::Values("assistant"), ::testing::Values("bf16")),
                         [](const auto& p) {
                           return std::string(std::get<0>(p.param)) + "_" + std::get<1>(p.param);
                         });

class SampledSpeculation : public ::testing::TestWithParam<const char*> {};

TEST_P(SampledSpeculation, OutputDependsOnTheSeedNotTheSchedule) {
  const std::string drafter = GetParam();
  const std::string codec = drafter == "model" ? "q8" : "bf16";
  std::mt19937 rng(77);
  auto specs = specs_for(rng, 4, 0.9f);
  specs[1].temperature = 0.0f;  // greedy and sampled rows together
  const auto alone = solo(options(codec, drafter_dir(drafter)), specs);
  for (int trial = 0; trial < 2; ++trial) {
    EngineOptions opt = options(codec, drafter_dir(drafter));
    opt.max_running = 3 + int(rng() % 3);
    opt.token_budget = 6 + int(rng() % 16);  // chunked prefill; greedy drafts trimmed to the budget
    opt.prefix_cache = trial == 1;
    EngineStats stats;
    const auto batched = run_schedule(opt, specs, &stats);
    expect_stats_add_up(batched, stats);
    for (std::size_t i = 0; i < specs.size(); ++i)
      expect_same(batched[i], alone[i], drafter + " trial " + std::to_string(trial) + " request " + std::to_string(i));
  }
}

INSTANTIATE_TEST_SUITE_P(Drafters, SampledSpeculation, ::testing::Values("ngram", "model", "assistant"),
                         [](const auto& p) { return std::string(p.param); });

TEST(Speculation, PreemptedRowsRebuildTheirDraftRows) {
  std::mt19937 rng(5);
  std::vector<Spec> specs;
  for (int i = 0; i < 5; ++i) specs.push_back({kPrompts[i], i == 0 ? 0.0f : 1.0f, rng(), 60, 0, {}});
  const EngineOptions base = options("bf16", draft_model_dir());
  const auto alone = solo(base, specs);
  EngineOptions opt = base;
  opt.prefix_cache = false;
  opt.max_running = 5;
  // Room for the five prompts in target and draft caches, not for all
  // their growth: overcommitted, rows are admitted and later preempted as
  // they grow.
  opt.kv_budget_bytes = 400 * 1024;
  opt.kv_overcommit = true;
  EngineStats stats;
  const auto batched = run_schedule(opt, specs, &stats);
  for (std::size_t i = 0; i < specs.size(); ++i) expect_same(batched[i], alone[i], "request " + std::to_string(i));
  EXPECT_GT(stats.preemptions, 0) << "the budget was meant to force preemption";
  expect_stats_add_up(batched, stats);
}

// The assistant's rows continue from the target's state after preemption,
// whether the target KV was swapped out and restored or recomputed: sampled
// outputs equal each request's alone.
TEST(Speculation, AssistantRowsResumeAfterPreemption) {
  std::mt19937 rng(6);
  std::vector<Spec> specs;
  for (int i = 0; i < 5; ++i) specs.push_back({kPrompts[i], i == 0 ? 0.0f : 1.0f, rng(), 60, 0, {}});
  const EngineOptions base = options("bf16", assistant_dir());
  const auto alone = solo(base, specs);
  for (const bool swap : {true, false}) {
    EngineOptions opt = base;
    opt.prefix_cache = false;
    opt.max_running = 5;
    opt.kv_budget_bytes = 300 * 1024;  // the prompts fit, their growth does not
    opt.kv_overcommit = true;
    opt.kv_swap = swap;
    EngineStats stats;
    const auto batched = run_schedule(opt, specs, &stats);
    for (std::size_t i = 0; i < specs.size(); ++i)
      expect_same(batched[i], alone[i], "swap " + std::to_string(swap) + " request " + std::to_string(i));
    EXPECT_GT(stats.preemptions, 0) << "the budget was meant to force preemption";
    if (swap) {
      EXPECT_GT(stats.kv_swaps, 0);
    }
    expect_stats_add_up(batched, stats);
  }
}

// A copy of the bundled model (weights linked) whose context is `context`.
struct ShortContextModel {
  explicit ShortContextModel(int context) {
    namespace fs = std::filesystem;
    for (const auto& e : fs::directory_iterator(model_dir()))
      if (e.path().filename() != "config.json") fs::create_symlink(e.path(), fs::path(dir.path()) / e.path().filename());
    std::ifstream in(model_dir() + "/config.json");
    nlohmann::json config = nlohmann::json::parse(in);
    config["max_position_embeddings"] = context;
    std::ofstream(dir.file("config.json")) << config.dump();
  }
  TempDir dir{"rowlm_spec"};
};

TEST(Speculation, StopsAtTheContextEndLikePlainDecoding) {
  const ShortContextModel model(120);
  Spec s{std::string(kPrompts[3]) + " " + kPrompts[3], 0.0f, 1, 0, 0, {}};
  auto run = [&](const std::string& draft) {
    EngineOptions opt = options("bf16", draft);
    opt.model_dir = model.dir.path();
    Request r = make_request(s);
    r.sampling.max_tokens.reset();
    r.ignore_eos = true;
    auto engine = Engine::create(opt);
    auto h = engine->submit(r);
    engine->run_until_idle();
    return h->result();
  };
  const RequestResult plain = run("");
  ASSERT_EQ(plain.finish, FinishReason::Length);
  ASSERT_EQ(plain.usage.prompt_tokens + plain.usage.completion_tokens, 120);
  ASSERT_GT(plain.usage.completion_tokens, 8);
  for (const std::string& draft : {std::string("ngram"), draft_model_dir()}) {
    const RequestResult spec = run(draft);
    expect_same(spec, plain, draft);
    EXPECT_GT(spec.draft_proposed, 0) << draft;
  }
}

// The tokens a draft model helps emit are distributed as the target's
// sampling distribution. With top_k = K and logprobs = K, each result
// carries, for every position, the target's raw log-probabilities of the K
// tokens it could sample, so the exact distribution of that position's
// token (given what came before) is known: at temperature T it is
// proportional to exp(logprob / T) over those K. A Pearson test on the
// chosen tokens' ranks then checks the verification scheme end to end.
TEST(Speculation, SampledTokensFollowTheTargetDistribution) {
  constexpr int K = 4;
  constexpr float T = 3.0f;  // flat enough that many drafts are rejected
  std::vector<Spec> specs;
  for (int i = 0; i < 80; ++i)
    specs.push_back({kPrompts[i % 3], T, uint64_t(1000 + i), 16, 0, {}, {}, K, K});
  EngineOptions opt = options("bf16", draft_model_dir());
  opt.draft_tokens = 3;
  opt.max_running = 64;
  EngineStats stats;
  const auto results = run_schedule(opt, specs, &stats);
  expect_stats_add_up(results, stats);
  // Some drafts were rejected, so the residual draw was exercised too.
  EXPECT_LT(stats.draft_accepted, stats.draft_proposed);

  std::vector<double> observed(K), expected(K);
  int64_t samples = 0;
  for (const auto& r : results) {
    ASSERT_EQ(r.logprobs.size(), r.token_ids.size());
    for (std::size_t j = 1; j < r.logprobs.size(); ++j) {  // token 0 comes from the prompt's logits, undrafted
      const auto& top = r.logprobs[j].top;
      ASSERT_EQ(int(top.size()), K);
      double total = 0;
      for (const auto& alt : top) total += std::exp(double(alt.logprob) / T);
      int rank = -1;
      for (int k = 0; k < K; ++k) {
        expected[std::size_t(k)] += std::exp(double(top[std::size_t(k)].logprob) / T) / total;
        if (top[std::size_t(k)].token == r.token_ids[j]) rank = k;
      }
      ASSERT_GE(rank, 0) << "a token outside the top " << K << " was sampled";
      observed[std::size_t(rank)] += 1;
      ++samples;
    }
  }
  double chi2 = 0;
  for (int k = 0; k < K; ++k) {
    ASSERT_GT(expected[std::size_t(k)], 5.0) << "too few samples for the test at rank " << k;
    chi2 += std::pow(observed[std::size_t(k)] - expected[std::size_t(k)], 2) / expected[std::size_t(k)];
  }
  // 3 degrees of freedom: P(chi2 > 16.27) = 0.001. (The verifier scores
  // about 0.5 here; one that redraws a rejected position from p instead of
  // the residual max(0, p - q) scores about 43.)
  EXPECT_LT(chi2, 16.27) << samples << " samples; observed by rank " << observed[0] << " " << observed[1] << " "
                         << observed[2] << " " << observed[3] << ", expected " << expected[0] << " " << expected[1]
                         << " " << expected[2] << " " << expected[3];
}

TEST(Speculation, AcceptanceIsHighOnRepetitiveText) {
  // The bundled model falls into loops greedily: prompt lookup predicts them.
  Spec s{kPrompts[0], 0.0f, 1, 120, 0, {}};
  for (const std::string& draft : {std::string("ngram"), draft_model_dir()}) {
    EngineStats stats;
    const auto r = run_schedule(options("bf16", draft), {s}, &stats)[0];
    ASSERT_GT(r.draft_proposed, 0) << draft;
    EXPECT_GT(double(r.draft_accepted) / double(r.draft_proposed), 0.5) << draft;
    // Fewer target steps than tokens: several tokens per verification.
    EXPECT_LT(stats.steps, r.usage.completion_tokens * 2 / 3) << draft;
  }
}

TEST(Speculation, CancelFreesTheDraftRowToo) {
  auto engine = Engine::create(options("q8", draft_model_dir()));
  auto h = engine->submit(make_request({kPrompts[3], 0.9f, 5, 200, 0, {}}));
  for (int i = 0; i < 5; ++i) engine->step();
  const EngineStats running = engine->stats();
  EXPECT_GT(running.draft_proposed, 0);
  EXPECT_GT(running.kv_used_bytes - running.prefix_cache_bytes, 0u);
  h->cancel();
  engine->step();
  EXPECT_EQ(h->result().finish, FinishReason::Cancelled);
  const EngineStats after = engine->stats();
  EXPECT_EQ(after.running, 0);
  EXPECT_EQ(after.kv_used_bytes - after.prefix_cache_bytes, 0u);  // target and draft caches
}

TEST(Speculation, BadDraftOptionsAreRefusedClearly) {
  auto error_of = [](const EngineOptions& o) -> std::string {
    try {
      Engine::create(o);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of(options("bf16", "/nonexistent/draft")).find("neither \"ngram\" nor a model directory"),
            std::string::npos);
  // A model with another vocabulary (128 tokens) cannot draft for this one.
  const std::string other = std::string(ROWLM_SOURCE_DIR) + "/tests/fixtures/gemma4/bf16";
  const std::string e = error_of(options("bf16", other));
  EXPECT_NE(e.find("vocabulary of 128 tokens"), std::string::npos) << e;
  EngineOptions zero = options("bf16", "ngram");
  zero.draft_tokens = 0;
  EXPECT_NE(error_of(zero).find("draft_tokens"), std::string::npos);
}

// For a drafter that continues from the target's state (the assistant), the
// step runner leaves each row's RequestState::target_state at its last
// computed position after a prefill and after every verified round, however
// many drafts were kept: bitwise what a fresh prefill of the row's computed
// tokens gives as the final-normed hidden state of the last of them.
TEST(Speculation, RowsKeepTheTargetStateOfTheirLastComputedPosition) {
  // The greedy continuation, from plain decoding.
  const std::vector<int32_t> prompt = {2, 818, 5279, 529, 506, 7670, 1032, 4055};
  Spec spec{"", 0.0f, 1, 40, 0, {}};
  spec.prompt_ids = prompt;
  std::vector<int32_t> sequence = prompt;
  const std::vector<RequestResult> plain = solo(options(), {spec});
  sequence.insert(sequence.end(), plain[0].token_ids.begin(), plain[0].token_ids.end());

  // Proposes what the continuation holds for a scheduled number of drafts,
  // then a token it does not hold.
  struct Oracle final : engine::Drafter {
    const std::vector<int32_t>* sequence = nullptr;
    std::mt19937 rng{3};
    bool reads_target_state() const override { return true; }
    void propose(std::span<engine::DraftJob> jobs, const engine::TargetView&) override {
      for (engine::DraftJob& job : jobs) {
        job.tokens.clear();
        const int64_t from = job.request->sequence_length();
        const int right = int(rng() % std::size_t(job.max_tokens + 1));
        for (int j = 0; j < job.max_tokens && from + j < int64_t(sequence->size()); ++j)
          job.tokens.push_back(j < right ? (*sequence)[std::size_t(from + j)] : (*sequence)[std::size_t(from + j)] ^ 1);
      }
    }
  };
  auto backend = make_backend({"cpu", 1, MatmulPrecision::F32});
  auto model = load_model(model_dir(), *backend);
  kv::CacheOptions copt;
  copt.layers = model->kv_layers(kv::parse_codec("bf16"));
  auto drafter = std::make_unique<Oracle>();
  drafter->sequence = &sequence;
  engine::StepRunner runner(*model, std::make_unique<kv::KvCache>(copt, *backend), std::move(drafter), false, 0);
  // A fresh prefill's final-normed state of the last of `tokens`.
  auto fresh_state = [&](std::span<const int32_t> tokens) {
    kv::KvCache cache(copt, *backend);
    ForwardBatch b;
    const kv::RowId row = cache.create_row();
    for (std::size_t i = 0; i < tokens.size(); ++i) b.add(row, int64_t(i), tokens[i], i + 1 == tokens.size());
    Tensor logits, hidden;
    model->forward(b, cache, logits, &hidden);
    return std::vector<float>(hidden.data<float>(), hidden.data<float>() + hidden.numel());
  };

  Request request;
  request.prompt_ids = prompt;
  request.sampling.temperature = 0.0f;  // greedy, as the continuation
  engine::RequestState r(1, request, prompt, model->info().vocab_size, nullptr,
                         std::make_shared<engine::HandleImpl>(1, [] {}), {});
  runner.attach(r);
  runner.forward(engine::StepPlan{{{&r, int64_t(prompt.size()), -1}}}, {});
  r.tokens.push_back(sequence[prompt.size()]);
  int rounds = 0, kept_drafts = 0;
  std::vector<float> previous;
  while (r.sequence_length() + 4 < int64_t(sequence.size())) {
    ASSERT_EQ(r.target_state_position, r.computed - 1);
    const std::vector<float> want = fresh_state(std::span(r.tokens).first(std::size_t(r.computed)));
    ASSERT_EQ(r.target_state, want) << "round " << rounds << ", computed " << r.computed;
    EXPECT_NE(want, previous);
    previous = want;
    std::vector<engine::DraftJob> jobs{{&r, 3, {}, {}}};
    runner.propose(jobs);
    const engine::StepLogits out = runner.forward(engine::StepPlan{{{&r, 1, 0}}}, jobs);
    // Greedy verification against the known continuation.
    int accepted = 0;
    while (accepted < int(jobs[0].tokens.size()) &&
           jobs[0].tokens[std::size_t(accepted)] == sequence[std::size_t(r.sequence_length() + accepted)])
      ++accepted;
    // A greedy row is verified from its rows' argmax codes, no logits row
    // crossing: up to the first wrong draft they are plain decoding's tokens.
    ASSERT_NE(out.draft_argmax[0], nullptr);
    EXPECT_EQ(out.logits.numel(), 0);
    for (int j = 0; j <= accepted; ++j)
      EXPECT_EQ(out.draft_argmax[0][j], sequence[std::size_t(r.sequence_length() + j)]) << "round " << rounds << " row " << j;
    for (int j = 0; j <= accepted; ++j) r.tokens.push_back(sequence[r.tokens.size()]);
    runner.settle_round(r, jobs[0], accepted + 1, accepted);
    kept_drafts += accepted;
    ++rounds;
  }
  EXPECT_GT(kept_drafts, rounds / 2) << "the schedule was meant to keep drafts";
  runner.release(r);
}

// A sampling row with a deterministic drafter, on a backend that samples
// rows (make_backend's CPU backend; the GPU), is verified where its logits
// are: none of its 1 + g logits rows crosses to the host, only a token
// each (the verdicts, then the last row's draw) and the logprob stats it
// asks for; and those give, round after round, the verdicts the host's
// loop (verify_draft_token with the sampler advancing through the kept
// drafts, then sample()) gives on the same rows' logits from a fresh
// prefill: bias, penalties over the drafts kept, top-k, logprobs.
TEST(Speculation, SampledRowsAreVerifiedWithoutTheirLogitsCrossing) {
  const std::vector<int32_t> prompt = {2, 818, 5279, 529, 506, 7670, 1032, 4055};
  Spec spec{"", 0.0f, 1, 40, 0, {}};
  spec.prompt_ids = prompt;
  std::vector<int32_t> sequence = prompt;  // greedy's continuation: drafts the target often keeps
  const std::vector<RequestResult> plain = solo(options(), {spec});
  sequence.insert(sequence.end(), plain[0].token_ids.begin(), plain[0].token_ids.end());
  struct Oracle final : engine::Drafter {
    const std::vector<int32_t>* sequence = nullptr;
    std::mt19937 rng{9};
    void propose(std::span<engine::DraftJob> jobs, const engine::TargetView&) override {
      for (engine::DraftJob& job : jobs) {
        job.tokens.clear();
        // The continuation, a token drafted earlier in the round (the
        // penalties then differ from row to row), or any token.
        for (int j = 0; j < job.max_tokens; ++j) {
          const unsigned how = rng() % 4;
          job.tokens.push_back(how == 0   ? int32_t(rng() % 8192)
                               : how == 1 && j > 0 ? job.tokens[rng() % std::size_t(j)]
                                         : (*sequence)[std::size_t(job.request->sequence_length() + j) % sequence->size()]);
        }
      }
    }
  };
  auto backend = make_backend({"cpu", 1, MatmulPrecision::F32});
  ASSERT_TRUE(backend->samples_rows());
  auto model = load_model(model_dir(), *backend);
  const int64_t V = model->info().vocab_size;
  kv::CacheOptions copt;
  copt.layers = model->kv_layers(kv::parse_codec("bf16"));
  auto drafter = std::make_unique<Oracle>();
  drafter->sequence = &sequence;
  engine::StepRunner runner(*model, std::make_unique<kv::KvCache>(copt, *backend), std::move(drafter), false, 0);
  // A fresh prefill's logits for the last n of `tokens`.
  auto fresh_logits = [&](std::span<const int32_t> tokens, std::size_t n) {
    kv::KvCache cache(copt, *backend);
    ForwardBatch b;
    const kv::RowId row = cache.create_row();
    for (std::size_t i = 0; i < tokens.size(); ++i) b.add(row, int64_t(i), tokens[i], i + n >= tokens.size());
    Tensor logits;
    model->forward(b, cache, logits);
    return std::vector<float>(logits.data<float>(), logits.data<float>() + logits.numel());
  };

  Request request;
  request.prompt_ids = prompt;
  request.sampling.temperature = 0.9f;
  request.sampling.top_k = 40;
  request.sampling.seed = 17;
  request.sampling.logprobs = 3;
  request.sampling.repetition_penalty = 1.2f;
  request.sampling.presence_penalty = 1.5f;
  request.sampling.frequency_penalty = 2.0f;
  request.sampling.logit_bias[sequence[prompt.size() + 2]] = 1.5f;
  engine::RequestState r(1, request, prompt, V, nullptr, std::make_shared<engine::HandleImpl>(1, [] {}), {});
  runner.attach(r);
  // The prompt's row is sampled on the backend too.
  const engine::StepLogits first = runner.forward(engine::StepPlan{{{&r, int64_t(prompt.size()), -1}}}, {});
  ASSERT_EQ(first.logits.numel(), 0) << "the prompt's logits row crossed";
  ASSERT_TRUE(first.sampled[0].has_value());
  const int32_t t0 = r.sampler.sampled_on_device(*first.sampled[0], first.logprob_stats[0]).token;
  EXPECT_EQ(r.sampler.sample(fresh_logits(prompt, 1)).token, t0) << "the prompt's token is not the host's";
  r.sampler.accept(t0);
  r.tokens.push_back(t0);
  int rounds = 0, kept = 0, rejected = 0;
  while (r.sequence_length() < 64) {
    std::vector<engine::DraftJob> jobs{{&r, 4, {}, {}}};
    runner.propose(jobs);
    const std::vector<int32_t> drafts = jobs[0].tokens;
    const std::size_t g = drafts.size();
    const engine::StepLogits out = runner.forward(engine::StepPlan{{{&r, 1, 0}}}, jobs);
    EXPECT_EQ(out.logits.numel(), 0) << "a logits row crossed, round " << rounds;
    ASSERT_EQ(out.draft_argmax[0], nullptr);
    ASSERT_NE(out.draft_sampled[0], nullptr);
    ASSERT_NE(out.draft_stats[0], nullptr);
    // The host's loop on the same rows.
    std::vector<int32_t> fed(r.tokens.begin(), r.tokens.end());
    fed.insert(fed.end(), drafts.begin(), drafts.end());
    const std::vector<float> rows = fresh_logits(fed, g + 1);
    auto row = [&](std::size_t j) { return std::span<const float>(rows).subspan(j * std::size_t(V), std::size_t(V)); };
    std::vector<int32_t> emitted;
    std::size_t j = 0;
    for (; j < g; ++j) {
      const sampling::DraftVerdict want = sampling::verify_draft_token(r.sampler, row(j), {}, drafts[j]);
      const sampling::DraftVerdict got =
          sampling::verify_draft_on_device(r.sampler, out.draft_sampled[0][j], out.draft_stats[0] + j, drafts[j]);
      ASSERT_EQ(got.accepted, want.accepted) << "round " << rounds << " draft " << j;
      ASSERT_EQ(got.token.token, want.token.token) << "round " << rounds << " draft " << j;
      ASSERT_TRUE(got.token.logprobs && want.token.logprobs);
      EXPECT_EQ(got.token.logprobs->chosen, want.token.logprobs->chosen);
      EXPECT_EQ(got.token.logprobs->top, want.token.logprobs->top);
      r.sampler.accept(want.token.token);
      emitted.push_back(want.token.token);
      if (!want.accepted) break;
    }
    if (j == g) {
      const sampling::SampledToken want = r.sampler.sample(row(g));
      const sampling::SampledToken got = r.sampler.sampled_on_device(out.draft_sampled[0][g], out.draft_stats[0] + g);
      ASSERT_EQ(got.token, want.token) << "round " << rounds;
      EXPECT_EQ(got.logprobs->chosen, want.logprobs->chosen);
      r.sampler.accept(want.token);
      emitted.push_back(want.token);
    }
    kept += int(j);
    rejected += j < g;
    r.tokens.insert(r.tokens.end(), emitted.begin(), emitted.end());
    runner.settle_round(r, jobs[0], int(emitted.size()), int(j));
    ++rounds;
  }
  EXPECT_GT(kept, 0) << "the schedule was meant to keep drafts";
  EXPECT_GT(rejected, 0);
  runner.release(r);
}

}  // namespace
}  // namespace rowlm
