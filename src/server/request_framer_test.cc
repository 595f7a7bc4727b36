// RequestFramer: a request is framed the same however its bytes are split,
// a chunked body decodes to the body that was encoded (the encoder here is
// the test's own), limits hold as bytes arrive, and every ambiguous framing
// is refused with a status and a message naming it.

#include "server/request_framer.h"

#include <random>

#include <gtest/gtest.h>

namespace rowlm::server {
namespace {

using State = RequestFramer::State;

// Feeds `bytes` in pieces of random sizes (1..max_piece), stopping at the
// first state other than kNeedMore.
State feed_in_pieces(RequestFramer& f, const std::string& bytes, std::mt19937& rng, std::size_t max_piece) {
  std::size_t pos = 0;
  State s = State::kNeedMore;
  while (pos < bytes.size() && s == State::kNeedMore) {
    const std::size_t n = std::min(bytes.size() - pos, std::size_t(rng() % max_piece) + 1);
    s = f.feed(std::string_view(bytes).substr(pos, n));
    pos += n;
  }
  return s;
}

std::string random_body(std::mt19937& rng, std::size_t size) {
  std::string body(size, '\0');
  for (char& c : body) c = char(rng() % 256);  // any byte, CRLFs and NULs included
  return body;
}

// Chunked encoding of `body` in random chunk sizes, with random extensions
// and hex case: written from RFC 9112 §7.1, independently of the framer.
std::string chunked(const std::string& body, std::mt19937& rng) {
  std::string out;
  std::size_t pos = 0;
  while (pos < body.size()) {
    const std::size_t n = std::min(body.size() - pos, std::size_t(rng() % 300) + 1);
    char size[32];
    std::snprintf(size, sizeof size, rng() % 2 ? "%zx" : "%zX", n);
    out += size;
    if (rng() % 4 == 0) out += ";ext=1";
    out += "\r\n" + body.substr(pos, n) + "\r\n";
    pos += n;
  }
  return out + "0\r\n\r\n";
}

TEST(RequestFramer, SameRequestHoweverSplitLengthOrChunked) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const std::string body = random_body(rng, rng() % 2000);
    const std::string head = "POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nX-Thing:  spaced value \r\n";
    const std::string expected = head + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    const bool use_chunked = trial % 2 == 1;
    const std::string wire = use_chunked ? head + "Transfer-Encoding: chunked\r\n\r\n" + chunked(body, rng)
                                         : head + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    const std::string next = "GET /health HTTP/1.1\r\n\r\n";
    RequestFramer f(FramerLimits{});
    ASSERT_EQ(feed_in_pieces(f, wire + next, rng, 1 + rng() % 64), State::kComplete) << f.message();
    // Whatever arrived after the request is kept for the next one.
    std::string rest = f.take_leftover();
    EXPECT_EQ(f.request(), expected) << "trial " << trial;
    EXPECT_EQ(f.path(), "/v1/completions");
    EXPECT_TRUE(next.starts_with(rest));
    RequestFramer g(FramerLimits{});
    EXPECT_EQ(g.feed(rest), rest == next ? State::kComplete : State::kNeedMore);
  }
}

TEST(RequestFramer, ChunkedBodyOverTheLimitIsRefusedBeforeItAllArrives) {
  const FramerLimits limits{.max_head_bytes = 4096, .max_body_bytes = 1000};
  RequestFramer f(limits);
  EXPECT_EQ(f.feed("POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"), State::kNeedMore);
  const std::string chunk = "100\r\n" + std::string(256, 'x') + "\r\n";
  for (int i = 0; i < 3; ++i) EXPECT_EQ(f.feed(chunk), State::kNeedMore);  // 768 bytes
  // The fourth chunk's size line alone passes the limit: refused at once.
  EXPECT_EQ(f.feed("100\r\n"), State::kRefused);
  EXPECT_EQ(f.status(), 413);
  EXPECT_NE(f.message().find("1000 bytes"), std::string::npos);
  // And one huge declared chunk is refused from its size line.
  RequestFramer g(limits);
  EXPECT_EQ(g.feed("POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffff\r\n"), State::kRefused);
  EXPECT_EQ(g.status(), 413);
  // Exactly the limit passes.
  RequestFramer h(limits);
  EXPECT_EQ(h.feed("POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3e8\r\n" + std::string(1000, 'y') +
                   "\r\n0\r\n\r\n"),
            State::kComplete);
}

