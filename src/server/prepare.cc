#include "server/prepare.h"

#include <algorithm>

#include "engine/validate_request.h"
#include "server/api_error.h"

namespace rowlm::server {

std::size_t max_prompt_bytes_for(const Tokenizer& tokenizer, int context_length) {
  if (context_length <= 0) return 0;
  std::size_t longest = 1;
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id)
    if (auto piece = tokenizer.id_to_token(id)) longest = std::max(longest, piece->size());
  return std::size_t(context_length) * longest * 2;
}

namespace {

// Refuses a prompt text that cannot fit the context before tokenizing it.
void check_prompt_bytes(std::size_t bytes, const ServedModel& m, const std::string& field) {
  if (m.max_prompt_bytes && bytes > m.max_prompt_bytes)
    throw ApiError(400,
                   field + ": " + std::to_string(bytes) + " bytes of prompt cannot fit the model's context of " +
                       std::to_string(m.context_length) + " tokens",
                   field);
}

}  // namespace

PreparedGeneration prepare_generation(const GenerationRequest& r, const ServedModel& m, const std::optional<KvReuse>& reuse) {
  if (r.model && *r.model != m.name)
    throw ApiError(404, "model: '" + *r.model + "' is not served here; this server serves '" + m.name + "'", "model",
                   "model_not_found");
  PreparedGeneration out;
  ReplyContext& rc = out.reply;
  rc.model = m.name;
  rc.tokenizer = m.tokenizer;
  rc.n = std::size_t(r.n);
  rc.logprobs = r.sampling.logprobs.has_value();
  rc.include_usage = r.include_usage;
  rc.stop = r.sampling.stop;

  sampling::SamplingParams sampling = r.sampling;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> prompt_fields;  // how errors name each prompt
  std::optional<int32_t> budget_tokens;
  std::shared_ptr<const constrain::ToolCallRules> tool_rules;
  if (r.chat) {
    const tokenizer::ChatFormat& format = *m.chat_format;
    tokenizer::ChatOptions options;
    options.enable_thinking = r.thinking;
    if (r.thinking.value_or(false) && !format.supports_thinking())
      throw_bad_field(r.thinking_field.empty() ? "thinking" : r.thinking_field,
                      "the model's chat format (" + format.name() +
                          ") has no thinking mode; rowlm knows Gemma 4's and Qwen 3's");
    ChatPrompt chat;
    try {
      chat = render_chat_prompt(format, r.turns, r.tools, r.tool_choice, options);
    } catch (const ApiError&) {
      throw;
    } catch (const Error& e) {
      throw_bad_field("messages", e.what());
    }
    check_prompt_bytes(chat.text.size(), m, "messages");
    if (reuse && !reuse->text.empty() && std::string_view(chat.text).starts_with(reuse->text)) {
      std::vector<int32_t> ids = reuse->ids;
      const auto rest = m.tokenizer->encode(std::string_view(chat.text).substr(reuse->text.size()), false);
      ids.insert(ids.end(), rest.begin(), rest.end());
      prompts.push_back(std::move(ids));
    } else {
      prompts.push_back(m.tokenizer->encode(chat.text, /*add_special_tokens=*/false));
    }
    prompt_fields.push_back("messages");
    // The format's end-of-turn tokens end a reply even where config.json's
    // end-of-sequence ids do not list them: they are the chat's end of
    // sequence, so ignore_eos passes them too (a benchmark's fixed-length
    // reply). A structural stop (after a tool call) stays.
    std::vector<std::string> stops;
    if (!r.ignore_eos) stops = m.chat_format->stop_tokens();
    stops.insert(stops.end(), chat.stop_tokens.begin(), chat.stop_tokens.end());
    for (const std::string& s : stops)
      if (auto id = m.tokenizer->token_to_id(s); id && *id < m.vocab_size) sampling.stop_token_ids.push_back(*id);
    rc.forced_prefix = chat.forced_prefix;
    rc.tool_syntax = chat.tool_syntax;
    if (chat.tool_syntax) {
      try {
        auto is_token = [&](std::string_view text) {
          const auto id = m.tokenizer->token_to_id(text);
          return id && *id < m.vocab_size;
        };
        tool_rules = strict_call_rules(*chat.tool_syntax, r.tools,
                                       m.tokenizer->encode(chat.forced_prefix, /*add_special_tokens=*/false),
                                       is_token(tool_call_opener(*chat.tool_syntax)) &&
                                           is_token(tool_call_closer(*chat.tool_syntax)));
      } catch (const constrain::UnsupportedSchema& e) {
        throw ApiError(400, e.what(), e.path());
      }
    }
    if (format.thinking_on(options)) {
      const tokenizer::ReasoningSyntax syntax = *tokenizer::reasoning_syntax_of(format);
      rc.reasoning = syntax;
      rc.reasoning_starts_inside = tokenizer::prompt_opens_reasoning(syntax, chat.text);
      if (r.thinking_budget) {
        budget_tokens = r.thinking_budget;
        ReasoningBudget& b = out.budget.emplace();
        b.syntax = syntax;
        b.starts_inside = rc.reasoning_starts_inside;
        b.max_tokens = sampling.max_tokens;
        b.close_text = std::string(tokenizer::reasoning_markup(syntax).forced_close);
        b.close_ids = m.tokenizer->encode(b.close_text, /*add_special_tokens=*/false);
      }
    }
    out.prompt_text = std::move(chat.text);
  } else {
    for (std::size_t i = 0; i < r.prompts.size(); ++i) {
      const PromptInput& p = r.prompts[i];
      const std::string what = r.prompts.size() == 1 ? "prompt" : "prompt[" + std::to_string(i) + "]";
      if (p.ids.empty()) check_prompt_bytes(p.text.size(), m, what);
      prompts.push_back(p.ids.empty() ? m.tokenizer->encode(p.text, /*add_special_tokens=*/true) : p.ids);
      prompt_fields.push_back(what);
      if (r.echo) rc.echo.push_back(p.ids.empty() ? p.text : m.tokenizer->decode(p.ids));
    }
  }
  // Every request is checked before any is submitted, by the engine's own
  // check with this API's rules: a bad prompt refuses the whole request,
  // naming the API's field for it.
  const engine::RequestLimits limits{m.vocab_size, m.context_length, m.tokenizer};
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    rc.prompt_tokens.push_back(int64_t(prompts[i].size()));
    Request req;
    req.prompt_ids = prompts[i];
    req.add_special_tokens = false;
    req.sampling = sampling;
    req.ignore_eos = r.ignore_eos;
    req.response_format = r.response_format;
    req.tool_calls = tool_rules;
    // Tool calls are parsed from the text, and reasoning split from it;
    // Gemma 4 writes both markups with special tokens.
    req.skip_special_tokens = !rc.tool_syntax && !rc.reasoning;
    try {
      engine::validate_request(req, limits, {.max_tokens_within_context = true, .prompt_field = prompt_fields[i]});
    } catch (const InvalidRequest& e) {
      throw ApiError(400, e.what(), e.field());
    }
    // The first phase stops at the reasoning budget (checked above against
    // the request's own limit); Generation continues it.
    if (budget_tokens)
      req.sampling.max_tokens = std::min(*budget_tokens, req.sampling.max_tokens.value_or(*budget_tokens));
    // Choice j of a seeded request gets seed + j: choices differ but repeat.
    for (int j = 0; j < r.n; ++j) {
      out.requests.push_back(req);
      if (sampling.seed) out.requests.back().sampling.seed = *sampling.seed + uint64_t(j);
    }
  }
  return out;
}

}  // namespace rowlm::server
