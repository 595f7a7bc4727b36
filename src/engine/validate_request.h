#pragma once
// The one check of a Request against a model, for Engine::submit and for
// the HTTP server (which checks its requests before submitting any choice,
// so that a bad one refuses them all and names the API's own field).
//
// In order: a text prompt needs a tokenizer, and is tokenized; the prompt
// must not be empty, its ids must lie in the vocabulary, and it must leave
// room in the context for at least one generated token; with
// max_tokens_within_context, prompt + max_tokens must fit the context too;
// stop strings, a response_format and tool_calls need a tokenizer (and not
// both of the last two); then SamplingParams::validate. The first
// failure throws InvalidRequest (rowlm/engine.h) naming its field.

#include <cstdint>
#include <string>
#include <vector>

#include "rowlm/engine.h"
#include "tokenizer/tokenizer.h"

namespace rowlm::engine {

// What a request is checked against.
struct RequestLimits {
  int64_t vocab_size = 0;
  int64_t context_length = 0;            // the model's max_position; 0 = unknown (lengths unchecked)
  const Tokenizer* tokenizer = nullptr;  // none: prompts must be ids, and stop strings cannot be matched
};

// Rules on top of the limits, where callers differ.
struct ValidationRules {
  // The HTTP API's rule (OpenAI's): prompt + max_tokens must fit the
  // context, else field "max_tokens" is at fault. Off (the library's and
  // the CLI's rule), such a request runs and finishes with Length at the
  // context's end.
  bool max_tokens_within_context = false;
  // The field the prompt's errors name: the caller's own ("messages",
  // "prompt[1]"), or the Request's.
  std::string prompt_field = "prompt";
};

// Returns the prompt's token ids (request.prompt_ids, or request.prompt
// tokenized with request.add_special_tokens). Throws InvalidRequest.
std::vector<int32_t> validate_request(const Request& request, const RequestLimits& limits,
                                      const ValidationRules& rules = {});

}  // namespace rowlm::engine
