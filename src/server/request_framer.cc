#include "server/request_framer.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <utility>

namespace rowlm::server {

namespace {

constexpr std::string_view kCrlf = "\r\n";
// A chunk-size line (hex size and any extensions) longer than this is not
// framing but an attempt to make the server buffer a line.
constexpr std::size_t kMaxChunkLine = 1024;

// RFC 9110 token characters (header field names).
bool is_token_char(char c) {
  if (std::isalnum(static_cast<unsigned char>(c))) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 40)) out += std::isprint(static_cast<unsigned char>(c)) ? c : '?';
  if (s.size() > 40) out += "...";
  return out;
}

}  // namespace

RequestFramer::RequestFramer(FramerLimits limits) : limits_(limits) {}

RequestFramer::State RequestFramer::refuse(int status, std::string message) {
  status_ = status;
  message_ = std::move(message);
  phase_ = Phase::kDone;
  in_.clear();
  return state_ = State::kRefused;
}

bool RequestFramer::take_continue() { return std::exchange(continue_pending_, false); }

std::string RequestFramer::take_leftover() { return std::exchange(in_, {}); }

RequestFramer::State RequestFramer::feed(std::string_view bytes) {
  if (state_ != State::kNeedMore) {
    if (state_ == State::kComplete) in_.append(bytes);
    return state_;
  }
  if (!bytes.empty()) started_ = true;
  in_.append(bytes);
  while (state_ == State::kNeedMore) {
    const std::size_t before = in_.size();
    const Phase phase = phase_;
    step();
    if (state_ == State::kNeedMore && in_.size() == before && phase_ == phase) break;  // needs more bytes
  }
  return state_;
}

RequestFramer::State RequestFramer::step() {
  switch (phase_) {
    case Phase::kHead: {
      const std::size_t from = scanned_ >= 3 ? scanned_ - 3 : 0;
      const std::size_t end = in_.find("\r\n\r\n", from);
      if (end == std::string::npos) {
        scanned_ = in_.size();
        if (path_.empty()) {  // the request line, once whole, names the path for an error reply
          const std::size_t eol = in_.find(kCrlf);
          if (eol != std::string::npos) {
            const std::string_view line(in_.data(), eol);
            const std::size_t sp = line.find(' ');
            if (sp != std::string_view::npos) path_ = std::string(line.substr(sp + 1, line.find_first_of(" ?", sp + 1) - sp - 1));
          }
        }
        if (in_.size() > limits_.max_head_bytes)
          return refuse(431, "the request line and headers are larger than " + std::to_string(limits_.max_head_bytes) +
                                 " bytes");
        return state_;
      }
      if (end + 4 > limits_.max_head_bytes)
        return refuse(431, "the request line and headers are larger than " + std::to_string(limits_.max_head_bytes) +
                               " bytes");
      return parse_head(end + 4);
    }
    case Phase::kLengthBody: {
      const std::size_t take = std::min(in_.size(), body_length_ - body_.size());
      body_.append(in_, 0, take);
      in_.erase(0, take);
      if (body_.size() == body_length_) return finish();
      return state_;
    }
    case Phase::kChunkSize: {
      const std::size_t eol = in_.find(kCrlf);
      if (eol == std::string::npos) {
        if (in_.size() > kMaxChunkLine) return refuse(400, "a chunk-size line is longer than 1024 bytes");
        return state_;
      }
      if (eol > kMaxChunkLine) return refuse(400, "a chunk-size line is longer than 1024 bytes");
      const std::string_view line(in_.data(), eol);
      const std::string_view size_text = line.substr(0, line.find(';'));
      std::uint64_t size = 0;
      if (size_text.empty() || size_text.size() > 15)
        return refuse(400, "bad chunk size '" + printable(size_text) + "'");
      for (char c : size_text) {
        if (!std::isxdigit(static_cast<unsigned char>(c))) return refuse(400, "bad chunk size '" + printable(size_text) + "'");
        size = size * 16 + std::uint64_t(std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : std::tolower(c) - 'a' + 10);
      }
      if (size > limits_.max_body_bytes - body_.size())
        return refuse(413, "the request body is larger than the limit of " + std::to_string(limits_.max_body_bytes) +
                               " bytes");
      in_.erase(0, eol + 2);
      chunk_left_ = std::size_t(size);
      phase_ = size == 0 ? Phase::kChunkEnd : Phase::kChunkData;
      return state_;
    }
    case Phase::kChunkData: {
      const std::size_t take = std::min(in_.size(), chunk_left_);
      body_.append(in_, 0, take);
      in_.erase(0, take);
      chunk_left_ -= take;
      if (chunk_left_ == 0) phase_ = Phase::kChunkDataEnd;
      return state_;
    }
    case Phase::kChunkDataEnd:
    case Phase::kChunkEnd: {
      if (in_.size() < 2) return state_;
      if (in_.compare(0, 2, kCrlf) != 0)
        return refuse(400, phase_ == Phase::kChunkEnd ? "chunked trailers are not supported"
                                                      : "a chunk's data is not followed by CRLF");
      in_.erase(0, 2);
      if (phase_ == Phase::kChunkEnd) return finish();
      phase_ = Phase::kChunkSize;
      return state_;
    }
    case Phase::kDone: return state_;
  }
  return state_;
}

