#pragma once
// OpenAI's Responses API request body (POST /v1/responses), parsed into the
// protocol-neutral GenerationRequest plus what the Responses API adds: the
// conversation it continues, whether to keep it, and the fields its response
// object repeats. Errors as api_request.h's parsers: ApiError 400 naming the
// field ("input[2].call_id"); unknown fields are ignored.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api_request.h"

namespace rowlm::server {

struct ResponsesRequest {
  GenerationRequest generation;        // turns: instructions, then `history`, then the input
  std::vector<ChatTurn> input;         // this request's own input turns
  std::optional<std::string> previous_response_id;
  bool store = true;
  // The request's fields the response object repeats (instructions,
  // max_output_tokens, temperature, top_p, tools, tool_choice, reasoning,
  // text, metadata, parallel_tool_calls, store, previous_response_id,
  // truncation, user), with OpenAI's defaults where absent.
  nlohmann::json echo = nlohmann::json::object();
};

// The body's previous_response_id (type-checked), to look up before parsing.
std::optional<std::string> previous_response_id_of(const nlohmann::json& body);

// `history`: the turns of the response named by previous_response_id (its
// function calls are what function_call_output items may answer).
ResponsesRequest parse_responses_request(const nlohmann::json& body, int64_t vocab_size,
                                         std::span<const ChatTurn> history = {});

}  // namespace rowlm::server