TEST(RequestFramer, ContentLengthOverTheLimitIsRefusedFromTheHead) {
  RequestFramer f(FramerLimits{.max_head_bytes = 4096, .max_body_bytes = 10});
  EXPECT_EQ(f.feed("POST /v1/messages HTTP/1.1\r\nanthropic-version: 1\r\nContent-Length: 11\r\n\r\n"), State::kRefused);
  EXPECT_EQ(f.status(), 413);
  EXPECT_EQ(f.path(), "/v1/messages");
  EXPECT_TRUE(f.has_anthropic_version());
}

TEST(RequestFramer, HeadOverTheLimitIsRefusedAsItGrows) {
  RequestFramer f(FramerLimits{.max_head_bytes = 100, .max_body_bytes = 10});
  EXPECT_EQ(f.feed("GET /health HTTP/1.1\r\n"), State::kNeedMore);
  EXPECT_EQ(f.path(), "/health");  // known before the head is whole
  EXPECT_EQ(f.feed(std::string(60, 'a')), State::kNeedMore);
  EXPECT_EQ(f.feed(std::string(60, 'a')), State::kRefused);
  EXPECT_EQ(f.status(), 431);
}

TEST(RequestFramer, ExpectContinueIsAnsweredOnceAndNotPassedOn) {
  RequestFramer f(FramerLimits{});
  EXPECT_FALSE(f.take_continue());
  EXPECT_EQ(f.feed("POST /x HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"), State::kNeedMore);
  EXPECT_TRUE(f.take_continue());
  EXPECT_FALSE(f.take_continue());
  EXPECT_EQ(f.feed("hi"), State::kComplete);
  EXPECT_EQ(f.request(), "POST /x HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi");
}

TEST(RequestFramer, AmbiguousFramingIsRefusedNamingTheProblem) {
  struct Case {
    std::string bytes;
    int status;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"POST /x HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc", 400, "more than one Content-Length"},
      {"POST /x HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400, "both"},
      {"POST /x HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501, "gzip, chunked"},
      {"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400, "more than one Transfer-Encoding"},
      {"POST /x HTTP/1.1\r\nTransfer-Encoding : chunked\r\n\r\n", 400, "header name"},
      {"POST /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400, "Content-Length"},
      {"POST /x HTTP/1.1\r\nContent-Length: 1e3\r\n\r\n", 400, "Content-Length"},
      {"POST /x HTTP/1.1\r\nA: b\r\n folded\r\n\r\n", 400, "obs-fold"},
      {"POST /x HTTP/1.1\r\nA: b\nB: c\r\n\r\n", 400, "bare CR, LF or NUL"},
      {"POST /x HTTP/1.1\r\nno colon\r\n\r\n", 400, "malformed header line"},
      {"POST  /x HTTP/1.1\r\n\r\n", 400, "request line"},
      {"POST /x\r\n\r\n", 400, "request line"},
      {"POST /x HTTP/2.0\r\n\r\n", 505, "HTTP/2.0"},
      {"POST /x HTTP/1.1\r\nExpect: 200-ok\r\n\r\n", 417, "200-ok"},
      {"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400, "chunk size 'zz'"},
      {"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\r\n", 400, "chunk size ''"},
      {"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXY", 400, "not followed by CRLF"},
      {"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nTrailer: x\r\n\r\n", 400, "trailers"},
      {"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + std::string(2000, '1'), 400, "longer than 1024"},
  };
  for (const Case& c : cases) {
    RequestFramer f(FramerLimits{});
    EXPECT_EQ(f.feed(c.bytes), State::kRefused) << c.bytes;
    EXPECT_EQ(f.status(), c.status) << c.bytes;
    EXPECT_NE(f.message().find(c.says), std::string::npos) << c.bytes << " -> " << f.message();
  }
}

TEST(RequestFramer, NothingYetIsNotStarted) {
  RequestFramer f(FramerLimits{});
  EXPECT_EQ(f.feed(""), State::kNeedMore);
  EXPECT_FALSE(f.started());
  EXPECT_EQ(f.feed("G"), State::kNeedMore);
  EXPECT_TRUE(f.started());
  EXPECT_FALSE(f.head_complete());
  EXPECT_EQ(f.feed("ET / HTTP/1.0\r\n\r\n"), State::kComplete);
  EXPECT_EQ(f.request(), "GET / HTTP/1.0\r\nContent-Length: 0\r\n\r\n");
}

}  // namespace
}  // namespace rowlm::server
