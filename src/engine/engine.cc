// The engine: a scheduler thread (or the caller, in manual mode) running
// iteration-level continuous batching over one paged KV cache.
//
// Each step: drop cancelled requests; admit waiting ones (FIFO) while the
// pool can hold their projected bytes, reusing cached prompt prefixes; then
// flatten one token of every decoding row and chunks of prefilling rows into
// one forward pass under the token budget; sample the rows whose logits
// were computed; stream their text; retire finished rows (publishing their
// blocks to the prefix cache). If the pool runs out, the most recently
// admitted row is preempted: its blocks are released, its tokens kept, and
// it is recomputed when it resumes. Kernels and samplers are batch
// invariant, so none of this changes any request's output.
//
// Speculative decoding (options.draft) runs inside the same step: a drafter
// proposes up to γ tokens after each decoding row's last token, the row
// feeds that token and its drafts (logits for all) into the one forward
// beside the other rows' prefill chunks, and the drafts are verified
// (sampling::verify_draft_token: exact match when greedy, the lossless
// rejection scheme when sampling). The target's KV keeps what was accepted
// through a speculative round per row (kv::KvCache::rollback_round).

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <list>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "engine/drafter.h"
#include "engine/kv_room.h"
#include "engine/output.h"
#include "engine/request_handle.h"
#include "engine/request_state.h"
#include "engine/setup.h"
#include "engine/stats.h"
#include "engine/step_runner.h"
#include "engine/verify.h"
#include "tokenizer/tokenizer.h"

namespace rowlm {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Error: return "error";
  }
  return "?";
}

namespace engine {
namespace {

// Wakes the scheduler thread; shared with handles so a late cancel() after
// the engine is gone touches nothing freed.
struct Signal {
  std::mutex mu;
  std::condition_variable cv;
  bool pending = false;
  void notify() {
    {
      std::lock_guard lock(mu);
      pending = true;
    }
    cv.notify_all();
  }
};

class EngineImpl final : public Engine {
 public:
  // `model` runs on `backend`; model_dir (if set) supplies the tokenizer.
  EngineImpl(const EngineOptions& options, std::unique_ptr<Backend> backend, std::unique_ptr<Model> model);
  ~EngineImpl() override { shutdown(); }

  std::shared_ptr<RequestHandle> submit(Request request,
                                        std::function<void(const TokenEvent&)> on_token) override;
  bool step() override;
  void run_until_idle() override;
  const ModelInfo& model_info() const override { return model_->info(); }
  bool has_tokenizer() const override { return tokenizer_.has_value(); }
  const Tokenizer& tokenizer() const override {
    if (!tokenizer_) throw Error("engine: " + opt_.model_dir + " has no tokenizer.json");
    return *tokenizer_;
  }
  EngineStats stats() const override { return stats_.snapshot(); }
  void shutdown() override;

 private:
  void loop();
  bool step_locked_out();  // one scheduler step; the scheduler's own state needs no lock
  void take_submissions();
  void drop_cancelled();
  void admit();
  void preempt(RequestState& r);
  bool make_room(const kv::OutOfBlocks& e);
  void finish(RequestState& r, FinishReason reason, std::string error = {});
  int draft_limit(const RequestState& r) const;
  int64_t step_tokens() const { return opt_.token_budget + (runner_->drafter() ? opt_.draft_tokens : 0); }
  void update_gauges();

  EngineOptions opt_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::optional<Tokenizer> tokenizer_;
  Stats stats_;
  std::optional<StepRunner> runner_;
  std::optional<Output> output_;

  // Submissions cross threads through this queue; everything below it is
  // the scheduler's own.
  mutable std::mutex submit_mu_;
  std::deque<std::unique_ptr<RequestState>> incoming_;
  bool closed_ = false;
  std::shared_ptr<Signal> signal_ = std::make_shared<Signal>();
  std::thread thread_;
  std::atomic<uint64_t> next_id_{1};

