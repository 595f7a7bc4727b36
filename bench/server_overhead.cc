// server_overhead: what serving over HTTP costs one request, measured side
// by side with the same engine in-process (the target: at
// concurrency 1, tokens/s through HTTP >= 97% of in-process, and time to
// first token adds < 5 ms).
//
//   server_overhead MODEL_DIR [REQUESTS=20] [MAX_TOKENS=256] [THREADS=1] [STREAM_INTERVAL_MS=server default]
//
// One engine serves both paths, warm, alternating request by request: an
// in-process request (submit, read its tokens), then the same request as a
// streaming POST /v1/completions (prompt given as the same token ids) over a
// keep-alive loopback connection through rowlm's HttpServer. In-process
// times run from submit(); HTTP times from sending the request to receiving
// bytes, as a client sees them. Prints JSON.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "rowlm/engine.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Sample {
  double ttft = 0, tokens_per_s = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

Sample in_process(rowlm::Engine& engine, const std::vector<int32_t>& prompt, int max_tokens) {
  rowlm::Request r;
  r.prompt_ids = prompt;
  r.sampling.temperature = 0;
  r.sampling.max_tokens = max_tokens;
  r.ignore_eos = true;
  const auto t0 = Clock::now();
  auto h = engine.submit(r);
  rowlm::TokenEvent ev;
  Clock::time_point first{}, last{};
  int tokens = 0;
  while (h->next(ev)) {
    if (ev.token < 0) continue;
    last = Clock::now();
    if (tokens++ == 0) first = last;
  }
  return {seconds(first - t0), double(tokens - 1) / seconds(last - first)};
}

Sample over_http(httplib::Client& client, const std::vector<int32_t>& prompt, int max_tokens) {
  const Json body = {{"model", "m"}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0},
                     {"ignore_eos", true}, {"stream", true}};
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  Clock::time_point first{}, last{};
  bool got_first = false;
  std::string buffer;
  int tokens = 0;
  req.content_receiver = [&](const char* data, std::size_t n, uint64_t, uint64_t) {
    const auto now = Clock::now();
    buffer.append(data, n);
    for (std::size_t end; (end = buffer.find("\n\n")) != std::string::npos; buffer.erase(0, end + 2)) {
      const std::string event = buffer.substr(6, end - 6);  // after "data: "
      if (event == "[DONE]") continue;
      const Json chunk = Json::parse(event);
      if (chunk["choices"].empty() || !chunk["choices"][0]["finish_reason"].is_null()) continue;
      ++tokens;
      last = now;
      if (!got_first) first = now, got_first = true;
    }
    return true;
  };
  const auto t0 = Clock::now();
  auto res = client.send(req);
  if (!res || res->status != 200) throw std::runtime_error("HTTP request failed");
  return {seconds(first - t0), double(tokens - 1) / seconds(last - first)};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: server_overhead MODEL_DIR [REQUESTS=20] [MAX_TOKENS=256] [THREADS=1]\n");
    return 2;
  }
  const int requests = argc > 2 ? std::stoi(argv[2]) : 20;
  const int max_tokens = argc > 3 ? std::stoi(argv[3]) : 256;
  rowlm::EngineOptions options;
  options.model_dir = argv[1];
  options.threads = argc > 4 ? std::stoi(argv[4]) : 1;
  options.prefix_cache = false;  // both paths prefill the same prompt every time
  auto engine = rowlm::Engine::create(options);
  rowlm::server::ServerOptions so;
  so.stream_interval_ms = argc > 5 ? std::stoi(argv[5]) : so.stream_interval_ms;
  so.port = 0;
  so.model_name = "m";
  so.log_requests = false;
  rowlm::server::HttpServer server(*engine, so);
  const int port = server.bind();
  std::thread serving([&] { server.run(); });

  const std::vector<int32_t> prompt =
      engine->tokenizer().encode("And the king said unto him, What is this that thou hast done?", true);
  httplib::Client client("127.0.0.1", port);
  client.set_keep_alive(true);
  client.set_tcp_nodelay(true);
  client.set_read_timeout(120, 0);
  for (int i = 0; i < 2; ++i) in_process(*engine, prompt, max_tokens), over_http(client, prompt, max_tokens);

  std::vector<double> ttft_a, ttft_b, tps_a, tps_b;
  for (int i = 0; i < requests; ++i) {
    const Sample a = in_process(*engine, prompt, max_tokens);
    const Sample b = over_http(client, prompt, max_tokens);
    ttft_a.push_back(a.ttft), tps_a.push_back(a.tokens_per_s);
    ttft_b.push_back(b.ttft), tps_b.push_back(b.tokens_per_s);
  }
  server.stop_accepting();
  client.stop();
  serving.join();

  const Json out = {
      {"requests", requests}, {"max_tokens", max_tokens}, {"prompt_tokens", prompt.size()}, {"threads", options.threads},
      {"in_process", {{"ttft_ms_median", median(ttft_a) * 1e3}, {"tokens_per_s_median", median(tps_a)}}},
      {"http", {{"ttft_ms_median", median(ttft_b) * 1e3}, {"tokens_per_s_median", median(tps_b)}}},
      {"ttft_added_ms", (median(ttft_b) - median(ttft_a)) * 1e3},
      {"tokens_per_s_ratio", median(tps_b) / median(tps_a)}};
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
