#pragma once
// Wall time per operation name, for a backend whose operations finish
// before they return (the CPU's: an operation's time includes its worker
// threads'). The backend opens a scope at the top of each operation; while
// profiling is off a scope reads no clock and records nothing. Nested scopes
// (an operation built from others) are counted by the outermost one only, so
// the sums add up to the time spent in operations.
//
// Threads: as the backend's (backend.h: one caller at a time).

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace rowlm {

class OpProfiler {
 public:
  class Scope {
   public:
    Scope(OpProfiler* owner, const char* op) : owner_(owner), op_(op) {
      if (owner_ && owner_->depth_++ == 0) start_ = std::chrono::steady_clock::now();
    }
    ~Scope() {
      if (owner_ && --owner_->depth_ == 0)
        owner_->add(op_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    OpProfiler* owner_;
    const char* op_;
    std::chrono::steady_clock::time_point start_;
  };

  // A scope timing `op` (a string literal: it is kept, not copied) until it
  // is destroyed.
  Scope scope(const char* op) { return Scope(on_ ? this : nullptr, op); }

  void set_on(bool on) { on_ = on; }
  std::vector<Backend::OpProfile> list() const {
    std::vector<Backend::OpProfile> out;
    for (const auto& entry : sums_) out.push_back(entry.second);
    return out;
  }
  void clear() { sums_.clear(); }

 private:
  void add(const char* op, double seconds) {
    Backend::OpProfile& p = sums_[op];
    p.op = op;
    p.launches += 1;
    p.seconds += seconds;
  }

  bool on_ = false;
  int depth_ = 0;  // scopes open now (counted only while on)
  std::map<std::string, Backend::OpProfile> sums_;
};

}  // namespace rowlm
