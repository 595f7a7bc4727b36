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
#include <array>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <list>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "engine/drafter.h"
#include "engine/kv_room.h"
#include "engine/request_handle.h"
#include "engine/request_state.h"
#include "engine/setup.h"
#include "sampling/speculative.h"
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

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

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
  void drop_cancelled();
  void admit();
  void preempt(RequestState& r);
  bool make_room(const kv::OutOfBlocks& e);
  void finish(RequestState& r, FinishReason reason, std::string error = {});
  void on_logits(RequestState& r, const float* logits);
  void verify(RequestState& r, const DraftJob& job, const float* logits);
  std::optional<FinishReason> emit(RequestState& r, const sampling::SampledToken& s);
  bool stop_condition(RequestState& r, int32_t token);
  int draft_limit(const RequestState& r) const;
  int64_t step_tokens() const { return opt_.token_budget + (drafter_ ? opt_.draft_tokens : 0); }
  void publish(RequestState& r);
  void update_gauges();

  EngineOptions opt_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::optional<Tokenizer> tokenizer_;
  std::unique_ptr<kv::KvCache> cache_;
  std::unique_ptr<Drafter> drafter_;  // speculative decoding, when on
  std::vector<int32_t> eos_;

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

  mutable std::mutex stats_mu_;
  EngineStats stats_;
};

EngineImpl::EngineImpl(const EngineOptions& options, std::unique_ptr<Backend> backend,
                       std::unique_ptr<Model> model)
    : opt_(options), backend_(std::move(backend)), model_(std::move(model)) {
  check_options(opt_);
  std::unique_ptr<Model> draft_model = load_draft_model(opt_, *backend_, model_->info());
  if (!opt_.model_dir.empty() && std::filesystem::exists(std::filesystem::path(opt_.model_dir) / "tokenizer.json"))
    tokenizer_.emplace(Tokenizer::load(opt_.model_dir));
  eos_ = model_->info().eos_token_ids;

  kv::CacheOptions copt = cache_options(opt_, *model_);
  stats_.kv_capacity_bytes = copt.capacity_bytes;  // the draft's share included
  drafter_ = make_drafter(opt_, std::move(draft_model), *model_, copt);
  cache_ = std::make_unique<kv::KvCache>(copt);
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

void EngineImpl::finish(RequestState& r, FinishReason reason, std::string error) {
  if (r.row >= 0) {
    publish(r);
    cache_->retire(r.row);
    r.row = -1;
    if (drafter_) drafter_->detach(r);
  }
  // Text still held back (a possible stop-string prefix, an open UTF-8
  // sequence) belongs to the output unless a stop string ended it.
  if (!r.stops.stopped() && r.decoder) {
    std::string tail = r.stops.feed(r.decoder->finish()).text;
    if (!r.stops.stopped()) tail += r.stops.flush();
    if (!tail.empty() && reason != FinishReason::Cancelled && reason != FinishReason::Error) {
      r.result.text += tail;
      TokenEvent ev;
      ev.text = tail;
      if (r.on_token) r.on_token(ev);
      r.handle->push(ev);
    }
  }
  r.finished = Clock::now();
  RequestResult& res = r.result;
  res.token_ids.assign(r.generated().begin(), r.generated().end());
  res.finish = reason;
  res.error = std::move(error);
  res.usage.prompt_tokens = r.prompt_length;
  res.usage.completion_tokens = r.generated_count();
  res.timings.total_s = seconds(r.finished - r.submitted);
  if (r.generated_count() > 0) {
    res.timings.time_to_first_token_s = seconds(r.first_token - r.submitted);
    const double decode_s = seconds(r.finished - r.first_token);
    if (r.generated_count() > 1 && decode_s > 0)
      res.timings.decode_tokens_per_s = double(r.generated_count() - 1) / decode_s;
  }
  {
    std::lock_guard lock(stats_mu_);
    if (reason == FinishReason::Cancelled) ++stats_.requests_cancelled;
    else if (reason == FinishReason::Error) ++stats_.requests_failed;
    else ++stats_.requests_finished;
  }
  r.handle->finish(res);
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
    const int64_t reusable = opt_.prefix_cache ? cache_->match_prefix(seq, int64_t(seq.size()) - 1) : 0;
    // A request admitted into an empty batch always runs (it fails only if
    // it cannot fit alone); otherwise it waits until the rows admitted before
    // it leave room (kv_room.h), in the draft's cache too.
    if (!running_.empty()) {
      std::vector<std::pair<kv::RowId, int64_t>> held;
      for (const auto& other : running_) held.emplace_back(other->row, other->sequence_length());
      const CacheAccounting store(*cache_);
      if (admission_need(store, target, reusable, step_tokens()) > admission_room(store, held, step_tokens()))
        break;
      if (drafter_ && !drafter_->has_room(r, target)) break;
    }
    r.row = cache_->create_row();
    if (opt_.prefix_cache) cache_->retain_for_publish(r.row);
    r.computed = opt_.prefix_cache ? cache_->attach_prefix(r.row, seq, int64_t(seq.size()) - 1) : 0;
    if (drafter_) drafter_->attach(r);
    if (!r.ever_admitted) {
      r.admitted = Clock::now();
      r.result.timings.queue_s = seconds(r.admitted - r.submitted);
      r.result.usage.cached_prompt_tokens = std::min<int64_t>(r.computed, r.prompt_length);
      r.ever_admitted = true;
      std::lock_guard lock(stats_mu_);
      stats_.cached_prompt_tokens += r.result.usage.cached_prompt_tokens;
      stats_.prompt_tokens += r.prompt_length;
    }
    r.admit_order = ++admit_counter_;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
}

void EngineImpl::preempt(RequestState& r) {
  cache_->retire(r.row);
  r.row = -1;
  if (drafter_) drafter_->detach(r);
  r.computed = 0;
  ++r.result.preemptions;
  {
    std::lock_guard lock(stats_mu_);
    ++stats_.preemptions;
  }
}

void EngineImpl::publish(RequestState& r) {
  if (!opt_.prefix_cache || r.row < 0) return;
  cache_->publish(r.row, std::span(r.tokens).first(std::size_t(r.computed)));
}

bool EngineImpl::stop_condition(RequestState& r, int32_t token) {
  const auto& p = r.request.sampling;
  if (!r.request.ignore_eos && std::find(eos_.begin(), eos_.end(), token) != eos_.end()) {
    r.result.stop = tokenizer_ ? std::string(tokenizer_->id_to_token(token).value_or("")) : std::to_string(token);
    return true;
  }
  if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) != p.stop_token_ids.end()) {
    r.result.stop = tokenizer_ ? std::string(tokenizer_->id_to_token(token).value_or("")) : std::to_string(token);
    return true;
  }
  return false;
}

