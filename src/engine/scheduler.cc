#include "engine/scheduler.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "core/error.h"

namespace rowlm::engine {

namespace {

// One token of the sequence left to compute: fed as a decode step.
bool one_left(const RequestState& r) { return r.sequence_length() - r.computed == 1; }
// Decoding: its one token left is a sampled one.
bool decoding(const RequestState& r) { return one_left(r) && r.generated_count() > 0; }
// Tokens left to prefill: up to the last sampled token, which is decoded.
int64_t prefill_left(const RequestState& r) {
  return r.sequence_length() - (r.generated_count() > 0 ? 1 : 0) - r.computed;
}

}  // namespace

Scheduler::Scheduler(SchedulerOptions options, const KvAccounting& kv, const Drafter* drafter)
    : opt_(options), kv_(kv), drafter_(drafter) {
  ROWLM_CHECK(opt_.max_running >= 1 && opt_.token_budget >= 1 && opt_.draft_tokens >= 0, "bad scheduler options");
}

void Scheduler::enqueue(std::unique_ptr<RequestState> request) { waiting_.push_back(std::move(request)); }

std::vector<std::unique_ptr<RequestState>> Scheduler::take_cancelled() {
  std::vector<std::unique_ptr<RequestState>> out;
  auto cancelled = [](const std::unique_ptr<RequestState>& r) { return r->handle->cancel_requested(); };
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (cancelled(*it)) {
      out.push_back(std::move(*it));
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = running_.begin(); it != running_.end();) {
    if (cancelled(*it)) {
      out.push_back(std::move(*it));
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

std::vector<std::unique_ptr<RequestState>> Scheduler::take_all() {
  std::vector<std::unique_ptr<RequestState>> out;
  for (auto& r : waiting_) out.push_back(std::move(r));
  for (auto& r : running_) out.push_back(std::move(r));
  waiting_.clear();
  running_.clear();
  return out;
}

void Scheduler::remove_finished() {
  running_.remove_if([](const std::unique_ptr<RequestState>& r) { return r->handle->done(); });
}

bool Scheduler::fits(const RequestState& r) const {
  const int64_t target = opt_.admission_target(r);
  // A swapped-out request restores its own blocks: nothing shared.
  const int64_t max_reuse = opt_.prefix_cache && !r.swapped ? int64_t(r.tokens.size()) - 1 : 0;
  std::vector<HeldRow> held;
  for (const auto& other : running_) held.push_back({other->row, opt_.admission_target(*other)});
  if (!admission_fits(kv_, r.tokens, max_reuse, target, held, opt_.step_tokens())) return false;
  return !drafter_ || drafter_->has_room(r, target);
}

std::vector<RequestState*> Scheduler::admit(const std::function<void(RequestState&)>& attach) {
  std::vector<RequestState*> admitted;
  while (!waiting_.empty() && int(running_.size()) < opt_.max_running) {
    RequestState& r = *waiting_.front();
    if (!running_.empty() && !fits(r)) break;
    attach(r);
    r.admit_order = ++admit_counter_;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    admitted.push_back(&r);
  }
  return admitted;
}

int Scheduler::draft_limit(const RequestState& r) const {
  int64_t n = opt_.draft_tokens;
  if (const auto& max_tokens = r.request.sampling.max_tokens)
    n = std::min<int64_t>(n, *max_tokens - r.generated_count() - 1);
  if (opt_.context > 0) n = std::min(n, opt_.context - r.sequence_length() - 1);
  // The fed token sits at r.computed, its drafts after it.
  if (r.computed < opt_.precision_switch) n = std::min(n, opt_.precision_switch - 1 - r.computed);
  return int(std::max<int64_t>(0, n));
}

std::vector<DraftJob> Scheduler::draft_jobs() const {
  std::vector<DraftJob> jobs;
  if (opt_.draft_tokens == 0) return jobs;
  int64_t budget = opt_.token_budget;
  for (const auto& r : running_) budget -= one_left(*r);
  // Sampled rows first: their γ_row does not depend on the budget.
  for (const auto& r : running_) {
    DraftJob& job = jobs.emplace_back();
    job.request = r.get();
    if (decoding(*r) && !r->sampler.params().greedy()) job.max_tokens = draft_limit(*r);
    budget -= job.max_tokens;
  }
  for (DraftJob& job : jobs) {
    if (!decoding(*job.request) || !job.request->sampler.params().greedy()) continue;
    job.max_tokens = int(std::clamp<int64_t>(budget, 0, draft_limit(*job.request)));
    budget -= job.max_tokens;
  }
  return jobs;
}

StepPlan Scheduler::plan(std::span<const DraftJob> jobs) const {
  ROWLM_CHECK(jobs.empty() || jobs.size() == running_.size(), "one draft job per running row");
  int64_t budget = opt_.token_budget;
  for (const auto& r : running_) budget -= one_left(*r);
  for (const DraftJob& job : jobs) budget -= int64_t(job.tokens.size());
  StepPlan plan;
  int index = 0;
  for (const auto& r : running_) {
    const DraftJob* job = jobs.empty() ? nullptr : &jobs[std::size_t(index)];
    ROWLM_CHECK(!job || job->request == r.get(), "draft jobs out of admission order");
    if (one_left(*r)) plan.feeds.push_back(Feed{r.get(), 1, job && !job->tokens.empty() ? index : -1});
    ++index;
  }
  for (const auto& r : running_) {
    int64_t need = prefill_left(*r);
    if (r->computed < opt_.precision_switch) need = std::min(need, opt_.precision_switch - r->computed);
    if (!one_left(*r) && need > 0 && budget > 0) {
      const int64_t n = std::min(need, budget);
      plan.feeds.push_back(Feed{r.get(), n, -1});
      budget -= n;
    }
  }
  return plan;
}

Preemption Scheduler::preemption() const {
  ROWLM_CHECK(!running_.empty(), "preemption with nothing running");
  const auto newest = std::max_element(running_.begin(), running_.end(), [](const auto& a, const auto& b) {
    return a->admit_order < b->admit_order;
  });
  return Preemption{newest->get(), running_.size() == 1};
}

void Scheduler::requeue(RequestState& r) {
  const auto it = std::find_if(running_.begin(), running_.end(), [&](const auto& p) { return p.get() == &r; });
  ROWLM_CHECK(it != running_.end(), "requeue of a request that is not running");
  ROWLM_CHECK(r.row < 0, "requeue of a request that still holds KV");
  waiting_.push_front(std::move(*it));
  running_.erase(it);
}

}  // namespace rowlm::engine
