// rowlm serve: the HTTP API over one engine, until SIGINT or SIGTERM.
// Built when cpp-httplib is found (ROWLM_HAVE_SERVER).

#ifdef ROWLM_HAVE_SERVER

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <arpa/inet.h>
#include <pthread.h>
#include <sys/resource.h>

#include "cli/commands.h"
#include "cli/model_source.h"
#include "cli/request_options.h"
#include "cli/runtime.h"
#include "core/error.h"
#include "rowlm/engine.h"
#include "server/server.h"

namespace rowlm::cli {

namespace {

int int_option(const Args& args, const std::string& name, int64_t lo, int64_t hi) {
  const int64_t v = args.get_int(name);
  if (v < lo || v > hi)
    throw Error("--" + name + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                std::to_string(v));
  return int(v);
}

// SIGINT and SIGTERM are blocked in every thread (the engine's and the
// server's threads inherit the mask) and taken by one waiting thread, which
// shuts the server down in order.
class ShutdownSignals {
 public:
  ShutdownSignals() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, &previous_);
    // A client that hangs up mid-reply makes a write fail, not the process die.
    std::signal(SIGPIPE, SIG_IGN);
  }
  ~ShutdownSignals() { pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }
  ShutdownSignals(const ShutdownSignals&) = delete;
  ShutdownSignals& operator=(const ShutdownSignals&) = delete;

  // The signal taken within `ms` milliseconds, or 0.
  int wait(long ms) const {
    timespec ts{ms / 1000, (ms % 1000) * 1'000'000};
    const int sig = sigtimedwait(&set_, nullptr, &ts);
    return sig > 0 ? sig : 0;
  }

 private:
  sigset_t set_{}, previous_{};
};

