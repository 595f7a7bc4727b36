#include "server/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/error.h"

namespace rowlm::server {

namespace {

// Seconds. TTFT on a CPU spans a millisecond (a short prompt, tiny model) to
// tens of seconds (a long prompt behind a full batch); inter-token gaps start
// well under a millisecond.
const std::vector<double> kTtftBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                         0.5,   1,      2.5,   5,    10,    20,   40,  80};
const std::vector<double> kInterTokenBounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                               0.075,  0.1,   0.25,   0.5,   1,    2.5};
const std::vector<double> kRequestBounds = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,   2.5,
                                            5,    10,    20,   40,  80,   160, 320, 640};

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

void sample(std::string& out, const std::string& name, double value, const std::string& labels = "") {
  out += name;
  if (!labels.empty()) out += "{" + labels + "}";
  out += ' ';
  out += prometheus_number(value);
  out += '\n';
}

void scalar(std::string& out, const char* name, const char* type, const char* help, double value) {
  header(out, name, type, help);
  sample(out, name, value);
}

std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

void histogram(std::string& out, const char* name, const char* help, const Histogram& h) {
  header(out, name, "histogram", help);
  uint64_t cumulative = 0;
  for (std::size_t i = 0; i < h.counts().size(); ++i) {
    cumulative += h.counts()[i];
    const double le = i < h.bounds().size() ? h.bounds()[i] : INFINITY;
    sample(out, std::string(name) + "_bucket", double(cumulative), "le=\"" + prometheus_number(le) + "\"");
  }
  sample(out, std::string(name) + "_sum", h.sum());
  sample(out, std::string(name) + "_count", double(h.count()));
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  ROWLM_CHECK(std::is_sorted(bounds_.begin(), bounds_.end()) &&
                  std::adjacent_find(bounds_.begin(), bounds_.end()) == bounds_.end(),
              "histogram bounds must increase strictly");
}

void Histogram::observe(double value) {
  // Prometheus buckets are "less than or equal": the first bound >= value.
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), value);
  ++counts_[std::size_t(it - bounds_.begin())];
  sum_ += value;
  ++count_;
}

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::kSuccess: return "success";
    case Outcome::kClientError: return "client_error";
    case Outcome::kUnauthorized: return "unauthorized";
    case Outcome::kRejected: return "rejected";
    case Outcome::kCancelled: return "cancelled";
    case Outcome::kServerError: return "server_error";
  }
  return "unknown";
}

std::string prometheus_number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, value);
  return std::string(buf, r.ptr);
}

Metrics::Metrics() : ttft_(kTtftBounds), inter_token_(kInterTokenBounds), request_latency_(kRequestBounds) {}

void Metrics::count_request(const std::string& endpoint, Outcome outcome) {
  std::lock_guard lock(mutex_);
  ++requests_[{endpoint, outcome_name(outcome)}];
}

void Metrics::observe_time_to_first_token(double seconds) {
  std::lock_guard lock(mutex_);
  ttft_.observe(seconds);
}

void Metrics::observe_inter_token_latency(double seconds) {
  std::lock_guard lock(mutex_);
  inter_token_.observe(seconds);
}

void Metrics::observe_request_latency(double seconds) {
  std::lock_guard lock(mutex_);
  request_latency_.observe(seconds);
}

void Metrics::add_tokens(int64_t prompt, int64_t generated, int64_t cached_prompt) {
  std::lock_guard lock(mutex_);
  prompt_tokens_ += prompt;
  generated_tokens_ += generated;
  cached_prompt_tokens_ += cached_prompt;
}

void Metrics::add_in_flight(int delta) {
  std::lock_guard lock(mutex_);
  in_flight_ += delta;
}