RequestFramer::State RequestFramer::parse_head(std::size_t head_end) {
  const std::string_view head(in_.data(), head_end - 2);  // every line with its CRLF
  const std::size_t line_end = head.find(kCrlf);
  const std::string_view request_line = head.substr(0, line_end);
  // METHOD SP request-target SP HTTP-version
  const std::size_t sp1 = request_line.find(' ');
  const std::size_t sp2 = sp1 == std::string_view::npos ? sp1 : request_line.find(' ', sp1 + 1);
  if (sp1 == 0 || sp2 == std::string_view::npos || sp2 == sp1 + 1 ||
      request_line.find(' ', sp2 + 1) != std::string_view::npos)
    return refuse(400, "malformed request line '" + printable(request_line) + "'");
  for (char c : request_line.substr(0, sp1))
    if (!is_token_char(c)) return refuse(400, "malformed request line '" + printable(request_line) + "'");
  const std::string_view target = request_line.substr(sp1 + 1, sp2 - sp1 - 1);
  path_ = std::string(target.substr(0, target.find('?')));
  const std::string_view version = request_line.substr(sp2 + 1);
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    if (version.starts_with("HTTP/")) return refuse(505, "HTTP version '" + printable(version) + "' is not supported");
    return refuse(400, "malformed request line '" + printable(request_line) + "'");
  }
  for (char c : request_line)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return refuse(400, "a control character in the request line");

  head_.assign(request_line);
  head_ += kCrlf;
  bool chunked = false, expect_continue = false;
  int content_lengths = 0, transfer_encodings = 0;
  std::uint64_t content_length = 0;
  std::size_t pos = line_end + 2;
  while (pos < head.size()) {
    const std::size_t eol = head.find(kCrlf, pos);
    const std::string_view line = head.substr(pos, eol - pos);
    pos = eol + 2;
    if (line.find_first_of("\r\n") != std::string_view::npos || line.find('\0') != std::string_view::npos)
      return refuse(400, "a header line holds a bare CR, LF or NUL");
    if (!line.empty() && (line.front() == ' ' || line.front() == '\t'))
      return refuse(400, "folded header lines (obs-fold) are not supported");
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) return refuse(400, "malformed header line '" + printable(line) + "'");
    const std::string_view name = line.substr(0, colon);
    for (char c : name)
      if (!is_token_char(c)) return refuse(400, "malformed header name '" + printable(name) + "'");
    const std::string_view value = trim_ows(line.substr(colon + 1));
    if (iequals(name, "Content-Length")) {
      ++content_lengths;
      if (value.empty() || value.size() > 19 ||
          !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return refuse(400, "bad Content-Length '" + printable(value) + "'");
      content_length = 0;
      for (char c : value) content_length = content_length * 10 + std::uint64_t(c - '0');
      continue;
    }
    if (iequals(name, "Transfer-Encoding")) {
      ++transfer_encodings;
      if (!iequals(value, "chunked"))
        return refuse(501, "Transfer-Encoding '" + printable(value) + "' is not supported (only chunked)");
      chunked = true;
      continue;
    }
    if (iequals(name, "Expect")) {
      if (!iequals(value, "100-continue")) return refuse(417, "Expect '" + printable(value) + "' is not supported");
      expect_continue = true;
      continue;
    }
    if (iequals(name, "anthropic-version")) anthropic_version_ = true;
    head_.append(line);
    head_ += kCrlf;
  }
  if (content_lengths > 1) return refuse(400, "more than one Content-Length header");
  if (transfer_encodings > 1) return refuse(400, "more than one Transfer-Encoding header");
  if (content_lengths && transfer_encodings) return refuse(400, "both Content-Length and Transfer-Encoding");
  if (content_length > limits_.max_body_bytes)
    return refuse(413, "the request body is larger than the limit of " + std::to_string(limits_.max_body_bytes) +
                           " bytes");
  in_.erase(0, head_end);
  scanned_ = 0;
  const bool has_body = chunked || content_length > 0;
  continue_pending_ = expect_continue && has_body;
  if (chunked) {
    phase_ = Phase::kChunkSize;
  } else {
    body_length_ = std::size_t(content_length);
    body_.reserve(body_length_);
    phase_ = Phase::kLengthBody;
  }
  return state_;
}

RequestFramer::State RequestFramer::finish() {
  request_ = std::move(head_);
  request_ += "Content-Length: " + std::to_string(body_.size()) + "\r\n\r\n";
  request_ += body_;
  body_ = {};
  phase_ = Phase::kDone;
  return state_ = State::kComplete;
}

}  // namespace rowlm::server
