#include "server/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <random>
#include <sstream>

#include <gtest/gtest.h>

namespace rowlm::server {
namespace {

// A reader of the Prometheus text format, enough to check what Metrics
// writes: every sample's metric must have been declared by # HELP and
// # TYPE lines before it, and values parse as numbers.
struct Exposition {
  std::map<std::string, std::string> types;      // metric family -> type
  std::map<std::string, double> samples;         // "name{labels}" -> value
  std::vector<std::string> errors;

  explicit Exposition(const std::string& text) {
    std::istringstream in(text);
    std::string line;
    std::set<std::string> helped;
    while (std::getline(in, line)) {
      if (line.starts_with("# HELP ")) {
        helped.insert(line.substr(7, line.find(' ', 7) - 7));
      } else if (line.starts_with("# TYPE ")) {
        const std::size_t sp = line.find(' ', 7);
        types[line.substr(7, sp - 7)] = line.substr(sp + 1);
      } else if (!line.empty()) {
        const std::size_t sp = line.rfind(' ');
        const std::string key = line.substr(0, sp);
        const std::string name = key.substr(0, key.find('{'));
        std::string family = name;
        for (const char* suffix : {"_bucket", "_sum", "_count"})
          if (!types.count(family) && name.ends_with(suffix)) family = name.substr(0, name.size() - std::strlen(suffix));
        if (!types.count(family) || !helped.count(family)) errors.push_back("undeclared: " + line);
        const std::string value = line.substr(sp + 1);
        samples[key] = value == "+Inf" ? INFINITY : std::stod(value);
      }
    }
  }
};

// Buckets hold the count of observations at or below their bound,
// cumulatively, against a direct count.
TEST(Metrics, HistogramsCountEveryObservationInTheRightBuckets) {
  std::mt19937 rng(3);
  std::lognormal_distribution<double> latency(-4.0, 2.0);  // around 18 ms, wide
  Metrics m;
  std::vector<double> seen;
  for (int i = 0; i < 2000; ++i) {
    const double v = i % 97 == 0 ? 0.005 : latency(rng);  // some exactly on a bound
    seen.push_back(v);
    m.observe_time_to_first_token(v);
  }
  const Exposition e(m.render(EngineStats{}));
  EXPECT_TRUE(e.errors.empty()) << e.errors.front();
  EXPECT_EQ(e.types.at("rowlm_time_to_first_token_seconds"), "histogram");
  int buckets = 0;
  for (const auto& [key, value] : e.samples) {
    const std::string prefix = "rowlm_time_to_first_token_seconds_bucket{le=\"";
    if (!key.starts_with(prefix)) continue;
    const std::string le = key.substr(prefix.size(), key.size() - prefix.size() - 2);
    const double bound = le == "+Inf" ? INFINITY : std::stod(le);
    const auto expected = std::count_if(seen.begin(), seen.end(), [&](double v) { return v <= bound; });
    EXPECT_EQ(value, double(expected)) << key;
    ++buckets;
  }
  EXPECT_GT(buckets, 10);
  EXPECT_EQ(e.samples.at("rowlm_time_to_first_token_seconds_count"), 2000.0);
  double sum = 0;
  for (double v : seen) sum += v;
  EXPECT_NEAR(e.samples.at("rowlm_time_to_first_token_seconds_sum"), sum, 1e-9 * sum);
  EXPECT_EQ(e.samples.at("rowlm_time_to_first_token_seconds_bucket{le=\"+Inf\"}"), 2000.0);
}

TEST(Metrics, CountersAndEngineGauges) {
  Metrics m;
  m.count_request("chat_completions", Outcome::kSuccess);
  m.count_request("chat_completions", Outcome::kSuccess);
  m.count_request("messages", Outcome::kRejected);
  m.add_tokens(10, 5, 4);
  m.add_tokens(20, 7, 0);
  m.add_in_flight(3);
  m.add_in_flight(-1);
  EngineStats s;
  s.running = 4, s.waiting = 2, s.prompt_tokens = 200, s.cached_prompt_tokens = 50;
  s.kv_used_bytes = 1000, s.kv_capacity_bytes = 4096, s.draft_proposed = 40, s.draft_accepted = 30;
  s.requests_cancelled = 1;
  const Exposition e(m.render(s));
  EXPECT_TRUE(e.errors.empty()) << e.errors.front();
  EXPECT_EQ(e.samples.at("rowlm_http_requests_total{endpoint=\"chat_completions\",outcome=\"success\"}"), 2);
  EXPECT_EQ(e.samples.at("rowlm_http_requests_total{endpoint=\"messages\",outcome=\"rejected\"}"), 1);
  EXPECT_EQ(e.samples.at("rowlm_prompt_tokens_total"), 30);
  EXPECT_EQ(e.samples.at("rowlm_generation_tokens_total"), 12);
  EXPECT_EQ(e.samples.at("rowlm_prompt_tokens_cached_total"), 4);
  EXPECT_EQ(e.samples.at("rowlm_http_requests_in_flight"), 2);
  EXPECT_EQ(e.samples.at("rowlm_engine_requests_running"), 4);
  EXPECT_EQ(e.samples.at("rowlm_engine_requests_waiting"), 2);
  EXPECT_EQ(e.samples.at("rowlm_kv_free_bytes"), 3096);
  EXPECT_EQ(e.samples.at("rowlm_prefix_cache_hit_rate"), 0.25);
  EXPECT_EQ(e.samples.at("rowlm_spec_decode_acceptance_rate"), 0.75);
  EXPECT_EQ(e.samples.at("rowlm_engine_requests_total{outcome=\"cancelled\"}"), 1);
  EXPECT_EQ(e.types.at("rowlm_http_requests_total"), "counter");
  // No division by zero before any traffic.
  const Exposition idle(Metrics().render(EngineStats{}));
  EXPECT_EQ(idle.samples.at("rowlm_prefix_cache_hit_rate"), 0);
  EXPECT_EQ(idle.samples.at("rowlm_spec_decode_acceptance_rate"), 0);
}

TEST(Metrics, NumbersRoundTrip) {
  EXPECT_EQ(prometheus_number(0.005), "0.005");
  EXPECT_EQ(prometheus_number(INFINITY), "+Inf");
  EXPECT_EQ(prometheus_number(-INFINITY), "-Inf");
  EXPECT_EQ(prometheus_number(NAN), "NaN");
  std::mt19937_64 rng(1);
  for (int i = 0; i < 1000; ++i) {
    const double v = std::uniform_real_distribution<double>(-1e12, 1e12)(rng) * std::pow(10.0, double(i % 30) - 15);
    EXPECT_EQ(std::stod(prometheus_number(v)), v);
  }
}

}  // namespace
}  // namespace rowlm::server
