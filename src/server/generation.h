#pragma once
// The engine requests behind one HTTP request, one per choice, read as a
// single stream of events; and the latency the server observes for them
// (from receiving the HTTP request), recorded into Metrics.
//
// One choice is read on the calling thread. Several are each read on a
// thread of their own into a queue, so that choices stream as their tokens
// come, whatever order they finish in.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "rowlm/engine.h"
#include "server/metrics.h"

namespace rowlm::server {

using Clock = std::chrono::steady_clock;

class Generation {
 public:
  struct Event {
    std::size_t choice = 0;
    bool finished = false;  // the choice ended: result(choice) is ready; no token
    TokenEvent token;
  };

  // Submits every request. If one is refused (QueueFull, or an invalid
  // request), the ones already submitted are cancelled and the error
  // propagates.
  Generation(Engine& engine, std::vector<Request> requests, Clock::time_point received, Metrics& metrics);
  ~Generation();  // cancels whatever still runs
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  std::size_t size() const { return handles_.size(); }
  // Blocks for the next event; false once every choice has delivered its
  // finished event.
  bool next(Event& event);
  // Cancels every choice (a client went away); next() then drains quickly.
  void cancel();
  // The choice's result; valid after its finished event.
  const RequestResult& result(std::size_t choice) const;
  // Seconds from receiving the request to the first token of any choice.
  std::optional<double> time_to_first_token() const { return ttft_; }

 private:
  void record_token(std::size_t choice);
  void pump(std::size_t choice);

  std::vector<std::shared_ptr<RequestHandle>> handles_;
  std::vector<std::optional<RequestResult>> results_;
  std::vector<std::optional<Clock::time_point>> last_token_;
  std::size_t finished_ = 0;
  Clock::time_point received_;
  std::optional<double> ttft_;
  Metrics& metrics_;

  // Several choices: pump threads feed this queue.
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Event> queue_;
  std::vector<std::jthread> pumps_;
};

}  // namespace rowlm::server
