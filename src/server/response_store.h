#pragma once
// The responses a Responses API client may continue (previous_response_id)
// or read back (GET /v1/responses/{id}), kept in memory within a byte budget
// and for a limited time. A response past its time is gone; when a new one
// does not fit the budget, the oldest go first (a response larger than the
// whole budget is not kept).
//
// Threads: every method may be called from any thread.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/chat_prompt.h"

namespace rowlm::server {

struct StoredResponse {
  std::string id;
  nlohmann::json response;       // the response object, as it was returned
  std::vector<ChatTurn> turns;   // the conversation so far: earlier turns, its input, its output (no instructions)
  // What the KV held after it (its prompt and reply, without the token it
  // stopped on), as tokens and as text: a continuation whose prompt text
  // starts with kv_text reuses these tokens, so the prefix cache finds them.
  std::vector<int32_t> kv_ids;
  std::string kv_text;
  // The bytes it is charged against the budget: its contents, estimated.
  std::size_t bytes() const;
};

class ResponseStore {
 public:
  using Clock = std::chrono::steady_clock;
  // `now` is the store's clock (tests give their own).
  ResponseStore(std::size_t max_bytes, std::chrono::seconds max_age, std::function<Clock::time_point()> now = Clock::now);

  // Keeps `response` (replacing one of the same id), evicting what has
  // expired and then the oldest until it fits. Returns whether it was kept.
  bool put(StoredResponse response);
  // The response, or nullptr when it is unknown, expired or evicted.
  std::shared_ptr<const StoredResponse> get(const std::string& id);
  // Removes it; false when it was not there.
  bool erase(const std::string& id);

  std::size_t bytes() const;
  std::size_t size() const;

 private:
  struct Entry {
    std::shared_ptr<const StoredResponse> response;
    std::size_t bytes;
    Clock::time_point stored;
  };
  void expire(Clock::time_point now);  // with mutex_ held
  void drop(std::list<Entry>::iterator it);

  const std::size_t max_bytes_;
  const std::chrono::seconds max_age_;
  const std::function<Clock::time_point()> now_;
  mutable std::mutex mutex_;
  std::list<Entry> entries_;  // oldest first
  std::unordered_map<std::string, std::list<Entry>::iterator> by_id_;
  std::size_t bytes_ = 0;
};

}  // namespace rowlm::server
