// The engine: a scheduler thread (or the caller, in manual mode) running
// iteration-level continuous batching over one paged KV cache. This file is
// the facade: the submission queue crossing threads, the thread and its
// wake-up signal, handles, and each step's wiring of the units that do the
// work:
//
//   scheduler.h    admission, the token budget, draft lengths, preemption:
//                  plans as data, over KV accounting (kv_room.h)
//   step_runner.h  carries a plan out on the model, the KV cache and the
//                  drafter: rows attached and released, the forward pass,
//                  speculative rounds
//   output.h       emitting tokens (sampling, text, stops), finishing
//                  requests, counters (stats.h); verify.h checks drafts
//   validate_request.h  what a request must satisfy to be queued
//   setup.h        from EngineOptions to the cache's options and the drafter
//
// Each step: drop cancelled requests; admit waiting ones (FIFO) while the
// pool can hold their projected bytes, reusing cached prompt prefixes; then
// flatten one token of every decoding row and chunks of prefilling rows into
// one forward pass under the token budget; sample the rows whose logits
// were computed; stream their text; retire finished rows (publishing their
// blocks to the prefix cache). If the pool runs out, the most recently
// admitted row is preempted: its blocks are copied to host memory and
// released (or only released, when the prefix cache holds it or swapping
// is off), its tokens kept, and it is restored (or recomputed) when it
// resumes. Kernels and samplers are batch
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
#include <atomic>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <mutex>
#include <optional>
#include <span>
#include <thread>

#include "backend/factory/make_backend.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/model_files.h"
#include "engine/output.h"
#include "engine/request_handle.h"
#include "engine/request_state.h"
#include "engine/scheduler.h"
#include "engine/setup.h"
#include "engine/stats.h"
#include "engine/step_runner.h"
#include "constrain/json_constraint.h"
#include "engine/validate_request.h"
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

// Threads that sample a step's rows. On the CPU they are the backend's own
// threads (idle while rows are sampled). A GPU backend drives the device from
// one host thread, but a step's rows still come to the host to be sampled:
// 64 rows of a 262,144-entry vocabulary are 64 scans, so they get the host's
// cores (up to 16; a row's token never depends on which thread samples it).
int sampling_threads(const Backend& backend) {
  if (backend.device().is_host()) return backend.host_threads();
  return int(std::clamp(std::thread::hardware_concurrency(), 1u, 16u));
}

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
  EngineStats stats() const override;
  void shutdown() override;

 private:
  void loop();
  bool step_locked_out();  // one scheduler step; the scheduler's own state needs no lock
  void take_submissions();
  void finish(RequestState& r, FinishReason reason, std::string error = {});
  bool make_room(const kv::OutOfBlocks& e);
  void fail_running(const std::string& error);
  void apply_logits(const StepPlan& plan, std::span<DraftJob> jobs, const StepLogits& out);
  void update_gauges();

  EngineOptions opt_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::optional<Tokenizer> tokenizer_;
  // Structured outputs' token table and mask cache, when there is a tokenizer.
  std::optional<constrain::ConstraintFactory> constraints_;
  RequestLimits limits_;
  Stats stats_;
  // The units, built in the constructor; the scheduler thread's own.
  std::optional<StepRunner> runner_;
  std::optional<Scheduler> scheduler_;
  std::optional<Output> output_;
  // Samples a step's rows in parallel (apply_logits); idle during forwards.
  ThreadPool sampling_pool_;

  // Submissions cross threads through this queue.
  mutable std::mutex submit_mu_;
  std::deque<std::unique_ptr<RequestState>> incoming_;
  bool closed_ = false;
  std::shared_ptr<Signal> signal_ = std::make_shared<Signal>();
  std::thread thread_;
  std::atomic<uint64_t> next_id_{1};
};