// A logits row for the token after the row's computed sequence: sample,
// stream, and finish the request if that token ends it.
void EngineImpl::on_logits(RequestState& r, const float* logits) {
  const std::span<const float> row(logits, std::size_t(model_->info().vocab_size));
  if (const auto end = emit(r, r.sampler.sample(row))) finish(r, *end);
}

// Records a generated token (sampler, sequence, logprobs, stats) and streams
// its text. Returns how the request ends if this token ends it.
std::optional<FinishReason> EngineImpl::emit(RequestState& r, const sampling::SampledToken& s) {
  r.sampler.accept(s.token);
  r.tokens.push_back(s.token);
  if (r.generated_count() == 1) r.first_token = Clock::now();
  if (s.logprobs) r.result.logprobs.push_back(*s.logprobs);
  {
    std::lock_guard lock(stats_mu_);
    ++stats_.generated_tokens;
  }

  const bool stop_token = stop_condition(r, s.token);
  TokenEvent ev;
  ev.token = s.token;
  ev.logprobs = s.logprobs;
  bool stop_string = false;
  if (!stop_token && r.decoder) {
    const auto out = r.stops.feed(r.decoder->push(s.token));
    ev.text = out.text;
    if (out.stop) {
      stop_string = true;
      r.result.stop = r.request.sampling.stop[*out.stop];
    }
  }
  r.result.text += ev.text;
  if (r.on_token) r.on_token(ev);
  r.handle->push(ev);

  const int64_t limit = model_->info().max_position;
  const auto& max_tokens = r.request.sampling.max_tokens;
  if (stop_token || stop_string) return FinishReason::Stop;
  if ((max_tokens && r.generated_count() >= *max_tokens) || (limit > 0 && r.sequence_length() >= limit))
    return FinishReason::Length;
  return std::nullopt;
}

// Drafts a decoding row may take: at most γ, and no more than it can still
// emit (its max_tokens, the context) with the token that follows them.
int EngineImpl::draft_limit(const RequestState& r) const {
  int64_t n = opt_.draft_tokens;
  if (const auto& max_tokens = r.request.sampling.max_tokens) n = std::min<int64_t>(n, *max_tokens - r.generated_count() - 1);
  if (const int64_t limit = model_->info().max_position; limit > 0) n = std::min(n, limit - r.sequence_length() - 1);
  return int(std::max<int64_t>(0, n));
}

