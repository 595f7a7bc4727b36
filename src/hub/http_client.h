#pragma once
// A small blocking HTTP(S) client over libcurl for the Hub: HEAD and GET
// with request headers, the final response's status and headers, and bodies
// streamed to a callback. One HttpClient is one connection cache; use it
// from one thread at a time.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace rowlm::hub {

// The transfer itself failed (no connection, a connection lost mid-body, a
// timeout): no HTTP status to judge. `retryable` says whether trying again
// may help.
class TransferError : public Error {
 public:
  TransferError(const std::string& what, bool retryable) : Error(what), retryable_(retryable) {}
  bool retryable() const { return retryable_; }

 private:
  bool retryable_;
};

struct HttpResponse {
  long status = 0;
  std::map<std::string, std::string> headers;  // of the last response; names in lower case
  std::string body;                            // for get(); for stream(), only a non-2xx body (capped)
  std::string url;                             // the URL that answered (after redirects)

  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

struct RequestOptions {
  std::vector<std::string> headers;  // "Name: value"
  bool follow_redirects = false;     // curl never re-sends Authorization to another host
};

class HttpClient {
 public:
  HttpClient();
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  HttpResponse head(const std::string& url, const RequestOptions& options);
  // The whole body in HttpResponse::body (for small answers such as API JSON).
  HttpResponse get(const std::string& url, const RequestOptions& options);

  // GET whose 2xx body goes to `sink` as it arrives; before the first byte,
  // `begin(status, headers)` is called once (it may throw to refuse the
  // answer). A sink that throws aborts the transfer and the exception
  // propagates. `progress(bytes_so_far)` is called now and then.
  using Begin = std::function<void(long status, const std::map<std::string, std::string>& headers)>;
  using Sink = std::function<void(std::string_view bytes)>;
  using Progress = std::function<void(std::uint64_t bytes)>;
  HttpResponse stream(const std::string& url, const RequestOptions& options, const Begin& begin, const Sink& sink,
                      const Progress& progress);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// "scheme://host[:port]" of `url` (lower-case), to tell whether two URLs
// share an origin.
std::string url_origin(const std::string& url);

// Percent-encodes `text` for a URL path; '/' is kept when keep_slash.
std::string url_escape(const std::string& text, bool keep_slash);

}  // namespace rowlm::hub