EngineImpl::EngineImpl(const EngineOptions& options, std::unique_ptr<Backend> backend,
                       std::unique_ptr<Model> model)
    : opt_(options), backend_(std::move(backend)), model_(std::move(model)),
      sampling_pool_(sampling_threads(*backend_)) {
  check_options(opt_);
  DraftSource draft = load_draft(opt_, *backend_, *model_);
  if (!opt_.model_dir.empty()) tokenizer_ = load_model_tokenizer(opt_.model_dir);
  const ModelInfo& info = model_->info();
  limits_ = RequestLimits{info.vocab_size, info.max_position, tokenizer_ ? &*tokenizer_ : nullptr};
  if (tokenizer_) constraints_.emplace(*tokenizer_, info.vocab_size);

  kv::CacheOptions copt = cache_options(opt_, *model_, *backend_);
  stats_.update([&](EngineStats& s) { s.kv_capacity_bytes = copt.capacity_bytes; });  // the draft's share included
  std::unique_ptr<Drafter> drafter = make_drafter(opt_, std::move(draft), *backend_, *model_, copt);
  const bool speculating = drafter != nullptr;
  // Swapped-out rows may hold as many host bytes as the pool holds KV.
  const std::size_t swap_limit = !opt_.kv_swap ? 0 : copt.capacity_bytes ? copt.capacity_bytes : SIZE_MAX;
  runner_.emplace(*model_, std::make_unique<kv::KvCache>(copt, *backend_), std::move(drafter), opt_.prefix_cache,
                  swap_limit);

  SchedulerOptions sopt;
  sopt.max_running = opt_.max_running;
  sopt.token_budget = opt_.token_budget;
  sopt.draft_tokens = speculating ? opt_.draft_tokens : 0;
  sopt.context = info.max_position;
  sopt.prefix_cache = opt_.prefix_cache;
  sopt.overcommit = opt_.kv_overcommit;
  sopt.precision_switch = copt.precision_switch ? copt.precision_switch->after : -1;
  scheduler_.emplace(sopt, runner_->accounting(), runner_->drafter());
  output_.emplace(info, limits_.tokenizer, stats_);
  if (opt_.background) thread_ = std::thread([this] { loop(); });
}

std::shared_ptr<RequestHandle> EngineImpl::submit(Request request,
                                                  std::function<void(const TokenEvent&)> on_token) {
  std::vector<int32_t> prompt = validate_request(request, limits_);
  const uint64_t id = next_id_++;
  std::weak_ptr<Signal> weak = signal_;
  auto handle = std::make_shared<HandleImpl>(id, [weak] {
    if (auto s = weak.lock()) s->notify();
  });
  auto state = std::make_unique<RequestState>(id, std::move(request), std::move(prompt), limits_.vocab_size,
                                              limits_.tokenizer, handle, std::move(on_token));
  if (const auto& grammar = state->request.response_format) {
    // What ends the request may end the JSON value, nothing else may.
    std::vector<int32_t> ends = state->request.sampling.stop_token_ids;
    if (!state->request.ignore_eos)
      ends.insert(ends.end(), model_->info().eos_token_ids.begin(), model_->info().eos_token_ids.end());
    state->sampler.set_constraint(constraints_->make(grammar, std::move(ends)));
  }
  if (const auto& rules = state->request.tool_calls) {
    try {
      state->sampler.set_constraint(constraints_->make(*rules));
    } catch (const Error& e) {
      throw InvalidRequest("tool_calls", e.what());
    }
  }
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
    scheduler_->enqueue(std::move(incoming_.front()));
    incoming_.pop_front();
  }
}

// Releases the request's KV (publishing what it computed), then completes
// its result and handle. The caller removes it from the schedule.
void EngineImpl::finish(RequestState& r, FinishReason reason, std::string error) {
  runner_->release(r);
  output_->finish(r, reason, std::move(error));
}

// Out of KV blocks: preempts the most recently admitted row so the step can
// be planned again. A row alone that cannot fit fails; false then.
bool EngineImpl::make_room(const kv::OutOfBlocks& e) {
  const Preemption p = scheduler_->preemption();
  if (p.alone) {
    finish(*p.request, FinishReason::Error, std::string("the KV cache cannot hold this request: ") + e.what());
    scheduler_->remove_finished();
    return false;
  }
  if (runner_->evict(*p.request)) stats_.update([](EngineStats& s) { ++s.kv_swaps; });
  output_->preempted(*p.request);
  scheduler_->requeue(*p.request);
  return true;
}

