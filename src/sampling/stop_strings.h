#pragma once
// Streaming stop-string matching on decoded text. Fed successive pieces of a
// request's output, it returns the text that is safe to show now, holding
// back the longest tail that could still grow into a stop string. When a
// stop string appears (possibly spread over several pieces) it reports which
// one and returns only the text before it; the stop string itself and
// anything after it are never returned.
//
// The first stop to complete wins: the match that ends earliest in the text
// (then the one starting earliest, then the first listed). This is what a
// stream can decide without waiting, and it does not depend on how the text
// is split into pieces. (Earliest-start would: "abcd" could still complete
// after "bc" already has.)
// Matching is on bytes; stop strings must be valid UTF-8 (checked), so a
// match always starts and ends on character boundaries, and so does the
// held-back tail: fed whole characters, it never returns half of one.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rowlm::sampling {

class StopStringMatcher {
 public:
  // Throws rowlm::Error naming a stop string that is empty or not UTF-8.
  explicit StopStringMatcher(std::vector<std::string> stops);

  struct Output {
    std::string text;                // safe to emit now
    std::optional<std::size_t> stop; // index of the stop string found, if any
  };

  // Feeds the next piece of decoded text. After a stop has been reported,
  // further pieces are ignored and return empty text.
  Output feed(std::string_view piece);

  // The generation ended without a stop: returns the held-back text.
  std::string flush();

  bool stopped() const { return stopped_; }
  // Bytes currently held back (always less than the longest stop string).
  std::size_t held() const { return pending_.size(); }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace rowlm::sampling
