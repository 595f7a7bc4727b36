#pragma once
// The server's Prometheus metrics: its own counters and latency histograms
// (recorded by the HTTP handlers) and the engine's gauges and totals (read
// from EngineStats when /metrics is scraped), in the text exposition format
// 0.0.4. Thread-safe.

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "rowlm/engine.h"

namespace rowlm::server {

// A cumulative histogram with fixed upper bounds (the +Inf bucket implied).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  const std::vector<double>& bounds() const { return bounds_; }
  // Non-cumulative counts per bucket; the last is the +Inf bucket.
  const std::vector<uint64_t>& counts() const { return counts_; }
  double sum() const { return sum_; }
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

// How an HTTP request ended.
enum class Outcome {
  kSuccess,       // 2xx, generation finished
  kClientError,   // 4xx other than 401/413/429 (malformed or invalid request)
  kUnauthorized,  // 401
  kRejected,      // 429 / 413: the queue was full, or the body too large
  kCancelled,     // the client went away before the reply was complete
  kServerError,   // 5xx, or a generation that failed
};
const char* outcome_name(Outcome o);

class Metrics {
 public:
  Metrics();

  void count_request(const std::string& endpoint, Outcome outcome);
  void observe_time_to_first_token(double seconds);
  void observe_inter_token_latency(double seconds);
  void observe_request_latency(double seconds);
  void add_tokens(int64_t prompt, int64_t generated, int64_t cached_prompt);
  void add_in_flight(int delta);

  // Everything, with `engine` for the engine's gauges and totals.
  // `device`: where the model runs, exported as rowlm_device_info{device=...} 1.
  std::string render(const EngineStats& engine, const std::string& device = "") const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, std::string>, uint64_t> requests_;  // (endpoint, outcome) -> count
  Histogram ttft_, inter_token_, request_latency_;
  int64_t prompt_tokens_ = 0, generated_tokens_ = 0, cached_prompt_tokens_ = 0;
  int64_t in_flight_ = 0;
};

// A number as Prometheus writes it: shortest round-trip form, "+Inf",
// "-Inf", "NaN".
std::string prometheus_number(double value);

}  // namespace rowlm::server