// A forward pass failed for a reason other than room: not the requests'
// fault, but nothing else can be done with them.
void EngineImpl::fail_running(const std::string& error) {
  for (const auto& r : scheduler_->running()) finish(*r, FinishReason::Error, error);
  scheduler_->remove_finished();
}

bool EngineImpl::step_locked_out() {
  const auto step_start = Clock::now();
  take_submissions();
  for (const auto& r : scheduler_->take_cancelled()) finish(*r, FinishReason::Cancelled);
  scheduler_->admit([this](RequestState& r) {
    runner_->attach(r);
    output_->admitted(r);
  });
  update_gauges();
  if (scheduler_->running().empty()) return !scheduler_->waiting().empty();

  for (;;) {
    // Plan (scheduler.h), draft, plan the feeds the drafts leave room for,
    // forward; out of KV blocks, preempt and plan again.
    std::vector<DraftJob> jobs = scheduler_->draft_jobs();
    if (!jobs.empty()) {
      try {
        runner_->propose(jobs);
      } catch (const kv::OutOfBlocks& e) {
        if (!make_room(e)) return true;
        continue;
      }
    }
    const StepPlan plan = scheduler_->plan(jobs);
    StepLogits out;
    const auto forward_start = Clock::now();
    try {
      out = runner_->forward(plan, jobs);
    } catch (const kv::OutOfBlocks& e) {
      if (!make_room(e)) return true;
      continue;
    } catch (const std::exception& e) {
      fail_running(e.what());
      return true;
    }
    const auto forward_end = Clock::now();
    const bool decode_only = jobs.empty() && std::all_of(plan.feeds.begin(), plan.feeds.end(),
                                                         [](const Feed& f) { return f.tokens == 1; });
    apply_logits(plan, jobs, out);
    scheduler_->remove_finished();
    for (const auto& r : scheduler_->running()) runner_->end_step(*r);
    update_gauges();
    const auto step_end = Clock::now();
    stats_.update([&](EngineStats& s) {
      ++s.steps;
      s.step_seconds += std::chrono::duration<double>(step_end - step_start).count();
      s.forward_seconds += std::chrono::duration<double>(forward_end - forward_start).count();
      if (decode_only) {
        ++s.decode_steps;
        s.decode_step_seconds += std::chrono::duration<double>(step_end - step_start).count();
        s.decode_forward_seconds += std::chrono::duration<double>(forward_end - forward_start).count();
      }
    });
    return true;
  }
}