// The row fed its last token and job.tokens; logits holds 1 + g rows. The
// documented loop of sampling/speculative.h, ending early where the request
// ends; the KV keeps the fed tokens that were emitted.
void EngineImpl::verify(RequestState& r, const DraftJob& job, const float* logits) {
  const int g = int(job.tokens.size());
  const std::size_t vocab = std::size_t(model_->info().vocab_size);
  const int64_t start = r.computed;
  int emitted = 0, accepted = 0;
  std::optional<FinishReason> end;
  std::string error;
  try {
    while (emitted < g && !end) {
      const std::span<const float> row(logits + std::size_t(emitted) * vocab, vocab);
      const std::span<const float> q = job.probs.empty() ? std::span<const float>() : job.probs[std::size_t(emitted)];
      const sampling::DraftVerdict v = sampling::verify_draft_token(r.sampler, row, q, job.tokens[std::size_t(emitted)]);
      end = emit(r, v.token);
      ++emitted;
      if (!v.accepted) break;
      ++accepted;
    }
    if (!end && accepted == g) {
      const std::span<const float> row(logits + std::size_t(g) * vocab, vocab);
      end = emit(r, r.sampler.sample(row));
      ++emitted;
    }
  } catch (const std::exception& e) {
    end = FinishReason::Error;
    error = e.what();
  }
  cache_->rollback_round(std::span(&r.row, 1), std::array<int64_t, 1>{emitted});
  r.computed = start + emitted;
  drafter_->resolve(job, accepted);
  r.result.draft_proposed += g;
  r.result.draft_accepted += accepted;
  {
    std::lock_guard lock(stats_mu_);
    stats_.draft_proposed += g;
    stats_.draft_accepted += accepted;
  }
  if (end) finish(r, *end, std::move(error));
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
    if (drafter_) {
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
        drafter_->propose(jobs);
      } catch (const kv::OutOfBlocks& e) {
        if (!make_room(e)) return true;
        continue;
      }
      for (const DraftJob& job : jobs) budget += job.max_tokens - int64_t(job.tokens.size());
    }

    ForwardBatch batch;
    struct Fed {
      RequestState* r;
      int64_t n;                  // tokens fed
      int64_t first_logit = -1;   // its first logits row, if any
      const DraftJob* job = nullptr;  // with drafts to verify
    };
    std::vector<Fed> fed;
    std::vector<kv::RowId> round;  // rows feeding drafts
    auto feed = [&](RequestState& r, int64_t n) {
      Fed& f = fed.emplace_back(Fed{&r, n});
      for (int64_t p = r.computed; p < r.computed + n; ++p) {
        const bool last = p + 1 == r.sequence_length();
        if (last) f.first_logit = int64_t(batch.logit_rows.size());
        batch.add(r.row, p, r.tokens[std::size_t(p)], last);
      }
    };
    std::size_t index = 0;
    for (auto& r : running_) {
      const DraftJob* job = drafter_ ? &jobs[index++] : nullptr;
      if (!one_left(*r)) continue;
      feed(*r, 1);
      if (!job || job->tokens.empty()) continue;
      fed.back().job = job;
      fed.back().n += int64_t(job->tokens.size());
      for (std::size_t j = 0; j < job->tokens.size(); ++j)
        batch.add(r->row, r->computed + 1 + int64_t(j), job->tokens[j], true);
      round.push_back(r->row);
    }
    for (auto& r : running_) {
      const int64_t need = prefill_left(*r);
      if (!one_left(*r) && need > 0 && budget > 0) {
        const int64_t n = std::min(need, budget);
        feed(*r, n);
        budget -= n;
      }
    }

    // The forward pass. The drafted rows' KV appends happen inside a
    // speculative round, rolled back to what verification keeps.
    Tensor logits;
    cache_->begin_round(round);
    try {
      model_->forward(batch, *cache_, logits);
    } catch (const kv::OutOfBlocks& e) {
      cache_->rollback_round(round, std::vector<int64_t>(round.size(), 0));
      if (drafter_) drafter_->discard(jobs);
      if (!make_room(e)) return true;
      continue;
    } catch (const std::exception& e) {
      // Not the requests' fault, but nothing else can be done with them.
      cache_->rollback_round(round, std::vector<int64_t>(round.size(), 0));
      if (drafter_) drafter_->discard(jobs);
      for (auto& r : running_) finish(*r, FinishReason::Error, e.what());
      running_.clear();
      return true;
    }
    {
      std::lock_guard lock(stats_mu_);
      ++stats_.steps;
    }
    const int64_t vocab = logits.dim(1);
    for (const Fed& f : fed) {
      RequestState& r = *f.r;
      const float* row_logits = f.first_logit >= 0 ? logits.data<float>() + f.first_logit * vocab : nullptr;
      if (f.job) {
        verify(r, *f.job, row_logits);
        continue;
      }
      r.computed += f.n;
      if (!row_logits) continue;
      try {
        on_logits(r, row_logits);
      } catch (const std::exception& e) {
        if (!r.handle->done()) finish(r, FinishReason::Error, e.what());
      }
    }
    for (auto it = running_.begin(); it != running_.end();) {
      if ((*it)->handle->done()) {
        it = running_.erase(it);
      } else {
        publish(**it);
        if (drafter_) drafter_->after_step(**it);
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
  std::lock_guard lock(stats_mu_);
  stats_.running = int64_t(running_.size());
  stats_.waiting = int64_t(waiting_.size());
  stats_.kv_used_bytes = cache_->used_bytes() + (drafter_ ? drafter_->used_bytes() : 0);
  stats_.prefix_cache_bytes = cache_->prefix_cache_bytes() + (drafter_ ? drafter_->prefix_cache_bytes() : 0);
}

EngineStats EngineImpl::stats() const {
  std::lock_guard lock(stats_mu_);
  EngineStats s = stats_;
  return s;
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
