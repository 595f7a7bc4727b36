#pragma once
// From a parsed API request to engine requests: the served model's name is
// checked, chats are rendered and tokenized, prompts are checked against the
// context length, and each choice becomes one engine Request (choice j of a
// seeded request gets seed + j, so choices differ but repeat).

#include <cstddef>
#include <string>
#include <vector>

#include "rowlm/engine.h"
#include "server/api_request.h"
#include "server/generation.h"
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
  // A prompt text longer than this cannot fit the context, so it is refused
  // before it is tokenized (a body of megabytes would otherwise be tokenized
  // whole first). 0 = no bound. max_prompt_bytes_for() computes it.
  std::size_t max_prompt_bytes = 0;
};

// The bytes of text that `context_length` tokens of `tokenizer` can cover:
// the context times the longest token's text (each token covers at most
// that much of a prompt), doubled for normalizers that shorten text (NFC
// composition). A policy bound, meant never to refuse a prompt that fits.
std::size_t max_prompt_bytes_for(const Tokenizer& tokenizer, int context_length);

struct PreparedGeneration {
  std::vector<Request> requests;  // one per choice, prompt-major
  ReplyContext reply;             // all but id, created and make_tool_call_id
  std::optional<ReasoningBudget> budget;  // thinking with a budget: for the Generation
  std::string prompt_text;        // chat: the rendered prompt (for a response store)
};

// A request without a model is served by `model`. Throws ApiError: 404 for
// another model's name, 400 for a conversation the
// chat format rejects, or a request the engine's check refuses
// (engine/validate_request.h, with this API's rule that prompt + max_tokens
// fit the context, and a prompt text over max_prompt_bytes is refused
// untokenized), naming the API's field: "messages", "prompt",
// "prompt[i]", "max_tokens", or the sampling parameter; and thinking asked
// of a chat format without a thinking mode (naming request.thinking_field).
//
// `reuse`: what the KV held after an earlier reply this chat continues
// (a stored response's kv_ids and kv_text): when the rendered prompt starts
// with its text, the prompt is its tokens plus the rest tokenized, so the
// prefix cache finds the earlier prompt and reply whole.
struct KvReuse {
  const std::vector<int32_t>& ids;
  const std::string& text;
};
PreparedGeneration prepare_generation(const GenerationRequest& request, const ServedModel& model,
                                      const std::optional<KvReuse>& reuse = std::nullopt);

}  // namespace rowlm::server
