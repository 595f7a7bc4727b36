#include "server/sse.h"

namespace rowlm::server {

std::string json_text(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Compact JSON never holds a raw line break (string contents are escaped), so
// one "data:" line carries the whole value.
std::string sse_data(const nlohmann::json& value) { return "data: " + json_text(value) + "\n\n"; }

std::string sse_event(std::string_view name, const nlohmann::json& value) {
  std::string out = "event: ";
  out += name;
  out += "\ndata: ";
  out += json_text(value);
  out += "\n\n";
  return out;
}

}  // namespace rowlm::server
