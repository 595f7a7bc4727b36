#include "hub/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <exception>

namespace rowlm::hub {

namespace {

// curl_global_init must run once before any handle exists; a function-local
// static does that once, thread-safely, and is never changed afterwards.
void init_curl_once() {
  static const CURLcode rc = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (rc != CURLE_OK) throw Error(std::string("libcurl failed to initialise: ") + curl_easy_strerror(rc));
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

std::string trim(const std::string& s) {
  const auto a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  const auto b = s.find_last_not_of(" \t\r\n");
  return s.substr(a, b - a + 1);
}

bool retryable(CURLcode rc) {
  switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
      return true;
    default:
      return false;
  }
}

constexpr std::size_t kErrorBodyCap = 4096;

}  // namespace

struct HttpClient::Impl {
  CURL* curl = nullptr;
  ~Impl() {
    if (curl) curl_easy_cleanup(curl);
  }

  // One transfer's state, reached from curl's callbacks.
  struct Transfer {
    CURL* curl;
    HttpResponse* response;
    const Begin* begin = nullptr;
    const Sink* sink = nullptr;
    const Progress* progress = nullptr;
    bool to_body = false;     // collect the whole body (get)
    bool started = false;     // begin() called
    std::uint64_t bytes = 0;  // body bytes passed to the sink
    std::exception_ptr error;  // thrown by a callback, rethrown after curl returns
  };

  static size_t on_header(char* data, size_t size, size_t n, void* user) {
    auto* t = static_cast<Transfer*>(user);
    const std::string line(data, size * n);
    if (line.rfind("HTTP/", 0) == 0) {
      t->response->headers.clear();  // a new response (after a redirect or a 100)
    } else if (const auto colon = line.find(':'); colon != std::string::npos) {
      t->response->headers[lower(trim(line.substr(0, colon)))] = trim(line.substr(colon + 1));
    }
    return size * n;
  }

  static size_t on_body(char* data, size_t size, size_t n, void* user) {
    auto* t = static_cast<Transfer*>(user);
    const std::size_t len = size * n;
    try {
      long status = 0;
      curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
      if (t->to_body) {
        t->response->body.append(data, len);
      } else if (status < 200 || status >= 300) {
        const std::size_t room = kErrorBodyCap - std::min(kErrorBodyCap, t->response->body.size());
        t->response->body.append(data, std::min(room, len));
      } else {
        if (!t->started) {
          t->started = true;
          if (*t->begin) (*t->begin)(status, t->response->headers);
        }
        (*t->sink)(std::string_view(data, len));
        t->bytes += len;
        if (*t->progress) (*t->progress)(t->bytes);
      }
      return len;
    } catch (...) {
      t->error = std::current_exception();
      return CURL_WRITEFUNC_ERROR;  // aborts the transfer
    }
  }

  HttpResponse perform(const std::string& url, const RequestOptions& options, bool head, Transfer& t) {
    HttpResponse response;
    t.curl = curl;
    t.response = &response;
    curl_easy_reset(curl);
    curl_slist* list = nullptr;
    for (const auto& h : options.headers) list = curl_slist_append(list, h.c_str());
    struct ListGuard {
      curl_slist* l;
      ~ListGuard() { curl_slist_free_all(l); }
    } guard{list};
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, list);
    curl_easy_setopt(curl, CURLOPT_USERAGENT, "rowlm/0.1.0");
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, options.follow_redirects ? 1L : 0L);
    curl_easy_setopt(curl, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, 20L);
    // A transfer that moves less than a byte a second for 60 s has stalled.
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &Impl::on_header);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &Impl::on_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t);
    if (head) curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
    const CURLcode rc = curl_easy_perform(curl);
    if (t.error) std::rethrow_exception(t.error);
    if (rc != CURLE_OK)
      throw TransferError(std::string(curl_easy_strerror(rc)) + " (" + url + ")", retryable(rc));
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
    char* effective = nullptr;
    curl_easy_getinfo(curl, CURLINFO_EFFECTIVE_URL, &effective);
    response.url = effective ? effective : url;
    return response;
  }
};

HttpClient::HttpClient() : impl_(std::make_unique<Impl>()) {
  init_curl_once();
  impl_->curl = curl_easy_init();
  if (!impl_->curl) throw Error("libcurl: cannot create a handle");
}

HttpClient::~HttpClient() = default;

HttpResponse HttpClient::head(const std::string& url, const RequestOptions& options) {
  Impl::Transfer t{};
  t.to_body = true;
  return impl_->perform(url, options, /*head=*/true, t);
}

HttpResponse HttpClient::get(const std::string& url, const RequestOptions& options) {
  Impl::Transfer t{};
  t.to_body = true;
  return impl_->perform(url, options, /*head=*/false, t);
}

HttpResponse HttpClient::stream(const std::string& url, const RequestOptions& options, const Begin& begin,
                                const Sink& sink, const Progress& progress) {
  Impl::Transfer t{};
  t.begin = &begin;
  t.sink = &sink;
  t.progress = &progress;
  return impl_->perform(url, options, /*head=*/false, t);
}

std::string url_origin(const std::string& url) {
  const auto scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return lower(url);
  const auto host_end = url.find_first_of("/?#", scheme_end + 3);
  return lower(url.substr(0, host_end));
}

std::string url_escape(const std::string& text, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out.push_back(char(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

}  // namespace rowlm::hub
