#include "sampling/stop_strings.h"

#include "core/error.h"
#include "sampling/utf8_check.h"

namespace rowlm::sampling {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (std::size_t i = 0; i < stops_.size(); ++i) {
    if (stops_[i].empty()) throw Error("stop string " + std::to_string(i) + " is empty");
    if (!is_valid_utf8(stops_[i])) throw Error("stop string " + std::to_string(i) + " is not valid UTF-8");
  }
}

StopStringMatcher::Output StopStringMatcher::feed(std::string_view piece) {
  if (stopped_) return {};
  pending_.append(piece);

  // Held text holds no stop, so a match must end inside the new piece; a
  // stop's first occurrence is also its earliest end. Any stop that ends
  // first started inside the held tail (which was then its prefix), so
  // searching the pending text alone finds it.
  std::size_t best_pos = std::string::npos, best_end = std::string::npos, best = 0;
  for (std::size_t i = 0; i < stops_.size(); ++i) {
    const std::size_t pos = pending_.find(stops_[i]);
    if (pos == std::string::npos) continue;
    const std::size_t end = pos + stops_[i].size();
    if (end < best_end || (end == best_end && pos < best_pos)) best_pos = pos, best_end = end, best = i;
  }
  if (best_pos != std::string::npos) {
    stopped_ = true;
    Output out{pending_.substr(0, best_pos), best};
    pending_.clear();
    return out;
  }

  // Hold back the longest tail that is a proper prefix of some stop string.
  std::size_t keep = 0;
  for (const std::string& s : stops_) {
    for (std::size_t len = std::min(s.size() - 1, pending_.size()); len > keep; --len) {
      if (std::string_view(pending_).substr(pending_.size() - len) == std::string_view(s).substr(0, len)) {
        keep = len;
        break;
      }
    }
  }
  Output out{pending_.substr(0, pending_.size() - keep), std::nullopt};
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StopStringMatcher::flush() {
  std::string rest;
  rest.swap(pending_);
  return rest;
}

}  // namespace rowlm::sampling
