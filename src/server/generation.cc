#include "server/generation.h"

#include "constrain/json_constraint.h"
#include "core/error.h"

namespace rowlm::server {

namespace {

// `next` appended to `so_far`, as one result.
void join(RequestResult& so_far, RequestResult next, const std::string& inserted) {
  so_far.token_ids.insert(so_far.token_ids.end(), next.token_ids.begin(), next.token_ids.end());
  so_far.text += inserted + next.text;
  so_far.logprobs.insert(so_far.logprobs.end(), next.logprobs.begin(), next.logprobs.end());
  so_far.finish = next.finish;
  so_far.stop = std::move(next.stop);
  so_far.error = std::move(next.error);
  so_far.usage.completion_tokens += next.usage.completion_tokens;
  so_far.timings.total_s += next.timings.total_s;
  so_far.preemptions += next.preemptions;
  so_far.draft_proposed += next.draft_proposed;
  so_far.draft_accepted += next.draft_accepted;
}

}  // namespace

Generation::Generation(Engine& engine, std::vector<Request> requests, Clock::time_point received, Metrics& metrics,
                       std::optional<ReasoningBudget> budget)
    : engine_(engine),
      budget_(std::move(budget)),
      results_(requests.size()),
      last_token_(requests.size()),
      received_(received),
      metrics_(metrics) {
  ROWLM_CHECK(!requests.empty(), "a generation needs at least one request");
  handles_.reserve(requests.size());
  chains_.resize(requests.size());
  try {
    for (std::size_t i = 0; i < requests.size(); ++i) {
      if (budget_) {
        chains_[i].request = requests[i];
        chains_[i].reasoning.emplace(budget_->syntax, budget_->starts_inside);
      }
      handles_.push_back(engine.submit(std::move(requests[i])));
    }
  } catch (...) {
    for (auto& h : handles_) h->cancel();
    throw;
  }
  if (handles_.size() > 1) {
    pumps_.reserve(handles_.size());
    for (std::size_t i = 0; i < handles_.size(); ++i) pumps_.emplace_back([this, i] { pump(i); });
  }
}

Generation::~Generation() {
  cancel();
  pumps_.clear();  // joins; each pump ends once its cancelled handle drains
}

bool Generation::continue_after(std::size_t choice, const RequestResult& first) {
  Chain& chain = chains_[choice];
  if (!budget_ || chain.continued || first.finish != FinishReason::Length) return false;
  const int64_t generated = int64_t(first.token_ids.size());
  if (budget_->max_tokens && generated >= *budget_->max_tokens) return false;
  const bool close = chain.reasoning->in_reasoning();
  Request next = chain.request;
  next.prompt_ids.insert(next.prompt_ids.end(), first.token_ids.begin(), first.token_ids.end());
  if (close) next.prompt_ids.insert(next.prompt_ids.end(), budget_->close_ids.begin(), budget_->close_ids.end());
  if (next.tool_calls) {
    // The continuation's constraint starts where the first phase's ended.
    auto rules = std::make_shared<constrain::ToolCallRules>(*next.tool_calls);
    rules->forced.insert(rules->forced.end(), first.token_ids.begin(), first.token_ids.end());
    if (close) rules->forced.insert(rules->forced.end(), budget_->close_ids.begin(), budget_->close_ids.end());
    next.tool_calls = std::move(rules);
  }
  next.sampling.max_tokens =
      budget_->max_tokens ? std::optional<int32_t>(int32_t(*budget_->max_tokens - generated)) : std::nullopt;
  std::lock_guard lock(handles_mutex_);
  if (cancelled_) return false;
  try {
    handles_[choice] = engine_.submit(std::move(next));
  } catch (const InvalidRequest&) {
    return false;  // no room left in the context: the reply ends where it is
  }
  chain.continued = true;
  if (close) {
    TokenEvent closer;
    closer.text = budget_->close_text;
    chain.inserted = std::move(closer);
    chain.inserted_text = budget_->close_text;
  }
  return true;
}

bool Generation::advance(std::size_t choice, TokenEvent& event) {
  Chain& chain = chains_[choice];
  while (true) {
    if (chain.inserted) {
      event = std::move(*chain.inserted);
      chain.inserted.reset();
      return true;
    }
    std::shared_ptr<RequestHandle> handle;
    {
      std::lock_guard lock(handles_mutex_);
      handle = handles_[choice];
    }
    if (handle->next(event)) {
      if (chain.reasoning) chain.reasoning->push(event.text);
      return true;
    }
    RequestResult phase;
    try {
      phase = handle->result();
    } catch (const std::exception& e) {
      phase.finish = FinishReason::Error;
      phase.error = e.what();
    }
    const bool first_phase = !chain.so_far;
    if (first_phase) chain.so_far = std::move(phase);
    else join(*chain.so_far, std::move(phase), chain.inserted_text);
    bool more = false;
    if (first_phase) {
      try {
        more = continue_after(choice, *chain.so_far);
      } catch (const std::exception& e) {  // QueueFull: the continuation could not be queued
        chain.so_far->finish = FinishReason::Error;
        chain.so_far->error = std::string("the answer after the reasoning budget could not be queued: ") + e.what();
      }
    }
    if (!more) {
      results_[choice] = std::move(*chain.so_far);
      return false;
    }
  }
}

void Generation::pump(std::size_t choice) {
  Event event;
  event.choice = choice;
  while (advance(choice, event.token)) {
    std::lock_guard lock(mutex_);
    queue_.push_back(event);
    ready_.notify_one();
  }
  std::lock_guard lock(mutex_);
  queue_.push_back(Event{choice, true, {}});
  ready_.notify_one();
}

void Generation::record_token(std::size_t choice) {
  const auto now = Clock::now();
  if (!ttft_) {
    ttft_ = std::chrono::duration<double>(now - received_).count();
    metrics_.observe_time_to_first_token(*ttft_);
  }
  if (last_token_[choice]) metrics_.observe_inter_token_latency(std::chrono::duration<double>(now - *last_token_[choice]).count());
  last_token_[choice] = now;
}

bool Generation::next(Event& event) {
  if (finished_ == handles_.size()) return false;
  if (handles_.size() == 1) {
    event.choice = 0;
    event.finished = !advance(0, event.token);
  } else {
    std::unique_lock lock(mutex_);
    ready_.wait(lock, [&] { return !queue_.empty(); });
    event = std::move(queue_.front());
    queue_.pop_front();
  }
  if (event.finished) {
    ++finished_;
  } else if (event.token.token >= 0) {
    record_token(event.choice);
  }
  return true;
}

void Generation::cancel() {
  std::lock_guard lock(handles_mutex_);
  cancelled_ = true;
  for (auto& h : handles_)
    if (!h->done()) h->cancel();
}

const RequestResult& Generation::result(std::size_t choice) const {
  ROWLM_CHECK(choice < results_.size() && results_[choice].has_value(), "result() before the choice finished");
  return *results_[choice];
}

}  // namespace rowlm::server