// Whether `host` only ever reaches this machine (a loopback address, or
// "localhost"); anything else may be reachable by others.
bool is_loopback_host(const std::string& host) {
  if (host == "localhost") return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return ::inet_pton(AF_INET6, host.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

// Every open connection is a descriptor: raise the soft limit to the hard
// one (often 1024 → 1M) so --max-connections can be reached.
void raise_descriptor_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

}  // namespace

int run_serve(const std::vector<std::string>& argv) {
  Args args("serve",
            "Serves a model over HTTP: OpenAI's /v1/chat/completions, /v1/completions and /v1/responses,\n"
            "Anthropic's /v1/messages, /v1/models, /health, Prometheus /metrics and a chat page at / (open\n"
            "it in a browser; --no-ui turns it off). All requests share one continuous batch. SIGINT or SIGTERM\n"
            "stops accepting, lets running requests finish (up to --shutdown-grace), cancels the rest and\n"
            "exits 0.");
  add_model_argument(args)
      .option("host", "ADDR", "address to listen on", "127.0.0.1")
      .option("port", "N", "port to listen on; 0 picks a free one (the address is printed on stderr)", "8080")
      .option("api-key", "KEY",
              "require this key on /v1/* (Authorization: Bearer KEY, or x-api-key: KEY); default: the "
              "ROWLM_API_KEY environment variable, if set")
      .option("served-model-name", "NAME", "the model id clients send (default: ORG/REPO, or MODEL_DIR's name)")
      .option("chat-format", "NAME", "chat format instead of the one detected from MODEL_DIR")
      .option("max-body", "BYTES", "largest request body; larger ones get 413", "8M")
      .option("http-threads", "N", "requests served at once (default: max-running + max-waiting + 8)")
      .option("header-timeout", "SECONDS",
              "a request's line and headers must arrive within this, however slowly they trickle; else 408", "10")
      .option("max-connections", "N", "open connections in all; more are closed at once", "4096")
      .option("max-connections-per-client", "N", "open connections per client address; more get 429", "256")
      .option("stream-interval", "MS",
              "streamed replies write the first token at once, then the tokens of each MS milliseconds "
              "together (each its own SSE event); 0 writes every token as it comes",
              "10")
      .option("shutdown-grace", "SECONDS", "on SIGINT/SIGTERM, how long running requests may finish", "10")
      .option("response-store-bytes", "BYTES",
              "memory for stored Responses API responses (previous_response_id, GET /v1/responses/ID); the "
              "oldest go first; 0 stores none",
              "64M")
      .option("response-store-ttl", "SECONDS", "how long a stored response is kept", "3600")
      .flag("quiet", "no log line per request")
      .flag("no-ui", "do not serve the chat page at / (GET / answers 404)");
  // Every queued request holds a connection thread (see --http-threads); a
  // CPU server's queue of 256 is already many seconds of work.
  add_engine_options(args, /*default_max_waiting=*/256);
  if (!args.parse(argv)) return 0;
  const ModelSource model = model_source_from(args);
  const EngineOptions eo = engine_options_from(args, model.dir, /*background=*/true);

  server::ServerOptions so;
  so.host = args.get("host");
  so.port = int_option(args, "port", 0, 65535);
  if (auto key = args.get_opt("api-key")) so.api_key = *key;
  else if (const char* env = std::getenv("ROWLM_API_KEY")) so.api_key = env;
  so.model_name = args.get_opt("served-model-name").value_or(model.repo);  // empty: the directory's name
  so.chat_format = args.get_opt("chat-format").value_or("");
  so.max_body_bytes = parse_bytes(args.get("max-body"), "--max-body");
  // Each request holds a connection thread while it waits or streams; with
  // a thread for every request the engine may hold, one more request always
  // finds a thread to tell it 429.
  so.http_threads = args.has("http-threads") ? int_option(args, "http-threads", 1, 100000)
                                             : eo.max_running + eo.max_waiting + 8;
  so.log_requests = !args.flag_set("quiet");
  so.chat_page = !args.flag_set("no-ui");
  so.stream_interval_ms = int_option(args, "stream-interval", 0, 10000);
  so.header_timeout_ms = int_option(args, "header-timeout", 1, 3600) * 1000;
  so.max_connections = int_option(args, "max-connections", 1, 1000000);
  so.max_connections_per_client = int_option(args, "max-connections-per-client", 1, 1000000);
  so.response_store_bytes = parse_bytes(args.get("response-store-bytes"), "--response-store-bytes");
  so.response_store_seconds = int_option(args, "response-store-ttl", 0, 365 * 86400);
  const double grace = parse_double(args.get("shutdown-grace"), "--shutdown-grace");
  if (!(grace >= 0 && grace <= 86400)) throw Error("--shutdown-grace must be in [0, 86400] seconds");

  if (so.api_key.empty() && !is_loopback_host(so.host))
    std::fprintf(stderr,
                 "rowlm serve: warning: listening on %s without an API key: anyone who can reach it may use the "
                 "model (--api-key KEY or ROWLM_API_KEY)\n",
                 so.host.c_str());
  raise_descriptor_limit();
  ShutdownSignals signals;  // before any thread starts
  std::unique_ptr<Engine> engine = open_engine(eo);
  server::HttpServer server(*engine, so);
  const int port = server.bind();
  std::fprintf(stderr, "rowlm serve: serving %s as '%s' on http://%s:%d\n", eo.model_dir.c_str(),
               server.options().model_name.c_str(), so.host.c_str(), port);
  std::fflush(stderr);

  std::jthread on_signal([&](std::stop_token stop) {
    while (!stop.stop_requested()) {
      const int sig = signals.wait(100);
      if (!sig) continue;
      std::fprintf(stderr, "rowlm serve: %s: not accepting new requests; letting running ones finish (up to %g s)\n",
                   sig == SIGINT ? "SIGINT" : "SIGTERM", grace);
      server.stop_accepting();
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace);
      while (!server.wait_idle(std::chrono::milliseconds(100))) {
        // A second signal, or the grace period over: cancel what still runs.
        if (std::chrono::steady_clock::now() >= deadline || signals.wait(0)) {
          std::fprintf(stderr, "rowlm serve: cancelling the requests still running\n");
          engine->shutdown();
          break;
        }
      }
      return;
    }
  });
  server.run();
  on_signal.request_stop();
  on_signal.join();
  engine->shutdown();
  std::fprintf(stderr, "rowlm serve: stopped\n");
  return 0;
}

}  // namespace rowlm::cli

#endif  // ROWLM_HAVE_SERVER
