#pragma once
// cpp-httplib's request parsing, routing and response writing, run on one
// whole request that the front door (front_door.h) has already read, with
// the reply written to the request's connection. cpp-httplib's own listener,
// accept loop and connection threads are not used: they cannot bound how
// long a client may take to send its headers, nor keep idle clients from
// holding every thread (see front_door.h).
//
// Threads: serve() may run on many handler threads at once (routes are
// installed before the first request).

#include <functional>
#include <memory>
#include <string>

#include <httplib.h>

#include "server/connection.h"

namespace rowlm::server {

class Router : public httplib::Server {
 public:
  Router();
  ~Router() override;
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  // Parses `request` (the framer's normal form), routes it and writes the
  // reply to `connection`. `on_request` sees the parsed request before its
  // handler runs. Returns whether the connection may carry another request
  // (the reply went out whole, and neither side asked to close).
  bool serve(Connection& connection, const std::string& request, bool close_after,
             const std::function<void(httplib::Request&)>& on_request);

 private:
  int placeholder_fd_ = -1;
};

}  // namespace rowlm::server