std::string Metrics::render(const EngineStats& e, const std::string& device) const {
  std::string out;
  std::lock_guard lock(mutex_);
  if (!device.empty()) {
    header(out, "rowlm_device_info", "gauge", "The device the model runs on (always 1).");
    sample(out, "rowlm_device_info", 1.0, "device=\"" + escape_label(device) + "\"");
  }
  header(out, "rowlm_http_requests_total", "counter", "HTTP generation requests by endpoint and outcome.");
  for (const auto& [key, count] : requests_)
    sample(out, "rowlm_http_requests_total", double(count),
           "endpoint=\"" + escape_label(key.first) + "\",outcome=\"" + escape_label(key.second) + "\"");
  scalar(out, "rowlm_http_requests_in_flight", "gauge", "HTTP generation requests being served.", double(in_flight_));
  scalar(out, "rowlm_prompt_tokens_total", "counter", "Prompt tokens of finished HTTP requests.",
         double(prompt_tokens_));
  scalar(out, "rowlm_generation_tokens_total", "counter", "Tokens generated for HTTP requests.",
         double(generated_tokens_));
  scalar(out, "rowlm_prompt_tokens_cached_total", "counter",
         "Prompt tokens of finished HTTP requests reused from the prefix cache.", double(cached_prompt_tokens_));
  histogram(out, "rowlm_time_to_first_token_seconds",
            "From receiving the HTTP request to its first generated token.", ttft_);
  histogram(out, "rowlm_inter_token_latency_seconds", "Time between consecutive tokens of a request.",
            inter_token_);
  histogram(out, "rowlm_request_latency_seconds", "From receiving the HTTP request to its last token.",
            request_latency_);

  scalar(out, "rowlm_engine_requests_running", "gauge", "Requests in the engine's running batch.", double(e.running));
  scalar(out, "rowlm_engine_requests_waiting", "gauge", "Requests queued for admission.", double(e.waiting));
  scalar(out, "rowlm_engine_steps_total", "counter", "Scheduler steps (batched forward passes).", double(e.steps));
  scalar(out, "rowlm_engine_prompt_tokens_total", "counter", "Prompt tokens the engine admitted.",
         double(e.prompt_tokens));
  scalar(out, "rowlm_engine_generation_tokens_total", "counter", "Tokens the engine generated.",
         double(e.generated_tokens));
  scalar(out, "rowlm_engine_prompt_tokens_cached_total", "counter", "Prompt tokens served from the prefix cache.",
         double(e.cached_prompt_tokens));
  header(out, "rowlm_engine_requests_total", "counter", "Requests the engine ended, by how.");
  sample(out, "rowlm_engine_requests_total", double(e.requests_finished), "outcome=\"finished\"");
  sample(out, "rowlm_engine_requests_total", double(e.requests_cancelled), "outcome=\"cancelled\"");
  sample(out, "rowlm_engine_requests_total", double(e.requests_failed), "outcome=\"failed\"");
  scalar(out, "rowlm_engine_preemptions_total", "counter", "Rows preempted when the KV pool ran out.",
         double(e.preemptions));
  scalar(out, "rowlm_kv_used_bytes", "gauge", "KV pool bytes held by rows and cached prefixes.",
         double(e.kv_used_bytes));
  scalar(out, "rowlm_kv_free_bytes", "gauge", "KV pool bytes free.",
         double(e.kv_capacity_bytes > e.kv_used_bytes ? e.kv_capacity_bytes - e.kv_used_bytes : 0));
  scalar(out, "rowlm_kv_capacity_bytes", "gauge", "KV pool capacity.", double(e.kv_capacity_bytes));
  scalar(out, "rowlm_prefix_cache_bytes", "gauge", "KV bytes held by cached prefixes no row uses.",
         double(e.prefix_cache_bytes));
  scalar(out, "rowlm_prefix_cache_hit_rate", "gauge",
         "Fraction of admitted prompt tokens served from the prefix cache (0 before any).",
         e.prompt_tokens > 0 ? double(e.cached_prompt_tokens) / double(e.prompt_tokens) : 0.0);
  scalar(out, "rowlm_host_pool_regions_total", "counter", "Parallel regions of the backend's host thread pool.",
         double(e.host_pool_regions));
  scalar(out, "rowlm_host_pool_stalls_total", "counter",
         "Host pool regions that waited over 0.5 ms for a worker without a core (other work on the cores).",
         double(e.host_pool_stalls));
  scalar(out, "rowlm_host_pool_narrowed_regions_total", "counter",
         "Host pool regions run on fewer threads than configured, after stalls.", double(e.host_pool_narrowed));
  scalar(out, "rowlm_spec_decode_draft_tokens_total", "counter", "Draft tokens proposed by speculative decoding.",
         double(e.draft_proposed));
  scalar(out, "rowlm_spec_decode_accepted_tokens_total", "counter", "Draft tokens accepted by verification.",
         double(e.draft_accepted));
  scalar(out, "rowlm_spec_decode_acceptance_rate", "gauge",
         "Fraction of proposed draft tokens accepted (0 before any).",
         e.draft_proposed > 0 ? double(e.draft_accepted) / double(e.draft_proposed) : 0.0);
  return out;
}

}  // namespace rowlm::server
