#include "server/generation.h"

#include "core/error.h"

namespace rowlm::server {

Generation::Generation(Engine& engine, std::vector<Request> requests, Clock::time_point received, Metrics& metrics)
    : results_(requests.size()), last_token_(requests.size()), received_(received), metrics_(metrics) {
  ROWLM_CHECK(!requests.empty(), "a generation needs at least one request");
  handles_.reserve(requests.size());
  try {
    for (Request& r : requests) handles_.push_back(engine.submit(std::move(r)));
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

void Generation::pump(std::size_t choice) {
  Event event;
  event.choice = choice;
  while (handles_[choice]->next(event.token)) {
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
    event.finished = !handles_[0]->next(event.token);
  } else {
    std::unique_lock lock(mutex_);
    ready_.wait(lock, [&] { return !queue_.empty(); });
    event = std::move(queue_.front());
    queue_.pop_front();
  }
  if (event.finished) {
    results_[event.choice] = handles_[event.choice]->result();
    ++finished_;
  } else {
    record_token(event.choice);
  }
  return true;
}

void Generation::cancel() {
  for (auto& h : handles_)
    if (!h->done()) h->cancel();
}

const RequestResult& Generation::result(std::size_t choice) const {
  ROWLM_CHECK(choice < results_.size() && results_[choice].has_value(), "result() before the choice finished");
  return *results_[choice];
}

}  // namespace rowlm::server
