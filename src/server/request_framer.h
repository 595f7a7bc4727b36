#pragma once
// Frames one HTTP/1.1 request as its bytes arrive, before anything else
// parses it. The front door (front_door.h) keeps a connection in its event
// loop, holding no thread, until the connection's framer says its request is
// whole; so a client that trickles bytes costs a buffer, not a handler, and
// the body limit holds however the body is sent (Content-Length or chunked),
// checked as the bytes arrive rather than after they are all in memory.
//
// A whole request is handed on in one normal form: the request line and
// header lines as received, without Transfer-Encoding, Content-Length and
// Expect, then `Content-Length: N`, the blank line and the body, decoded if
// it came chunked. The parser that reads it next (cpp-httplib) therefore
// never frames a body itself and cannot disagree with this framer about
// where a request ends (no request smuggling between the two).
//
// Strict where leniency would be ambiguous: lines end in CRLF; header names
// are tokens (no space before the colon); no obs-fold; at most one
// Content-Length, never with Transfer-Encoding; only `chunked` transfer
// coding; no chunked trailers. Anything else is refused with a status and a
// message naming the problem.
//
// Not thread-safe: one framer per connection, used by one thread at a time.

#include <cstddef>
#include <string>
#include <string_view>

namespace rowlm::server {

struct FramerLimits {
  std::size_t max_head_bytes = 64u << 10;  // request line and headers, with their CRLFs
  std::size_t max_body_bytes = 8u << 20;   // the body, as decoded
};

class RequestFramer {
 public:
  enum class State {
    kNeedMore,  // feed more bytes
    kComplete,  // request() is whole; leftover() holds the bytes after it
    kRefused,   // status() and message() say why; the connection must close
  };

  explicit RequestFramer(FramerLimits limits);

  // Takes the next bytes of the connection. In kComplete or kRefused it
  // takes nothing more (the bytes are kept as leftover, or dropped).
  State feed(std::string_view bytes);
  State state() const { return state_; }

  // Whether any byte of a request has arrived (an idle keep-alive connection
  // has none).
  bool started() const { return started_; }
  // Whether the request line and headers have all arrived.
  bool head_complete() const { return phase_ != Phase::kHead; }
  // True once, right after the head of a request with a body and
  // `Expect: 100-continue` arrived within the limits: the caller sends
  // `100 Continue` so the client sends the body.
  bool take_continue();

  // kComplete: the request in normal form, and the bytes received after it.
  const std::string& request() const { return request_; }
  std::string take_leftover();

  // kRefused: the HTTP status (400, 413, 431, 501, 505) and why.
  int status() const { return status_; }
  const std::string& message() const { return message_; }

  // What the head said, once its request line (path) or whole head
  // (anthropic) arrived; for replying in the endpoint's error shape.
  const std::string& path() const { return path_; }
  bool has_anthropic_version() const { return anthropic_version_; }

 private:
  enum class Phase { kHead, kChunkSize, kChunkData, kChunkDataEnd, kChunkEnd, kLengthBody, kDone };

  State refuse(int status, std::string message);
  State parse_head(std::size_t head_end);
  State step();
  State finish();

  FramerLimits limits_;
  State state_ = State::kNeedMore;
  Phase phase_ = Phase::kHead;
  bool started_ = false;
  bool continue_pending_ = false;

  std::string in_;          // received bytes not yet consumed
  std::size_t scanned_ = 0;  // kHead: bytes of in_ already searched for the blank line
  std::string head_;        // normal-form request line and headers (without Content-Length)
  std::string body_;        // decoded body
  std::size_t body_length_ = 0;     // kLengthBody: the declared length
  std::size_t chunk_left_ = 0;      // kChunkData: bytes of the current chunk still to come

  std::string request_;
  int status_ = 0;
  std::string message_;
  std::string path_;
  bool anthropic_version_ = false;
};

}  // namespace rowlm::server
