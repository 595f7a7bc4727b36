#pragma once
// The RequestHandle given to callers: a queue of token events filled by the
// scheduler thread, drained by next(), and the final result.

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>

#include "rowlm/engine.h"

namespace rowlm::engine {

class HandleImpl final : public RequestHandle {
 public:
  HandleImpl(uint64_t id, std::function<void()> wake) : id_(id), wake_(std::move(wake)) {}

  uint64_t id() const override { return id_; }
  bool next(TokenEvent& event) override;
  RequestResult result() override;
  bool done() const override;
  void cancel() override;

  // Scheduler side.
  void push(const TokenEvent& event);
  void finish(RequestResult result);
  bool cancel_requested() const { return cancelled_.load(std::memory_order_acquire); }

 private:
  const uint64_t id_;
  std::function<void()> wake_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<TokenEvent> events_;
  bool finished_ = false;
  RequestResult result_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace rowlm::engine
