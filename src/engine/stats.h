#pragma once
// The engine's counters and gauges (EngineStats): written from the
// scheduler thread, read by any thread (Engine::stats(), submit()'s queue
// limit), so every access holds the lock.

#include <mutex>

#include "rowlm/engine.h"

namespace rowlm::engine {

class Stats {
 public:
  // Runs `change` on the counters under the lock; keep it to arithmetic.
  template <typename F>
  void update(F&& change) {
    std::lock_guard lock(mu_);
    change(stats_);
  }
  EngineStats snapshot() const {
    std::lock_guard lock(mu_);
    return stats_;
  }

 private:
  mutable std::mutex mu_;
  EngineStats stats_;
};

}  // namespace rowlm::engine
