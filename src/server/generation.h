#pragma once
// The engine requests behind one HTTP request, one per choice, read as a
// single stream of events; and the latency the server observes for them
// (from receiving the HTTP request), recorded into Metrics.
//
// One choice is read on the calling thread. Several are each read on a
// thread of their own into a queue, so that choices stream as their tokens
// come, whatever order they finish in.
//
// A reasoning budget: each request is submitted with max_tokens at the
// budget; a choice that reaches it (finishes with Length) before the
// request's own limit continues as a second engine request whose prompt is
// the first's prompt and tokens, plus the span's closer if the reasoning was
// still open (the prefix cache holds that KV, so only the closer is
// prefilled). The closer streams as a token event of its own (token -1) and
// is part of the result's text, not of its token_ids; the two results read as
// one (tokens, text and log-probabilities joined, usage of the first prompt).

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
#include "tokenizer/reasoning.h"

namespace rowlm::server {

using Clock = std::chrono::steady_clock;

struct ReasoningBudget {
  tokenizer::ReasoningSyntax syntax = tokenizer::ReasoningSyntax::kGemma4Channel;
  bool starts_inside = false;              // the prompt opened the span
  std::optional<int32_t> max_tokens;       // the request's own limit (nullopt: the context's)
  std::vector<int32_t> close_ids;          // the closer's tokens
  std::string close_text;                  // and its text
};

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
  Generation(Engine& engine, std::vector<Request> requests, Clock::time_point received, Metrics& metrics,
             std::optional<ReasoningBudget> budget = std::nullopt);
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
  // One choice's phases: the budget's continuation, if any.
  struct Chain {
    Request request;                      // as first submitted
    std::optional<tokenizer::ReasoningStream> reasoning;  // tracks whether the span is open
    std::optional<TokenEvent> inserted;   // the closer, to stream before phase 2's tokens
    std::string inserted_text;            // the same, for the joined result
    std::optional<RequestResult> so_far;  // the phases that finished
    bool continued = false;
  };
  void record_token(std::size_t choice);
  void pump(std::size_t choice);
  // The choice's next token event across its phases; false once the last
  // phase finished (its joined result is then in results_).
  bool advance(std::size_t choice, TokenEvent& event);
  // Submits the second phase after `first`; false when there is none.
  bool continue_after(std::size_t choice, const RequestResult& first);

  Engine& engine_;
  std::optional<ReasoningBudget> budget_;
  std::vector<Chain> chains_;
  std::mutex handles_mutex_;  // handles_ change when a phase begins; cancel() reads them
  bool cancelled_ = false;
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
