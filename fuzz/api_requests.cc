// OpenAI (chat completions, completions, Responses) and Anthropic request
// parsing, then chat-prompt rendering in each chat format with the request's
// thinking switch, on any body: a 4xx naming a field (ApiError, or
// rowlm::Error from a chat format's rules), or a rendered prompt; never a
// crash, UB or leak. The first byte picks the endpoint and the format.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "server/api_error.h"
#include "server/api_request.h"
#include "server/chat_prompt.h"
#include "server/responses_request.h"
#include "tokenizer/chat_format.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const nlohmann::json body =
      nlohmann::json::parse(reinterpret_cast<const char*>(data) + 1, reinterpret_cast<const char*>(data) + size,
                            nullptr, false);
  if (body.is_discarded()) return 0;
  try {
    using namespace rowlm::server;
    const int endpoint = data[0] % 4;
    const GenerationRequest r = endpoint == 0   ? parse_chat_completion_request(body, 1000)
                                : endpoint == 1 ? parse_completion_request(body, 1000)
                                : endpoint == 2 ? parse_messages_request(body, 1000)
                                                : parse_responses_request(body, 1000).generation;
    if (!r.chat) return 0;
    const auto& names = rowlm::tokenizer::ChatFormat::names();
    const auto format = rowlm::tokenizer::ChatFormat::by_name(names[(data[0] / 4) % names.size()]);
    rowlm::tokenizer::ChatOptions options;
    if (format.supports_thinking()) options.enable_thinking = r.thinking;
    static_cast<void>(render_chat_prompt(format, r.turns, r.tools, r.tool_choice, options));
  } catch (const rowlm::server::ApiError& e) {
    if (e.status() < 400 || e.status() > 499) __builtin_trap();
  } catch (const rowlm::Error&) {
  }
  return 0;
}
