#include "server/prepare.h"

#include "server/api_error.h"

namespace rowlm::server {

namespace {

void check_length(std::size_t prompt_tokens, const GenerationRequest& r, const ServedModel& m,
                  const std::string& what) {
  if (prompt_tokens == 0) throw_bad_field(what, "is empty (no tokens)");
  if (m.context_length <= 0) return;
  const std::size_t ctx = std::size_t(m.context_length);
  if (prompt_tokens >= ctx)
    throw_bad_field(what, "is " + std::to_string(prompt_tokens) + " tokens; the model's context is " +
                              std::to_string(ctx) + " tokens, which must also hold at least one generated token");
  if (r.sampling.max_tokens && prompt_tokens + std::size_t(*r.sampling.max_tokens) > ctx)
    throw_bad_field("max_tokens", "is " + std::to_string(*r.sampling.max_tokens) + ", but the prompt is " +
                                      std::to_string(prompt_tokens) + " tokens and the model's context " +
                                      std::to_string(ctx) + " tokens, leaving room for " +
                                      std::to_string(ctx - prompt_tokens));
}

}  // namespace

PreparedGeneration prepare_generation(const GenerationRequest& r, const ServedModel& m) {
  if (r.model != m.name)
    throw ApiError(404, "model: '" + r.model + "' is not served here; this server serves '" + m.name + "'", "model",
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
  if (r.chat) {
    ChatPrompt chat;
    try {
      chat = render_chat_prompt(*m.chat_format, r.turns, r.tools, r.tool_choice);
    } catch (const ApiError&) {
      throw;
    } catch (const Error& e) {
      throw_bad_field("messages", e.what());
    }
    prompts.push_back(m.tokenizer->encode(chat.text, /*add_special_tokens=*/false));
    check_length(prompts.back().size(), r, m, "messages");
    // The format's end-of-turn tokens end a reply even where config.json's
    // end-of-sequence ids do not list them.
    std::vector<std::string> stops = m.chat_format->stop_tokens();
    stops.insert(stops.end(), chat.stop_tokens.begin(), chat.stop_tokens.end());
    for (const std::string& s : stops)
      if (auto id = m.tokenizer->token_to_id(s); id && *id < m.vocab_size) sampling.stop_token_ids.push_back(*id);
    rc.forced_prefix = chat.forced_prefix;
    rc.tool_syntax = chat.tool_syntax;
  } else {
    for (std::size_t i = 0; i < r.prompts.size(); ++i) {
      const PromptInput& p = r.prompts[i];
      const std::string what = r.prompts.size() == 1 ? "prompt" : "prompt[" + std::to_string(i) + "]";
      prompts.push_back(p.ids.empty() ? m.tokenizer->encode(p.text, /*add_special_tokens=*/true) : p.ids);
      check_length(prompts.back().size(), r, m, what);
      if (r.echo) rc.echo.push_back(p.ids.empty() ? p.text : m.tokenizer->decode(p.ids));
    }
  }
  try {
    sampling.validate(m.vocab_size);
  } catch (const Error& e) {
    throw ApiError(400, e.what());
  }
  for (const auto& ids : prompts) {
    rc.prompt_tokens.push_back(int64_t(ids.size()));
    for (int j = 0; j < r.n; ++j) {
      Request req;
      req.prompt_ids = ids;
      req.add_special_tokens = false;
      req.sampling = sampling;
      if (sampling.seed) req.sampling.seed = *sampling.seed + uint64_t(j);
      req.ignore_eos = r.ignore_eos;
      // Tool calls are parsed from the text; Gemma 4 writes their markup
      // with special tokens.
      req.skip_special_tokens = !rc.tool_syntax.has_value();
      out.requests.push_back(std::move(req));
    }
  }
  return out;
}

}  // namespace rowlm::server
