// The scheduler's rules without a model: requests are plain RequestStates,
// the KV store a fake whose bytes are simple to count, and "running" a step
// means advancing each fed request as the runner and the sampler would. The
// randomized schedules check the rules at every step of many schedules; the
// named cases pin each rule down on its own.

#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

namespace rowlm::engine {
namespace {

constexpr int64_t kVocab = 64;

// A KV store of `capacity` bytes where every position costs `per_token`
// bytes, whatever the step. Rows hold what the test says they hold. A
// reused prefix is one another row holds: it takes no room, and the row
// that reused it holds only the positions it computed past it.
class FakeKv final : public KvAccounting {
 public:
  std::size_t capacity = SIZE_MAX;  // SIZE_MAX: unlimited
  std::size_t per_token = 10;
  std::size_t cached = 0;      // prefix-cache bytes
  int64_t prefix_match = 0;    // what match_prefix finds, at most
  std::map<kv::RowId, std::size_t> rows;
  std::map<kv::RowId, int64_t> reused;

  int64_t match_prefix(int64_t max_reuse) const { return std::min(prefix_match, max_reuse); }
  void attach(kv::RowId row, int64_t reuse) {
    reused[row] = reuse;
    rows[row] = 0;
  }
  void set_computed(kv::RowId row, int64_t computed) {
    rows.at(row) = std::size_t(computed - reused.at(row)) * per_token;
  }
  std::size_t free_bytes() const override {
    if (capacity == SIZE_MAX) return SIZE_MAX;
    std::size_t used = 0;
    for (const auto& [row, bytes] : rows) used += bytes;
    return capacity - std::min(capacity, used);
  }
  std::size_t prefix_cache_bytes() const override { return cached; }
  std::size_t admission_bytes(std::span<const int32_t> /*tokens*/, int64_t max_reuse, int64_t target,
                              int64_t /*step_tokens*/) const override {
    return std::size_t(std::max<int64_t>(0, target - match_prefix(max_reuse))) * per_token;
  }
  std::size_t growth_bytes(kv::RowId row, int64_t target, int64_t /*step_tokens*/) const override {
    const std::size_t full = std::size_t(std::max<int64_t>(0, target - reused.at(row))) * per_token;
    return full - std::min(full, rows.at(row));
  }
};

// A drafter whose storage has room or not, as told.
class FakeDrafter final : public Drafter {
 public:
  bool room = true;
  bool has_room(const RequestState&, int64_t) const override { return room; }
  void propose(std::span<DraftJob>, const TargetView&) override {}
};

struct Spec {
  int prompt = 8;
  float temperature = 0.0f;
  std::optional<int32_t> max_tokens = 16;
};

std::unique_ptr<RequestState> make_state(uint64_t id, const Spec& s) {
  Request req;
  req.sampling.temperature = s.temperature;
  req.sampling.max_tokens = s.max_tokens;
  req.sampling.seed = id;
  std::vector<int32_t> prompt(std::size_t(s.prompt), int32_t(id % kVocab));
  return std::make_unique<RequestState>(id, std::move(req), std::move(prompt), kVocab, nullptr,
                                        std::make_shared<HandleImpl>(id, nullptr), nullptr);
}

// A scheduler over a fake store, with the runner's side of admission and
// preemption played by the fixture.
struct Bench {
  explicit Bench(SchedulerOptions o, bool with_drafter = false)
      : scheduler(o, kv, with_drafter ? &drafter : nullptr) {}

  RequestState& add(const Spec& s = {}) {
    auto r = make_state(next_id++, s);
    RequestState& ref = *r;
    scheduler.enqueue(std::move(r));
    return ref;
  }
  // Attaches like StepRunner::attach: a row holding the reusable prefix.
  std::vector<RequestState*> admit() {
    return scheduler.admit([&](RequestState& r) {
      r.row = next_row++;
      r.computed = kv.match_prefix(r.sequence_length() - 1);
      kv.attach(r.row, r.computed);
    });
  }
  void evict(RequestState& r) {
    kv.rows.erase(r.row);
    r.row = -1;
    r.computed = 0;
  }
  void finish(RequestState& r) {
    kv.rows.erase(r.row);
    r.row = -1;
    r.handle->finish({});
  }
  // Makes a running row decode: its prompt computed and `generated` tokens
  // sampled, the last not yet fed.
  void decoding(RequestState& r, int generated) {
    for (int i = 0; i < generated; ++i) r.tokens.push_back(1);
    r.computed = r.sequence_length() - 1;
    kv.set_computed(r.row, r.computed);
  }

