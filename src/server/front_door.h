#pragma once
// The server's connections: the listening socket, one event loop (epoll)
// that accepts clients and reads their requests, and a fixed pool of handler
// threads that serve whole requests.
//
// Why an event loop in front of the handlers: a handler thread serves one
// request at a time and a streamed reply holds it to the end, so a thread
// must never wait for a client's bytes. Here a connection costs a thread
// only once its whole request has arrived (request_framer.h); until then it
// is a buffer in the loop, bounded by
//   - a deadline for the request line and headers (header_timeout, from the
//     connection's accept, or from its first byte on a kept-alive one),
//     however slowly the bytes trickle, and one for the body (body_timeout);
//   - the body limit, applied as the bytes arrive, chunked or not;
//   - max_connections_per_client open connections per client address, and
//     max_connections in all;
// and the listening socket has a real backlog. So idle or trickling clients
// cannot take the handlers, /health or generation away from the others.
//
// While a request is served the loop watches its socket, and reports a
// client that hangs up (Connection::report_hang_up) at once.
//
// Threads: run() is the event loop, on the caller's thread; stop() may be
// called from any thread; Serve runs on the handler threads.

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "server/connection.h"
#include "server/request_framer.h"

namespace rowlm::server {

struct FrontDoorOptions {
  std::string host = "127.0.0.1";
  int port = 0;                  // 0 picks a free port
  int handler_threads = 64;
  FramerLimits limits;
  std::chrono::milliseconds header_timeout{10000};
  std::chrono::milliseconds body_timeout{30000};
  std::chrono::milliseconds keep_alive_timeout{5000};  // idle between requests
  std::chrono::milliseconds write_timeout{30000};      // a client that reads nothing for this long is dropped
  int max_connections = 4096;
  int max_connections_per_client = 256;
  int backlog = 4096;            // the kernel caps it at net.core.somaxconn
};

// A request the front door answers itself, before any handler sees it.
struct Refusal {
  int status = 0;           // 400, 408, 413, 417, 429, 431, 501, 503, 505
  std::string message;
  std::string path;         // the request's path, when known
  bool anthropic = false;   // the request had an anthropic-version header
};

class FrontDoor {
 public:
  // Serves one whole request, in the framer's normal form, on a handler
  // thread; returns whether the connection may carry another request.
  // Exceptions are caught and close the connection.
  using Serve = std::function<bool(const std::shared_ptr<Connection>&, const std::string& request)>;
  // The JSON body of a refusal's reply (and a chance to count it).
  using Refuse = std::function<std::string(const Refusal&)>;

  FrontDoor(FrontDoorOptions options, Serve serve, Refuse refuse);
  ~FrontDoor();  // stops, closes every connection and joins the handlers
  FrontDoor(const FrontDoor&) = delete;
  FrontDoor& operator=(const FrontDoor&) = delete;

  // Binds and listens; returns the port. Throws rowlm::Error naming the
  // address when it cannot.
  int bind();
  // The event loop, until stop(): then it closes the listening socket and
  // every connection not being served, lets the requests being served finish
  // (their connections close after the reply), and returns when none is
  // left.
  void run();
  // Thread-safe; may come before run().
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rowlm::server
