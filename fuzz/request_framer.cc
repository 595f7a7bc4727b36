// The request framer on any bytes, fed whole and in pieces: the same verdict
// and the same request however the bytes are split, and a framed request's
// normal form frames to itself (what cpp-httplib is handed is unambiguous).
// The body limit bounds what is held: the normal form is at most the head
// limit, the body limit and its Content-Length line.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/request_framer.h"

using rowlm::server::FramerLimits;
using rowlm::server::RequestFramer;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::size_t piece = 1 + data[0] % 17;  // the first byte picks the split
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  const FramerLimits limits{.max_head_bytes = 2048, .max_body_bytes = 4096};

  RequestFramer whole(limits);
  whole.feed(bytes);
  RequestFramer split(limits);
  for (std::size_t pos = 0; pos < bytes.size() && split.state() == RequestFramer::State::kNeedMore; pos += piece)
    split.feed(std::string_view(bytes).substr(pos, piece));
  if (whole.state() != split.state()) std::abort();
  if (whole.state() == RequestFramer::State::kRefused && whole.status() != split.status()) std::abort();
  if (whole.state() != RequestFramer::State::kComplete) return 0;
  if (whole.request() != split.request()) std::abort();
  if (whole.request().size() > limits.max_head_bytes + limits.max_body_bytes + 64) std::abort();

  // The normal form's head may be longer than the head received by its one
  // Content-Length line (at most 38 bytes, where the original had none), so
  // it is framed again with that much more room. (Found by this fuzzer: a
  // head just under the limit.)
  RequestFramer again(FramerLimits{.max_head_bytes = limits.max_head_bytes + 38, .max_body_bytes = limits.max_body_bytes});
  if (again.feed(whole.request()) != RequestFramer::State::kComplete) std::abort();
  if (again.request() != whole.request() || !again.take_leftover().empty()) std::abort();
  return 0;
}