// The step's logits to its rows: a drafting row's drafts are verified and
// its round settled; any other row whose logits were computed samples its
// next token. Rows whose token ends them finish.
void EngineImpl::apply_logits(const StepPlan& plan, std::span<DraftJob> jobs, const StepLogits& out) {
  // A plain row's token depends on its own logits and sampler alone, so the
  // rows are sampled in parallel (a 262,144-entry row is a scan each);
  // emitting stays on this thread, in feed order (it detokenizes, runs the
  // request's callback and may finish the request).
  const std::size_t vocab = std::size_t(output_->vocab_size());
  std::vector<std::optional<sampling::SampledToken>> sampled(plan.feeds.size());
  std::vector<std::string> sample_errors(plan.feeds.size());
  sampling_pool_.run(int64_t(plan.feeds.size()), [&](int64_t i) {
    const float* logits = out.row(std::size_t(i));
    const std::optional<int32_t>& code = out.argmax[std::size_t(i)];
    if (plan.feeds[std::size_t(i)].job >= 0 || (!logits && !code)) return;
    const sampling::Sampler& sampler = plan.feeds[std::size_t(i)].request->sampler;
    const std::optional<int32_t>& on_device = out.sampled[std::size_t(i)];
    try {
      sampled[std::size_t(i)] = on_device ? sampler.sampled_on_device(*on_device, out.logprob_stats[std::size_t(i)])
                                : code    ? sampler.sample_argmax(*code)
                                          : sampler.sample(std::span(logits, vocab));
    } catch (const std::exception& e) {
      sample_errors[std::size_t(i)] = e.what();
    }
  });
  for (std::size_t i = 0; i < plan.feeds.size(); ++i) {
    const Feed& f = plan.feeds[i];
    RequestState& r = *f.request;
    const float* logits = out.row(i);
    if (f.job >= 0) {
      const DraftJob& job = jobs[std::size_t(f.job)];
      const int32_t* codes = out.draft_argmax[i];
      const int32_t* verdicts = out.draft_sampled[i];
      Verdict v = codes      ? verify(*output_, r, job, codes)
                  : verdicts ? verify_on_device(*output_, r, job, verdicts, out.draft_stats[i])
                             : verify(*output_, r, job, logits);
      runner_->settle_round(r, job, v.emitted, v.accepted);
      if (v.end) finish(r, *v.end, std::move(v.error));
      continue;
    }
    if (!logits && !out.argmax[i]) continue;
    if (!sampled[i]) {
      finish(r, FinishReason::Error, std::move(sample_errors[i]));
      continue;
    }
    try {
      if (const auto end = output_->emit(r, *sampled[i])) finish(r, *end);
    } catch (const std::exception& e) {
      if (!r.handle->done()) finish(r, FinishReason::Error, e.what());
    }
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
  runner_->release_free_memory();  // idle, as the background loop is before it waits
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
      // Idle: the KV pool's free blocks go back to the system (blocks the
      // prefix cache holds stay, within prefix_cache_bytes). Never between
      // steps of a running batch; a no-op when nothing was freed since.
      runner_->release_free_memory();
      std::unique_lock lock(signal_->mu);
      signal_->cv.wait(lock, [&] { return signal_->pending; });
      signal_->pending = false;
    }
  }
}

void EngineImpl::update_gauges() {
  const int64_t running = int64_t(scheduler_->running().size());
  const int64_t waiting = int64_t(scheduler_->waiting().size());
  const std::size_t used = runner_->used_bytes(), cached = runner_->prefix_cache_bytes();
  stats_.update([&](EngineStats& s) {
    s.running = running;
    s.waiting = waiting;
    s.kv_used_bytes = used;
    s.prefix_cache_bytes = cached;
  });
}

EngineStats EngineImpl::stats() const {
  EngineStats s = stats_.snapshot();
  const ThreadPool::Stats pool = backend_->host_pool_stats();  // atomics: any thread may read them
  s.host_pool_regions = pool.regions;
  s.host_pool_stalls = pool.stalls;
  s.host_pool_narrowed = pool.narrowed;
  return s;
}

void EngineImpl::shutdown() {
  {
    std::lock_guard lock(submit_mu_);
    if (closed_ && !thread_.joinable() && incoming_.empty() && scheduler_->waiting().empty() &&
        scheduler_->running().empty())
      return;
    closed_ = true;
  }
  signal_->notify();
  if (thread_.joinable()) thread_.join();
  take_submissions();
  for (const auto& r : scheduler_->take_all()) finish(*r, FinishReason::Cancelled);
}

}  // namespace
}  // namespace engine

std::unique_ptr<Engine> Engine::create(const EngineOptions& options) {
  if (options.model_dir.empty()) throw Error("engine: no model directory given");
  if (options.threads < 0) throw Error("engine: threads must not be negative");
  // At tensor_parallel > 1 on the CPU: one backend per shard (the model co-owns shards 1 …).
  ShardedBackends backends =
      make_sharded_backends({options.device, options.threads, options.matmul_precision}, options.tensor_parallel);
  auto model = load_model(options.model_dir, *backends.model,
                          {.tensor_parallel = options.tensor_parallel, .shard_backends = std::move(backends.others)});
  return std::make_unique<engine::EngineImpl>(options, std::move(backends.model), std::move(model));
}

std::unique_ptr<Engine> Engine::create(const EngineOptions& options, std::unique_ptr<Backend> backend,
                                       std::unique_ptr<Model> model) {
  if (!backend || !model) throw Error("engine: a backend and a model are needed");
  return std::make_unique<engine::EngineImpl>(options, std::move(backend), std::move(model));
}

}  // namespace rowlm
