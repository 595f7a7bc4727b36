#include "server/response_store.h"

#include "server/sse.h"

namespace rowlm::server {

std::size_t StoredResponse::bytes() const {
  // Container and allocation overheads, roughly: a fixed cost per turn and
  // per response keeps many tiny responses from looking free.
  constexpr std::size_t kPerTurn = 128, kPerResponse = 512;
  std::size_t n = kPerResponse + id.size() + json_text(response).size() + kv_ids.size() * sizeof(int32_t) +
                  kv_text.size();
  for (const ChatTurn& t : turns) {
    n += kPerTurn + t.text.size() + t.tool_name.size();
    for (const ToolCall& c : t.tool_calls) n += kPerTurn + c.id.size() + c.name.size() + json_text(c.arguments).size();
  }
  return n;
}

ResponseStore::ResponseStore(std::size_t max_bytes, std::chrono::seconds max_age,
                             std::function<Clock::time_point()> now)
    : max_bytes_(max_bytes), max_age_(max_age), now_(std::move(now)) {}

void ResponseStore::drop(std::list<Entry>::iterator it) {
  bytes_ -= it->bytes;
  by_id_.erase(it->response->id);
  entries_.erase(it);
}

void ResponseStore::expire(Clock::time_point now) {
  while (!entries_.empty() && now - entries_.front().stored >= max_age_) drop(entries_.begin());
}

bool ResponseStore::put(StoredResponse response) {
  const std::size_t bytes = response.bytes();
  const auto now = now_();
  std::lock_guard lock(mutex_);
  expire(now);
  if (auto it = by_id_.find(response.id); it != by_id_.end()) drop(it->second);
  if (bytes > max_bytes_) return false;
  while (bytes_ + bytes > max_bytes_) drop(entries_.begin());
  const std::string id = response.id;
  entries_.push_back({std::make_shared<const StoredResponse>(std::move(response)), bytes, now});
  by_id_[id] = std::prev(entries_.end());
  bytes_ += bytes;
  return true;
}

std::shared_ptr<const StoredResponse> ResponseStore::get(const std::string& id) {
  std::lock_guard lock(mutex_);
  expire(now_());
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second->response;
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard lock(mutex_);
  const auto it = by_id_.find(id);
  if (it == by_id_.end()) return false;
  drop(it->second);
  return true;
}

std::size_t ResponseStore::bytes() const {
  std::lock_guard lock(mutex_);
  return bytes_;
}

std::size_t ResponseStore::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

}  // namespace rowlm::server
