#pragma once
// Generation requests as the HTTP API receives them, parsed and validated
// into one protocol-neutral shape. Three parsers: OpenAI's chat completions
// and (legacy) completions, and Anthropic's messages. Each throws ApiError 400
// naming the field at fault for malformed JSON shapes, wrong types, values
// out of range, and fields this server cannot honour; unknown fields are
// ignored, as OpenAI's and vLLM's servers do. Bodies nesting deeper than
// kMaxJsonDepth are refused before anything else reads them.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "constrain/grammar.h"
#include "sampling/sampling_params.h"
#include "server/chat_prompt.h"
#include "server/tool_calls.h"

namespace rowlm::server {

// One prompt of a completions request: text, or token ids.
struct PromptInput {
  std::string text;
  std::vector<int32_t> ids;  // used when non-empty
};

struct GenerationRequest {
  // Absent: the request is for whichever model is served (one per server, as
  // llama.cpp's server and vLLM accept); given, it must name that model.
  std::optional<std::string> model;
  bool chat = true;
  // Chat requests.
  std::vector<ChatTurn> turns;
  std::vector<ToolSpec> tools;
  ToolChoice tool_choice;
  // Completions requests: each prompt gets `n` choices.
  std::vector<PromptInput> prompts;
  bool echo = false;  // completions: the prompt's text starts each choice's text
  // Shared.
  sampling::SamplingParams sampling;  // stop strings, seed, logprobs, max_tokens...
  int n = 1;
  bool ignore_eos = false;
  bool stream = false;
  bool include_usage = false;  // OpenAI: stream_options.include_usage
  // Structured outputs (response_format, Responses' text.format; see
  // server/response_format.h): null for free text.
  std::shared_ptr<const constrain::Grammar> response_format;
  // Reasoning ("thinking"): nullopt = the chat template's default. The
  // field that asked for it names it in errors.
  std::optional<bool> thinking;
  std::optional<int32_t> thinking_budget;  // reasoning tokens before the span is closed
  std::string thinking_field;
};

// The most choices one request may ask for (n, times prompts for completions).
inline constexpr int kMaxChoices = 64;
// The most stop strings one request may give (OpenAI's stop, Anthropic's
// stop_sequences): each is matched against every token's text.
inline constexpr std::size_t kMaxStopStrings = 16;

// `vocab_size` bounds token ids in prompts, logit_bias and stop_token_ids.
GenerationRequest parse_chat_completion_request(const nlohmann::json& body, int64_t vocab_size);
GenerationRequest parse_completion_request(const nlohmann::json& body, int64_t vocab_size);
GenerationRequest parse_messages_request(const nlohmann::json& body, int64_t vocab_size);

class Fields;
// The fields OpenAI's endpoints share (model, sampling, stop, n, stream...),
// for the Responses API's parser.
void parse_openai_common(const Fields& f, int64_t vocab_size, GenerationRequest& r);
// OpenAI's reasoning effort (chat completions' reasoning_effort, Responses'
// reasoning.effort): none turns thinking off, any other level on.
void parse_reasoning_effort(const Fields& f, const char* name, GenerationRequest& r);

}  // namespace rowlm::server