  std::deque<std::unique_ptr<RequestState>> waiting_;
  std::list<std::unique_ptr<RequestState>> running_;  // in admission order
  uint64_t admit_counter_ = 0;
};

EngineImpl::EngineImpl(const EngineOptions& options, std::unique_ptr<Backend> backend,
                       std::unique_ptr<Model> model)
    : opt_(options), backend_(std::move(backend)), model_(std::move(model)) {
  check_options(opt_);
  std::unique_ptr<Model> draft_model = load_draft_model(opt_, *backend_, model_->info());
  if (!opt_.model_dir.empty() && std::filesystem::exists(std::filesystem::path(opt_.model_dir) / "tokenizer.json"))
    tokenizer_.emplace(Tokenizer::load(opt_.model_dir));

  kv::CacheOptions copt = cache_options(opt_, *model_);
  stats_.update([&](EngineStats& s) { s.kv_capacity_bytes = copt.capacity_bytes; });  // the draft's share included
  std::unique_ptr<Drafter> drafter = make_drafter(opt_, std::move(draft_model), *model_, copt);
  runner_.emplace(*model_, std::make_unique<kv::KvCache>(copt), std::move(drafter), opt_.prefix_cache);
  output_.emplace(model_->info(), tokenizer_ ? &*tokenizer_ : nullptr, stats_);
  if (opt_.background) thread_ = std::thread([this] { loop(); });
}

std::shared_ptr<RequestHandle> EngineImpl::submit(Request request,
                                                  std::function<void(const TokenEvent&)> on_token) {
  const ModelInfo& info = model_->info();
  if (request.prompt_ids.empty() && !tokenizer_)
    throw Error("request: " + opt_.model_dir + " has no tokenizer.json; give the prompt as token ids");
  if (!tokenizer_ && !request.sampling.stop.empty())
    throw Error("request: stop strings need a tokenizer, and " + opt_.model_dir + " has none");
  std::vector<int32_t> prompt = request.prompt_ids.empty()
                                    ? tokenizer_->encode(request.prompt, request.add_special_tokens)
                                    : request.prompt_ids;
  if (prompt.empty()) throw Error("request: the prompt is empty");
  for (int32_t id : prompt)
    if (id < 0 || id >= info.vocab_size)
      throw Error("request: prompt token id " + std::to_string(id) + " is outside the vocabulary (size " +
                  std::to_string(info.vocab_size) + ")");
  if (info.max_position > 0 && int64_t(prompt.size()) >= info.max_position)
    throw Error("request: the prompt has " + std::to_string(prompt.size()) +
                " tokens; the model's context is " + std::to_string(info.max_position));
  request.sampling.validate(info.vocab_size);
  const uint64_t id = next_id_++;
  std::weak_ptr<Signal> weak = signal_;
  auto handle = std::make_shared<HandleImpl>(id, [weak] {
    if (auto s = weak.lock()) s->notify();
  });
  auto state = std::make_unique<RequestState>(id, std::move(request), std::move(prompt), info.vocab_size,
                                              tokenizer_ ? &*tokenizer_ : nullptr, handle, std::move(on_token));
  {
    std::lock_guard lock(submit_mu_);
    if (closed_) throw Error("engine: shut down");
    if (int64_t(incoming_.size()) + stats().waiting >= opt_.max_waiting)
      throw QueueFull("engine: the queue is full (" + std::to_string(opt_.max_waiting) + " waiting requests)");
    incoming_.push_back(std::move(state));
  }
  signal_->notify();
  return handle;
}

void EngineImpl::take_submissions() {
  std::lock_guard lock(submit_mu_);
  while (!incoming_.empty()) {
    waiting_.push_back(std::move(incoming_.front()));
    incoming_.pop_front();
  }
}

// Releases the request's KV (publishing what it computed), then completes
// its result and handle. The caller removes it from the schedule.
void EngineImpl::finish(RequestState& r, FinishReason reason, std::string error) {
  runner_->release(r);
  output_->finish(r, reason, std::move(error));
}

void EngineImpl::drop_cancelled() {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if ((*it)->handle->cancel_requested()) {
      finish(**it, FinishReason::Cancelled);
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = running_.begin(); it != running_.end();) {
    if ((*it)->handle->cancel_requested()) {
      finish(**it, FinishReason::Cancelled);
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
}

void EngineImpl::admit() {
  while (!waiting_.empty() && int(running_.size()) < opt_.max_running) {
    RequestState& r = *waiting_.front();
    const std::vector<int32_t>& seq = r.tokens;
    const int64_t limit = model_->info().max_position > 0 ? model_->info().max_position : INT64_MAX;
    const int64_t max_new = r.request.sampling.max_tokens ? *r.request.sampling.max_tokens : limit;
    const int64_t target = std::min<int64_t>(limit, r.prompt_length + max_new);
    const KvAccounting& store = runner_->accounting();
    const int64_t reusable = opt_.prefix_cache ? store.match_prefix(seq, int64_t(seq.size()) - 1) : 0;
    // A request admitted into an empty batch always runs (it fails only if
    // it cannot fit alone); otherwise it waits until the rows admitted before
    // it leave room (kv_room.h), in the draft's cache too.
    if (!running_.empty()) {
      std::vector<std::pair<kv::RowId, int64_t>> held;
      for (const auto& other : running_) held.emplace_back(other->row, other->sequence_length());
      if (admission_need(store, target, reusable, step_tokens()) > admission_room(store, held, step_tokens()))
        break;
      if (runner_->drafter() && !runner_->drafter()->has_room(r, target)) break;
    }
    runner_->attach(r);
    output_->admitted(r);
    r.admit_order = ++admit_counter_;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
}

void EngineImpl::preempt(RequestState& r) {
  runner_->evict(r);
  output_->preempted(r);
}

// Drafts a decoding row may take: at most γ, and no more than it can still
// emit (its max_tokens, the context) with the token that follows them.
int EngineImpl::draft_limit(const RequestState& r) const {
  int64_t n = opt_.draft_tokens;
  if (const auto& max_tokens = r.request.sampling.max_tokens) n = std::min<int64_t>(n, *max_tokens - r.generated_count() - 1);
  if (const int64_t limit = model_->info().max_position; limit > 0) n = std::min(n, limit - r.sequence_length() - 1);
  return int(std::max<int64_t>(0, n));
}

// Out of KV blocks: preempts the most recently admitted row so the step can
// be planned again. A row alone that cannot fit fails; false then.
bool EngineImpl::make_room(const kv::OutOfBlocks& e) {
  auto victim = std::max_element(running_.begin(), running_.end(),
                                 [](const auto& a, const auto& b) { return a->admit_order < b->admit_order; });
  if (running_.size() == 1) {
    finish(**victim, FinishReason::Error, std::string("the KV cache cannot hold this request: ") + e.what());
    running_.erase(victim);
    return false;
  }
  preempt(**victim);
  waiting_.push_front(std::move(*victim));
  running_.erase(victim);
  return true;
}

bool EngineImpl::step_locked_out() {
  take_submissions();
  drop_cancelled();
  admit();
  update_gauges();
  if (running_.empty()) return !waiting_.empty();

  for (;;) {
    // Plan: every decoding row feeds its last sampled token, and with a
    // drafter up to γ drafts after it; prefill chunks take what the token
    // budget leaves, in admission order. A row resumed after preemption
    // recomputes up to that last token and then decodes it like any other
    // row: with sampling, which positions are drafted decides what is
    // emitted, so it must depend on the request alone, never on the
    // schedule. A row with one prompt token left feeds it like a decode
    // step, undrafted.
    auto one_left = [](const RequestState& r) { return r.sequence_length() - r.computed == 1; };
    auto decoding = [&](const RequestState& r) { return one_left(r) && r.generated_count() > 0; };
    auto prefill_left = [](const RequestState& r) {
      return r.sequence_length() - (r.generated_count() > 0 ? 1 : 0) - r.computed;
    };
    int64_t budget = opt_.token_budget;
    for (const auto& r : running_) budget -= one_left(*r);
    std::vector<DraftJob> jobs;  // one per running row, in running_ order
    if (runner_->drafter()) {
      // A sampled row's draft length depends on nothing but the request
      // (which positions were drafted is part of what decides a sampled
      // output); a greedy row's output does not depend on it, so greedy rows
      // take what the budget leaves.
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
      try {
        runner_->propose(jobs);
      } catch (const kv::OutOfBlocks& e) {
        if (!make_room(e)) return true;
        continue;
      }
      for (const DraftJob& job : jobs) budget += job.max_tokens - int64_t(job.tokens.size());
    }

    StepPlan plan;
    int index = 0;
    for (auto& r : running_) {
      const DraftJob* job = jobs.empty() ? nullptr : &jobs[std::size_t(index)];
      if (one_left(*r)) plan.feeds.push_back(Feed{r.get(), 1, job && !job->tokens.empty() ? index : -1});
      ++index;
    }
    for (auto& r : running_) {
      const int64_t need = prefill_left(*r);
      if (!one_left(*r) && need > 0 && budget > 0) {
        const int64_t n = std::min(need, budget);
        plan.feeds.push_back(Feed{r.get(), n, -1});
        budget -= n;
      }
    }

    StepLogits out;
    try {
      out = runner_->forward(plan, jobs);
    } catch (const kv::OutOfBlocks& e) {
      if (!make_room(e)) return true;
      continue;
    } catch (const std::exception& e) {
      // Not the requests' fault, but nothing else can be done with them.
      for (auto& r : running_) finish(*r, FinishReason::Error, e.what());
      running_.clear();
      return true;
    }
    stats_.update([](EngineStats& s) { ++s.steps; });
    for (std::size_t i = 0; i < plan.feeds.size(); ++i) {
      const Feed& f = plan.feeds[i];
      RequestState& r = *f.request;
      const float* logits = out.row(i);
      if (f.job >= 0) {
        const DraftJob& job = jobs[std::size_t(f.job)];
        Verdict v = verify(*output_, r, job, logits);
        runner_->settle_round(r, job, v.emitted, v.accepted);
        if (v.end) finish(r, *v.end, std::move(v.error));
        continue;
      }
      if (!logits) continue;
      try {
        if (const auto end = output_->sample(r, logits)) finish(r, *end);
      } catch (const std::exception& e) {
        if (!r.handle->done()) finish(r, FinishReason::Error, e.what());
      }
    }
    for (auto it = running_.begin(); it != running_.end();) {
      if ((*it)->handle->done()) {
        it = running_.erase(it);
      } else {
        runner_->end_step(**it);
        ++it;
      }
    }
    update_gauges();
    return true;
  }
}

bool EngineImpl::step() {
  if (opt_.background) throw Error("engine: step() is for engines created with background = false");
  return step_locked_out();
}

void EngineImpl::run_until_idle() {
  if (opt_.background) throw Error("engine: run_until_idle() is for engines created with background = false");
  while (step_locked_out()) {
  }
}

void EngineImpl::loop() {
  for (;;) {
    bool more = false;
    {
      std::lock_guard lock(submit_mu_);
      if (closed_) break;
    }
    more = step_locked_out();
    if (!more) {
      std::unique_lock lock(signal_->mu);
      signal_->cv.wait(lock, [&] { return signal_->pending; });
      signal_->pending = false;
    }
  }
}

void EngineImpl::update_gauges() {
  const std::size_t used = runner_->used_bytes(), cached = runner_->prefix_cache_bytes();
  stats_.update([&](EngineStats& s) {
    s.running = int64_t(running_.size());
    s.waiting = int64_t(waiting_.size());
    s.kv_used_bytes = used;
    s.prefix_cache_bytes = cached;
  });
}

void EngineImpl::shutdown() {
  {
    std::lock_guard lock(submit_mu_);
    if (closed_ && !thread_.joinable() && incoming_.empty() && waiting_.empty() && running_.empty()) return;
    closed_ = true;
  }
  signal_->notify();
  if (thread_.joinable()) thread_.join();
  take_submissions();
  for (auto& r : waiting_) finish(*r, FinishReason::Cancelled);
  for (auto& r : running_) finish(*r, FinishReason::Cancelled);
  waiting_.clear();
  running_.clear();
}

}  // namespace

}  // namespace engine

std::unique_ptr<Engine> Engine::create(const EngineOptions& options) {
  if (options.model_dir.empty()) throw Error("engine: no model directory given");
  if (options.threads < 0) throw Error("engine: threads must not be negative");
  auto backend = make_cpu_backend(options.threads, options.matmul_precision);
  auto model = load_model(options.model_dir, *backend);
  return std::make_unique<engine::EngineImpl>(options, std::move(backend), std::move(model));
}

std::unique_ptr<Engine> Engine::create(const EngineOptions& options, std::unique_ptr<Backend> backend,
                                       std::unique_ptr<Model> model) {
  if (!backend || !model) throw Error("engine: a backend and a model are needed");
  return std::make_unique<engine::EngineImpl>(options, std::move(backend), std::move(model));
}

}  // namespace rowlm
