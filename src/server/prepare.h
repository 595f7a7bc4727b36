#pragma once
// From a parsed API request to engine requests: the served model's name is
// checked, chats are rendered and tokenized, prompts are checked against the
// context length, and each choice becomes one engine Request (choice j of a
// seeded request gets seed + j, so choices differ but repeat).

#include <string>
#include <vector>

#include "rowlm/engine.h"
#include "server/api_request.h"
#include "server/reply.h"
#include "tokenizer/chat_format.h"
#include "tokenizer/tokenizer.h"

namespace rowlm::server {

struct ServedModel {
  std::string name;
  const Tokenizer* tokenizer = nullptr;
  const tokenizer::ChatFormat* chat_format = nullptr;
  int context_length = 0;  // 0 = unknown (not checked)
  int vocab_size = 0;
};

struct PreparedGeneration {
  std::vector<Request> requests;  // one per choice, prompt-major
  ReplyContext reply;             // all but id, created and make_tool_call_id
};

// Throws ApiError: 404 for another model's name, 400 for a conversation the
// chat format rejects, or a request the engine's check refuses
// (engine/validate_request.h, with this API's rule that prompt + max_tokens
// fit the context), naming the API's field: "messages", "prompt",
// "prompt[i]", "max_tokens", or the sampling parameter.
PreparedGeneration prepare_generation(const GenerationRequest& request, const ServedModel& model);

}  // namespace rowlm::server
