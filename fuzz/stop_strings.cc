// Stop-string matching against a direct search of the whole text: the text
// shown is the text before the earliest-ending match (earliest start, then
// first listed, on ties), whatever the pieces; without a match, all of it.
// Input: up to 3 stop strings and the text, separated by 0xff bytes; piece
// sizes from the first byte.
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "sampling/stop_strings.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::size_t piece = 1 + data[0] % 7;
  std::vector<std::string> parts(1);
  for (std::size_t i = 1; i < size; ++i) {
    if (data[i] == 0xff && parts.size() < 4) parts.emplace_back();
    else parts.back() += char(data[i]);
  }
  const std::string text = parts.back();
  parts.pop_back();
  if (parts.empty()) return 0;
  std::optional<rowlm::sampling::StopStringMatcher> matcher;
  try {
    matcher.emplace(parts);
  } catch (const rowlm::Error&) {
    return 0;  // an empty or non-UTF-8 stop string: refused, as documented
  }
  // The oracle: for every end position, the first stop that ends there.
  std::optional<std::size_t> end, which;
  for (std::size_t e = 1; e <= text.size() && !end; ++e)
    for (std::size_t s = 0; s < parts.size(); ++s)
      if (parts[s].size() <= e && text.compare(e - parts[s].size(), parts[s].size(), parts[s]) == 0) {
        if (!which || e - parts[s].size() < e - parts[*which].size()) which = s;
        end = e;
      }
  std::string shown;
  std::optional<std::size_t> found;
  for (std::size_t pos = 0; pos < text.size() && !found; pos += piece) {
    auto out = matcher->feed(std::string_view(text).substr(pos, piece));
    shown += out.text;
    found = out.stop;
  }
  if (!found) shown += matcher->flush();
  if (end.has_value() != found.has_value()) std::abort();
  if (end) {
    if (*found != *which) std::abort();
    if (shown != text.substr(0, *end - parts[*which].size())) std::abort();
  } else if (shown != text) {
    std::abort();
  }
  return 0;
}
