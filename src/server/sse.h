#pragma once
// Server-sent events framing (the WHATWG event-stream format that OpenAI and
// Anthropic stream in) and the one way response JSON becomes bytes.

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace rowlm::server {

// Compact JSON; invalid UTF-8 in strings (a lone byte of a token that is
// half a character) becomes U+FFFD instead of failing.
std::string json_text(const nlohmann::json& value);

// "data: <json>\n\n": one event of OpenAI's streams.
std::string sse_data(const nlohmann::json& value);
// "event: <name>\ndata: <json>\n\n": one event of Anthropic's streams.
std::string sse_event(std::string_view name, const nlohmann::json& value);
// OpenAI's end-of-stream marker.
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace rowlm::server