  FakeKv kv;
  FakeDrafter drafter;
  Scheduler scheduler;
  uint64_t next_id = 1;
  kv::RowId next_row = 0;
};

SchedulerOptions options(int max_running = 8, int64_t budget = 32, int draft_tokens = 0, int64_t context = 0) {
  SchedulerOptions o;
  o.max_running = max_running;
  o.token_budget = budget;
  o.draft_tokens = draft_tokens;
  o.context = context;
  return o;
}

std::vector<uint64_t> ids(const std::vector<RequestState*>& rs) {
  std::vector<uint64_t> out;
  for (const RequestState* r : rs) out.push_back(r->id);
  return out;
}

const Feed* feed_of(const StepPlan& plan, const RequestState& r) {
  for (const Feed& f : plan.feeds)
    if (f.request == &r) return &f;
  return nullptr;
}

TEST(Scheduler, AdmitsInArrivalOrderWhileTheyFit) {
  Bench b(options());
  // 45 positions. Each request needs 20 for its whole sequence, and a
  // running row holds room for its whole sequence too, not just its
  // current 8 positions.
  b.kv.capacity = 450;
  b.add({.prompt = 8, .max_tokens = 12});
  b.add({.prompt = 8, .max_tokens = 12});  // 20 <= 45 - 20
  b.add({.prompt = 8, .max_tokens = 12});  // 20 > 45 - 40
  EXPECT_EQ(ids(b.admit()), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(b.scheduler.waiting().size(), 1u);
  EXPECT_TRUE(b.admit().empty());  // nothing changed: still no room
  // The running rows growing does not make room: they held it already.
  b.decoding(*b.scheduler.running().front(), 5);
  EXPECT_TRUE(b.admit().empty());
}

// Prefix-cache bytes are room, once: the store says what a new row takes of
// them (FakeKv: nothing for a prefix a running row holds).
TEST(Scheduler, CachedBytesAreRoomOnce) {
  Bench b(options());
  b.kv.capacity = 300;
  b.add({.prompt = 8, .max_tokens = 12});
  b.add({.prompt = 8, .max_tokens = 12});  // 20 > 30 - 20
  EXPECT_EQ(b.admit().size(), 1u);
  EXPECT_TRUE(b.admit().empty());
  b.kv.cached = 100;  // 10 more positions, evictable on demand
  EXPECT_EQ(b.admit().size(), 1u);
}

TEST(Scheduler, NoRequestOvertakesAnEarlierOne) {
  Bench b(options());
  b.kv.capacity = 300;
  b.add({.prompt = 4, .max_tokens = 4});    // 8 positions
  b.add({.prompt = 20, .max_tokens = 20});  // 40: does not fit beside the first
  b.add({.prompt = 2, .max_tokens = 2});    // 4: would fit, but waits its turn
  EXPECT_EQ(ids(b.admit()), (std::vector<uint64_t>{1}));
  EXPECT_EQ(b.scheduler.waiting().front()->id, 2u);
}

TEST(Scheduler, AnEmptyBatchAlwaysAdmitsItsFirstRequest) {
  Bench b(options(), /*with_drafter=*/true);
  b.kv.capacity = 0;
  b.drafter.room = false;
  b.add();
  b.add();
  // No room anywhere, yet the first runs (and fails later if it cannot fit
  // alone); the second waits.
  EXPECT_EQ(ids(b.admit()), (std::vector<uint64_t>{1}));
  EXPECT_EQ(b.scheduler.running().size(), 1u);
}

TEST(Scheduler, AdmissionAsksTheDrafterForRoom) {
  Bench b(options(), /*with_drafter=*/true);
  b.drafter.room = false;
  b.add();
  b.add();
  EXPECT_EQ(ids(b.admit()), (std::vector<uint64_t>{1}));
  b.drafter.room = true;
  EXPECT_EQ(ids(b.admit()), (std::vector<uint64_t>{2}));
}

TEST(Scheduler, AtMostMaxRunning) {
  Bench b(options(/*max_running=*/3));
  for (int i = 0; i < 5; ++i) b.add();
  EXPECT_EQ(b.admit().size(), 3u);
  EXPECT_EQ(b.scheduler.running().size(), 3u);
  EXPECT_EQ(b.scheduler.waiting().size(), 2u);
}

TEST(Scheduler, ReusedPrefixesCountAsRoom) {
  Bench b(options());
  b.kv.capacity = 350;  // 35 positions; the first row holds room for 20
  b.add({.prompt = 10, .max_tokens = 10});
  b.add({.prompt = 10, .max_tokens = 10});  // 20 > 35 - 20
  EXPECT_EQ(b.admit().size(), 1u);
  EXPECT_TRUE(b.admit().empty());
  b.kv.prefix_match = 8;  // now 12 beyond its reused 8
  const auto admitted = b.admit();
  ASSERT_EQ(admitted.size(), 1u);
  EXPECT_EQ(admitted[0]->computed, 8);  // what attach reused
}

TEST(Scheduler, DecodeRowsFeedTheirTokenWhateverTheBudget) {
  Bench b(options(/*max_running=*/16, /*budget=*/2));
  for (int i = 0; i < 12; ++i) b.add();
  for (RequestState* r : b.admit()) b.decoding(*r, 1 + int(r->id % 3));
  const StepPlan plan = b.scheduler.plan({});
  ASSERT_EQ(plan.feeds.size(), 12u);
  for (const Feed& f : plan.feeds) {
    EXPECT_EQ(f.tokens, 1);
    EXPECT_EQ(f.job, -1);
  }
}

TEST(Scheduler, PrefillChunksTakeWhatTheBudgetLeavesInAdmissionOrder) {
  Bench b(options(/*max_running=*/8, /*budget=*/16));
  RequestState& d1 = b.add();
  RequestState& p1 = b.add({.prompt = 10});
  RequestState& d2 = b.add();
  RequestState& p2 = b.add({.prompt = 10});
  RequestState& p3 = b.add({.prompt = 10});
  b.admit();
  b.decoding(d1, 2);
  b.decoding(d2, 1);
  const StepPlan plan = b.scheduler.plan({});
  // Decode steps first, in admission order, then 16 - 2 = 14 prefill tokens:
  // p1 whole, p2 the rest, p3 none.
  ASSERT_EQ(plan.feeds.size(), 4u);
  EXPECT_EQ(plan.feeds[0].request, &d1);
  EXPECT_EQ(plan.feeds[1].request, &d2);
  EXPECT_EQ(plan.feeds[2].request, &p1);
  EXPECT_EQ(plan.feeds[2].tokens, 10);
  EXPECT_EQ(plan.feeds[3].request, &p2);
  EXPECT_EQ(plan.feeds[3].tokens, 4);
  EXPECT_EQ(feed_of(plan, p3), nullptr);
}

TEST(Scheduler, APromptsLastTokenIsFedLikeADecodeStepUndrafted) {
  Bench b(options(/*max_running=*/8, /*budget=*/4, /*draft_tokens=*/3));
  RequestState& r = b.add({.prompt = 5});
  b.admit();
  r.computed = 4;  // one prompt token left
  std::vector<DraftJob> jobs = b.scheduler.draft_jobs();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].max_tokens, 0);
  const StepPlan plan = b.scheduler.plan(jobs);
  ASSERT_EQ(plan.feeds.size(), 1u);
  EXPECT_EQ(plan.feeds[0].tokens, 1);
  EXPECT_EQ(plan.feeds[0].job, -1);
}

TEST(Scheduler, DraftLimitKeepsRoomForTheTokenAfterTheDrafts) {
  Bench b(options(/*max_running=*/8, /*budget=*/64, /*draft_tokens=*/4, /*context=*/40));
  RequestState& near_max = b.add({.prompt = 8, .max_tokens = 5});
  RequestState& near_end = b.add({.prompt = 30, .max_tokens = 100});
  RequestState& free_row = b.add({.prompt = 8, .max_tokens = 100});
  b.admit();
  b.decoding(near_max, 2);  // 3 more may be emitted: 2 drafts and the token after
  b.decoding(near_end, 7);  // sequence 37 of 40: 2 drafts
  b.decoding(free_row, 1);
  EXPECT_EQ(b.scheduler.draft_limit(near_max), 2);
  EXPECT_EQ(b.scheduler.draft_limit(near_end), 2);
  EXPECT_EQ(b.scheduler.draft_limit(free_row), 4);
  b.decoding(near_max, 2);  // the last token it may emit: no drafts
  EXPECT_EQ(b.scheduler.draft_limit(near_max), 0);
}

// A precision switch at position 12: a row below it stops there (its chunk
// ends at it, its drafts stay below it); a row at or past it is not held.
TEST(Scheduler, RowsStopAtThePrecisionSwitch) {
  SchedulerOptions o = options(/*max_running=*/8, /*budget=*/64, /*draft_tokens=*/4);
  o.precision_switch = 12;
  Bench b(o);
  RequestState& long_prompt = b.add({.prompt = 30});
  RequestState& at_switch = b.add({.prompt = 30});
  RequestState& below = b.add({.prompt = 8, .max_tokens = 100});
  RequestState& near = b.add({.prompt = 8, .max_tokens = 100});
  RequestState& past = b.add({.prompt = 8, .max_tokens = 100});
  b.admit();
  long_prompt.computed = 5;
  at_switch.computed = 12;
  b.decoding(below, 1);  // feeds position 8: drafts at 9..11 at most
  b.decoding(near, 4);   // feeds position 11: no drafts
  b.decoding(past, 10);  // feeds position 17
  EXPECT_EQ(b.scheduler.draft_limit(below), 3);
  EXPECT_EQ(b.scheduler.draft_limit(near), 0);
  EXPECT_EQ(b.scheduler.draft_limit(past), 4);
  const StepPlan plan = b.scheduler.plan({});
  ASSERT_NE(feed_of(plan, long_prompt), nullptr);
  EXPECT_EQ(feed_of(plan, long_prompt)->tokens, 7) << "the chunk ends at the switch";
  ASSERT_NE(feed_of(plan, at_switch), nullptr);
  EXPECT_EQ(feed_of(plan, at_switch)->tokens, 30 - 12) << "past the switch the budget decides";
}

TEST(Scheduler, SampledDraftsDependOnTheRequestAloneGreedyOnesOnTheBudget) {
  // The same two decoding requests beside more and more prefilling ones,
  // under budgets small and large.
  for (int64_t budget : {1, 3, 6, 40}) {
    for (int others = 0; others < 4; ++others) {
      Bench b(options(/*max_running=*/8, budget, /*draft_tokens=*/3));
      RequestState& sampled = b.add({.prompt = 6, .temperature = 0.8f, .max_tokens = 50});
      RequestState& greedy = b.add({.prompt = 6, .temperature = 0.0f, .max_tokens = 50});
      for (int i = 0; i < others; ++i) b.add({.prompt = 30});
      b.admit();
      b.decoding(sampled, 3);
      b.decoding(greedy, 3);
      const std::vector<DraftJob> jobs = b.scheduler.draft_jobs();
      ASSERT_EQ(jobs.size(), std::size_t(2 + others));
      EXPECT_EQ(jobs[0].max_tokens, 3) << "budget " << budget << ", " << others << " others";
      // Greedy: what the budget leaves after both decode tokens and the
      // sampled row's drafts.
      EXPECT_EQ(jobs[1].max_tokens, std::clamp<int64_t>(budget - 2 - 3, 0, 3)) << "budget " << budget;
      for (int i = 0; i < others; ++i) EXPECT_EQ(jobs[std::size_t(2 + i)].max_tokens, 0);
    }
  }
}

TEST(Scheduler, DraftsNotProposedGoToPrefill) {
  Bench b(options(/*max_running=*/8, /*budget=*/10, /*draft_tokens=*/3));
  RequestState& d = b.add({.prompt = 6});
  RequestState& p = b.add({.prompt = 20});
  b.admit();
  b.decoding(d, 1);
  std::vector<DraftJob> jobs = b.scheduler.draft_jobs();
  ASSERT_EQ(jobs[0].max_tokens, 3);
  jobs[0].tokens = {5};  // one draft of three
  const StepPlan plan = b.scheduler.plan(jobs);
  ASSERT_EQ(plan.feeds.size(), 2u);
  EXPECT_EQ(plan.feeds[0].request, &d);
  EXPECT_EQ(plan.feeds[0].job, 0);
  EXPECT_EQ(feed_of(plan, p)->tokens, 10 - 1 - 1);
  jobs[0].tokens.clear();  // none: the decode feed has no job
  const StepPlan undrafted = b.scheduler.plan(jobs);
  EXPECT_EQ(undrafted.feeds[0].job, -1);
  EXPECT_EQ(feed_of(undrafted, p)->tokens, 10 - 1);
}

TEST(Scheduler, PreemptionPicksTheMostRecentlyAdmitted) {
  Bench b(options());
  RequestState& a = b.add();
  RequestState& c = b.add();
  RequestState& d = b.add();
  b.admit();
  Preemption p = b.scheduler.preemption();
  EXPECT_EQ(p.request, &d);
  EXPECT_FALSE(p.alone);
  b.evict(d);
  b.scheduler.requeue(d);
  EXPECT_EQ(b.scheduler.waiting().front().get(), &d);
  EXPECT_EQ(b.scheduler.preemption().request, &c);
  // Resumed, it is the newest again.
  EXPECT_EQ(ids(b.admit()), (std::vector<uint64_t>{d.id}));
  EXPECT_EQ(b.scheduler.preemption().request, &d);
  b.evict(d);
  b.scheduler.requeue(d);
  b.evict(c);
  b.scheduler.requeue(c);
  // The one left alone cannot be helped by preempting.
  p = b.scheduler.preemption();
  EXPECT_EQ(p.request, &a);
  EXPECT_TRUE(p.alone);
  // The last preempted resumes first.
  EXPECT_EQ(ids(b.admit()), (std::vector<uint64_t>{c.id, d.id}));
}

TEST(Scheduler, CancelledAndFinishedRequestsLeave) {
  Bench b(options(/*max_running=*/2));
  RequestState& r1 = b.add();
  RequestState& r2 = b.add();
  RequestState& w1 = b.add();
  RequestState& w2 = b.add();
  b.admit();
  w2.handle->cancel();
  r2.handle->cancel();
  w1.handle->cancel();
  const auto cancelled = b.scheduler.take_cancelled();
  ASSERT_EQ(cancelled.size(), 3u);
  EXPECT_EQ(cancelled[0].get(), &w1);  // waiting first, in order
  EXPECT_EQ(cancelled[1].get(), &w2);
  EXPECT_EQ(cancelled[2].get(), &r2);
  b.finish(r1);
  b.scheduler.remove_finished();
  EXPECT_TRUE(b.scheduler.running().empty());
  EXPECT_TRUE(b.scheduler.waiting().empty());
}

// Random schedules: arrivals, prefill, decoding with drafts, verification
// keeping some of them, finishing at max_tokens, and preemption whenever the
// fake store is over capacity after a step. The rules hold at every step.
TEST(Scheduler, RulesHoldInRandomSchedules) {
  for (uint32_t seed = 1; seed <= 200; ++seed) {
    std::mt19937 rng(seed);
    const int gamma = int(rng() % 4);  // 0: no speculation
    const int64_t context = rng() % 2 ? 0 : 12 + int64_t(rng() % 40);
    const int max_running = 1 + int(rng() % 10);
    const int64_t budget = 1 + int64_t(rng() % 3 == 0 ? rng() % 3 : rng() % 24);  // some far below max_running
    Bench b(options(max_running, budget, gamma, context), /*with_drafter=*/gamma > 0);
    b.kv.capacity = 250 + 10 * std::size_t(rng() % 40);
    b.kv.prefix_match = int64_t(rng() % 6);
    std::set<uint64_t> admitted_ever;
    uint64_t last_first_admission = 0;
    const int requests = 16;
    int arrived = 0;
    for (int step = 0; step < 2000 && (arrived < requests || !b.scheduler.running().empty() ||
                                       !b.scheduler.waiting().empty());
         ++step) {
      while (arrived < requests && rng() % 3 == 0) {
        const int prompt = 1 + int(rng() % std::size_t(context ? std::min<int64_t>(20, context - 1) : 20));
        // Without max_tokens, a request runs to the end of the context.
        std::optional<int32_t> max_tokens = 1 + int32_t(rng() % 12);
        if (context && rng() % 4 == 0) max_tokens.reset();
        b.add({.prompt = prompt, .temperature = rng() % 2 ? 0.7f : 0.0f, .max_tokens = max_tokens});
        ++arrived;
      }
      // Admission: FIFO, and into an empty batch always.
      std::vector<uint64_t> before;
      for (const auto& r : b.scheduler.waiting()) before.push_back(r->id);
      const bool was_empty = b.scheduler.running().empty();
      const auto admitted = ids(b.admit());
      ASSERT_TRUE(std::equal(admitted.begin(), admitted.end(), before.begin())) << "seed " << seed;
      if (was_empty && !before.empty()) {
        ASSERT_FALSE(admitted.empty()) << "seed " << seed;
      }
      ASSERT_LE(int(b.scheduler.running().size()), b.scheduler.options().max_running);
      // Requests are first admitted in arrival (id) order, whatever was
      // preempted in between.
      for (uint64_t id : admitted)
        if (admitted_ever.insert(id).second) {
          ASSERT_GT(id, last_first_admission) << "seed " << seed;
          last_first_admission = id;
        }
      if (b.scheduler.running().empty()) continue;

      // Drafts, as a drafter would propose them: up to max_tokens.
      std::vector<DraftJob> jobs = b.scheduler.draft_jobs();
      ASSERT_EQ(jobs.size(), gamma ? b.scheduler.running().size() : 0u);
      for (DraftJob& job : jobs) {
        const RequestState& r = *job.request;
        // A sampled row takes exactly its γ_row, a function of the request
        // and its progress alone; a greedy one at most that.
        const bool decoding = r.generated_count() > 0 && r.sequence_length() - r.computed == 1;
        const int limit = decoding ? b.scheduler.draft_limit(r) : 0;
        if (r.sampler.params().greedy()) {
          ASSERT_LE(job.max_tokens, limit);
        } else {
          ASSERT_EQ(job.max_tokens, limit);
        }
        job.tokens.assign(rng() % (std::size_t(job.max_tokens) + 1), 3);
      }
      const StepPlan plan = b.scheduler.plan(jobs);

      // Every row with one token left feeds it; nobody feeds twice or past
      // its sequence; decode steps come first.
      std::set<const RequestState*> fed;
      int64_t decode = 0, sampled_drafts = 0, governed = 0;
      bool prefill_seen = false, partial_seen = false;
      for (const Feed& f : plan.feeds) {
        const RequestState& r = *f.request;
        ASSERT_TRUE(fed.insert(&r).second) << "seed " << seed;
        ASSERT_GE(f.tokens, 1);
        ASSERT_LE(r.computed + f.tokens, r.sequence_length());
        const bool one = r.sequence_length() - r.computed == 1;
        if (one) {
          ASSERT_FALSE(prefill_seen) << "a decode step after a prefill chunk, seed " << seed;
          ASSERT_EQ(f.tokens, 1);
          ++decode;
          if (f.job >= 0) {
            const DraftJob& job = jobs[std::size_t(f.job)];
            ASSERT_EQ(job.request, &r);
            ASSERT_FALSE(job.tokens.empty());
            (r.sampler.params().greedy() ? governed : sampled_drafts) += int64_t(job.tokens.size());
          }
        } else {
          // Chunks in admission order: only the last one may be cut short.
          ASSERT_FALSE(partial_seen) << "a chunk after a cut one, seed " << seed;
          prefill_seen = true;
          governed += f.tokens;
          const int64_t need = r.sequence_length() - (r.generated_count() > 0 ? 1 : 0) - r.computed;
          partial_seen = f.tokens < need;
        }
      }
      for (const auto& r : b.scheduler.running())
        if (r->sequence_length() - r->computed == 1) {
          ASSERT_TRUE(fed.count(r.get())) << "a decode step left out, seed " << seed;
        }
      // The budget: prefill chunks and greedy drafts take only what decode
      // tokens and sampled drafts leave.
      ASSERT_LE(governed, std::max<int64_t>(0, budget - decode - sampled_drafts)) << "seed " << seed;
      // Budget left over means every prefilling row got all it needs.
      if (governed < budget - decode - sampled_drafts)
        for (const auto& r : b.scheduler.running())
          if (r->sequence_length() - r->computed > 1) {
            const int64_t need = r->sequence_length() - (r->generated_count() > 0 ? 1 : 0) - r->computed;
            const Feed* f = feed_of(plan, *r);
            ASSERT_TRUE(f && f->tokens == need) << "budget left unused, seed " << seed;
          }

      // Run the step: chunks are computed, logits sample, drafts verify
      // (keeping a random number of them).
      for (const Feed& f : plan.feeds) {
        RequestState& r = *f.request;
        const bool logits = r.computed + f.tokens == r.sequence_length();
        if (f.job >= 0) {
          const int g = int(jobs[std::size_t(f.job)].tokens.size());
          const int emitted = 1 + int(rng() % std::size_t(g + 1));
          for (int i = 0; i < emitted; ++i) r.tokens.push_back(2);
          r.computed += emitted;
        } else {
          r.computed += f.tokens;
          if (logits) r.tokens.push_back(2);
        }
        b.kv.set_computed(r.row, r.computed);
        // Drafts never carry a request past its max_tokens or the context.
        const auto& max_tokens = r.request.sampling.max_tokens;
        ASSERT_TRUE(!max_tokens || r.generated_count() <= *max_tokens) << "seed " << seed;
        ASSERT_TRUE(!context || r.sequence_length() <= context) << "seed " << seed;
        if ((max_tokens && r.generated_count() >= *max_tokens) || (context && r.sequence_length() >= context))
          b.finish(r);
      }
      b.scheduler.remove_finished();

      // Over capacity: preempt the newest until it fits, as the engine does
      // on kv::OutOfBlocks.
      while (!b.scheduler.running().empty() && b.kv.free_bytes() == 0) {
        uint64_t newest = 0;
        for (const auto& r : b.scheduler.running()) newest = std::max(newest, r->admit_order);
        const Preemption p = b.scheduler.preemption();
        ASSERT_EQ(p.request->admit_order, newest);
        ASSERT_EQ(p.alone, b.scheduler.running().size() == 1);
        // Admission held room for every row's whole sequence: only a row
        // admitted alone into an empty batch can outgrow the store.
        ASSERT_TRUE(p.alone) << "a row preempted beside others, seed " << seed;
        if (p.alone) {
          b.finish(*p.request);
          b.scheduler.remove_finished();
        } else {
          b.evict(*p.request);
          b.scheduler.requeue(*p.request);
          ASSERT_EQ(b.scheduler.waiting().front().get(), p.request);
        }
      }
    }
    EXPECT_EQ(int(admitted_ever.size()), requests) << "seed " << seed;
    EXPECT_TRUE(b.scheduler.running().empty() && b.scheduler.waiting().empty()) << "seed " << seed;
  }
}

}  // namespace
}  // namespace rowlm::engine
