#pragma once
// rowlm's HTTP API over one Engine: OpenAI's /v1/chat/completions,
// /v1/completions and /v1/responses, Anthropic's /v1/messages, /v1/models, /health,
// /metrics (Prometheus) and a chat page at / (ui/). Every request shares
// the engine's continuous batch.
//
//   HttpServer server(*engine, options);
//   int port = server.bind();
//   std::thread t([&] { server.run(); });
//   ...
//   server.stop_accepting();            // e.g. on SIGTERM
//   if (!server.wait_idle(10s)) engine->shutdown();  // cancels the rest
//   t.join();

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "rowlm/engine.h"

namespace rowlm::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                        // 0 picks a free port
  std::string api_key;                    // non-empty: /v1/* needs it (Bearer or x-api-key)
  std::string model_name;                 // the served model id; "" = the model directory's name
  std::string chat_format;                // "" = chosen from the model directory
  std::size_t max_body_bytes = 8u << 20;  // larger bodies get 413
  int http_threads = 64;                  // requests served at once (each streaming reply holds a thread)
  int keep_alive_seconds = 5;             // idle keep-alive connections close after this
  // A request's line and headers must arrive within this (from the
  // connection's accept, or its first byte on a kept-alive connection),
  // however slowly they trickle; else 408 and the connection closes.
  int header_timeout_ms = 10000;
  int max_connections = 4096;             // open connections in all; more are closed at once
  int max_connections_per_client = 256;   // open connections per client address; more get 429
  bool log_requests = true;               // one line per request on stderr
  // A streamed reply writes its first token at once, then the tokens that
  // arrive within this many milliseconds of the last write together (each
  // still its own SSE event): fewer wake-ups and syscalls per token, which on
  // a machine whose cores the engine keeps busy is what HTTP costs. 0 writes
  // every token as it comes. 10 ms is invisible to a reader and groups tokens
  // only when one request streams faster than 100 tokens/s.
  int stream_interval_ms = 10;
  bool chat_page = true;                  // GET / serves the chat page (ui/); false: 404
  // Responses API (store: true): responses kept for previous_response_id and
  // GET /v1/responses/{id}, within this many bytes (0 keeps none) and for
  // this many seconds.
  std::size_t response_store_bytes = 64u << 20;
  int response_store_seconds = 3600;
};

class HttpServer {
 public:
  // Throws rowlm::Error for bad options (unknown chat format, ...).
  HttpServer(Engine& engine, ServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket and returns its port. Throws rowlm::Error
  // naming the address when it cannot.
  int bind();
  // Serves until stop_accepting(); returns once every connection closed.
  void run();
  // Closes the listening socket and the idle connections; requests in
  // flight continue (their connections close after the reply), requests
  // that arrive meanwhile get 503. Thread-safe.
  void stop_accepting();
  // Waits until no generation request is in flight; false on timeout.
  bool wait_idle(std::chrono::milliseconds timeout) const;

  const ServerOptions& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rowlm::server
