// SSE writing for any text: the event is one data line ending in a blank
// line, and its JSON parses back to the text (invalid UTF-8 as U+FFFD).
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "server/sse.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const nlohmann::json value = {{"text", text}, {"n", size}};
  const std::string event = rowlm::server::sse_data(value);
  if (!event.starts_with("data: ") || !event.ends_with("\n\n")) std::abort();
  const std::string payload = event.substr(6, event.size() - 8);
  if (payload.find('\n') != std::string::npos || payload.find('\r') != std::string::npos) std::abort();
  const nlohmann::json back = nlohmann::json::parse(payload);  // throws (a crash) if not JSON
  if (back["n"] != size) std::abort();
  if (nlohmann::json::parse(rowlm::server::json_text(back)) != back) std::abort();
  const std::string named = rowlm::server::sse_event("content_block_delta", value);
  if (!named.starts_with("event: content_block_delta\ndata: ") || !named.ends_with("\n\n")) std::abort();
  return 0;
}
