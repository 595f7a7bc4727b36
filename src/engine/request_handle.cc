#include "engine/request_handle.h"

namespace rowlm::engine {

bool HandleImpl::next(TokenEvent& event) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !events_.empty() || finished_; });
  if (events_.empty()) return false;
  event = std::move(events_.front());
  events_.pop_front();
  return true;
}

RequestResult HandleImpl::result() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return finished_; });
  return result_;
}

bool HandleImpl::done() const {
  std::lock_guard lock(mu_);
  return finished_;
}

void HandleImpl::cancel() {
  cancelled_.store(true, std::memory_order_release);
  if (wake_) wake_();
}

void HandleImpl::push(const TokenEvent& event) {
  {
    std::lock_guard lock(mu_);
    events_.push_back(event);
  }
  cv_.notify_all();
}

void HandleImpl::finish(RequestResult result) {
  {
    std::lock_guard lock(mu_);
    result_ = std::move(result);
    finished_ = true;
  }
  cv_.notify_all();
}

}  // namespace rowlm::engine
