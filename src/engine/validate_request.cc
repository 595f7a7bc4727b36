#include "engine/validate_request.h"

namespace rowlm::engine {

namespace {

[[noreturn]] void reject(const std::string& field, const std::string& problem) {
  throw InvalidRequest(field, field + ": " + problem);
}

}  // namespace

std::vector<int32_t> validate_request(const Request& request, const RequestLimits& limits,
                                      const ValidationRules& rules) {
  const std::string& what = rules.prompt_field;
  if (request.prompt_ids.empty() && !limits.tokenizer)
    reject(what, "is text, but the model has no tokenizer (tokenizer.json); give the prompt as token ids");
  std::vector<int32_t> prompt = request.prompt_ids.empty()
                                    ? limits.tokenizer->encode(request.prompt, request.add_special_tokens)
                                    : request.prompt_ids;
  if (prompt.empty()) reject(what, "is empty (no tokens)");
  for (int32_t id : prompt)
    if (id < 0 || id >= limits.vocab_size)
      reject(what, "has token id " + std::to_string(id) + ", outside the vocabulary [0, " +
                       std::to_string(limits.vocab_size) + ")");
  const std::size_t length = prompt.size();
  if (limits.context_length > 0) {
    const std::size_t ctx = std::size_t(limits.context_length);
    if (length >= ctx)
      reject(what, "is " + std::to_string(length) + " tokens; the model's context is " + std::to_string(ctx) +
                       " tokens, which must also hold at least one generated token");
    const auto& max_tokens = request.sampling.max_tokens;
    if (rules.max_tokens_within_context && max_tokens && *max_tokens > 0 && length + std::size_t(*max_tokens) > ctx)
      reject("max_tokens", "is " + std::to_string(*max_tokens) + ", but the prompt is " + std::to_string(length) +
                               " tokens and the model's context " + std::to_string(ctx) +
                               " tokens, leaving room for " + std::to_string(ctx - length));
  }
  if (!limits.tokenizer && request.response_format)
    reject("response_format", "structured outputs need a tokenizer, and the model has none (tokenizer.json)");
  if (!limits.tokenizer && request.tool_calls)
    reject("tool_calls", "strict tool calls need a tokenizer, and the model has none (tokenizer.json)");
  if (request.response_format && request.tool_calls)
    reject("response_format", "a reply held to a schema cannot call tools: not together with strict tool calls");
  if (!limits.tokenizer && !request.sampling.stop.empty())
    reject("stop", "stop strings need a tokenizer, and the model has none (tokenizer.json)");
  try {
    request.sampling.validate(limits.vocab_size);
  } catch (const sampling::InvalidParameter& e) {
    throw InvalidRequest(e.field(), e.what());
  }
  return prompt;
}

}  // namespace rowlm::engine
