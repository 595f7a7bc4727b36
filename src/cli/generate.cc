// rowlm generate: one request on its own, streamed to stdout.

#include <algorithm>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_source.h"
#include "cli/request_options.h"
#include "cli/runtime.h"
#include "core/error.h"
#include "engine/model_files.h"
#include "tokenizer/chat_format.h"
#include "tokenizer/tokenizer.h"

namespace rowlm::cli {

int run_generate(const std::vector<std::string>& argv) {
  Args args("generate",
            "Generates a continuation of PROMPT (or of --ids) and streams it to stdout; a summary goes to\n"
            "stderr. Decoding is greedy unless --temperature is given. With --chat, PROMPT is the user's turn\n"
            "in the model's chat format.");
  add_model_argument(args)
      .positional("PROMPT", "the prompt text", false)
      .option("ids", "ID,ID,...", "the prompt as token ids instead of text")
      .flag("chat", "render PROMPT as a user turn of the model's chat format")
      .option("system", "TEXT", "a system message (with --chat)")
      .option("chat-format", "NAME", "override the chat format: gemma4, gemma3, chatml, llama3")
      .flag("json", "print the result as one JSON object instead of streaming text")
      .option("json-schema", "FILE",
              "hold the output to the JSON Schema in FILE: constrained decoding (schema subset: docs/server.md)");
  add_sampling_options(args, 0.0f);
  add_engine_options(args);
  if (!args.parse(argv)) return 0;
  const std::string dir = model_source_from(args).dir;
  const bool json = args.flag_set("json");
  Request req;
  if (auto ids = args.get_opt("ids")) {
    if (args.has("PROMPT")) throw Error("give PROMPT or --ids, not both");
    req.prompt_ids = parse_int_list(*ids, "--ids");
  } else if (auto prompt = args.get_opt("PROMPT")) {
    req.prompt = *prompt;
  } else {
    throw Error("give a PROMPT or --ids (see rowlm generate --help)");
  }
  apply_sampling_options(args, req);
  if (auto schema = args.get_opt("json-schema")) req.response_format = json_schema_from_file(*schema);

  const EngineOptions eo = engine_options_from(args, dir, /*background=*/true);
  auto engine = open_engine(eo);
  if (args.flag_set("chat")) {
    if (!engine->has_tokenizer()) throw Error("--chat needs a tokenizer, and " + dir + " has none");
    if (!req.prompt_ids.empty()) throw Error("--chat needs a text PROMPT");
    const auto format = args.has("chat-format") ? tokenizer::ChatFormat::by_name(args.get("chat-format"))
                                                : model_chat_format(dir);
    std::vector<tokenizer::ChatMessage> messages;
    if (auto system = args.get_opt("system")) messages.push_back({"system", *system});
    messages.push_back({"user", req.prompt});
    req.prompt = format.render(messages, true);
    req.add_special_tokens = false;  // the format writes <bos> itself
    // The format's end-of-turn tokens are the chat's end of sequence, which
    // --ignore-eos passes.
    if (!req.ignore_eos)
      for (const std::string& stop : format.stop_tokens())
        if (auto id = engine->tokenizer().token_to_id(stop)) req.sampling.stop_token_ids.push_back(*id);
  }

  auto handle = engine->submit(req);
  TokenEvent ev;
  while (handle->next(ev)) {
    if (!json && !ev.text.empty()) {
      std::cout << ev.text << std::flush;
    }
  }
  const RequestResult r = handle->result();
  if (json) {
    std::cout << result_json(r, req.sampling.logprobs.value_or(0) > 0).dump() << "\n";
  } else {
    std::cout << "\n";
  }
  std::cout.flush();  // the summary on stderr comes after the text
  // Per decode step (a token after the first): the forward pass, and
  // everything else the engine did.
  const EngineStats st = engine->stats();
  const double steps = double(std::max<int64_t>(st.decode_steps, 1));
  std::fprintf(stderr,
               "[%s] prompt %lld tokens (%lld cached), generated %lld, time to first token %.1f ms, %.1f tokens/s; "
               "per decode step %.2f ms forward, %.2f ms outside it\n",
               finish_reason_name(r.finish), (long long)r.usage.prompt_tokens, (long long)r.usage.cached_prompt_tokens,
               (long long)r.usage.completion_tokens, r.timings.time_to_first_token_s * 1e3, r.timings.decode_tokens_per_s,
               st.decode_forward_seconds / steps * 1e3, (st.decode_step_seconds - st.decode_forward_seconds) / steps * 1e3);
  if (r.finish == FinishReason::Error) throw Error(r.error);
  return 0;
}

}  // namespace rowlm::cli
