// rowlm chat: an interactive conversation in the terminal.
//
// The conversation's KV stays in the engine between turns: each turn is a
// request whose prompt is the tokens the previous turn left in the KV plus
// the new turn's text, so the prefix cache finds everything but the new
// turn. Ctrl-C stops the current answer; /reset starts over; /exit (or end of
// input) leaves. With --thinking the model reasons first (formats with a
// thinking mode), and its reasoning is shown dimmed before the answer.


#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>

#include <unistd.h>

#include "cli/commands.h"
#include "cli/model_source.h"
#include "cli/request_options.h"
#include "cli/runtime.h"
#include "core/error.h"
#include "engine/model_files.h"
#include "tokenizer/chat_format.h"
#include "tokenizer/reasoning.h"
#include "tokenizer/tokenizer.h"

namespace rowlm::cli {
namespace {

// The one piece of process-wide state: a signal handler can reach nothing
// else. It is written only by the handler and read by the answer loop.
std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) { g_interrupted.store(true); }

}  // namespace

int run_chat(const std::vector<std::string>& argv) {
  Args args("chat", "An interactive chat with MODEL_DIR in the terminal. Type a message and press Enter.\n"
                    "/reset forgets the conversation, /exit (or Ctrl-D) leaves, Ctrl-C stops an answer.");
  add_model_argument(args)
      .option("system", "TEXT", "a system message")
      .option("chat-format", "NAME", "override the chat format: gemma4, gemma3, chatml, llama3")
      .flag("stats", "print token counts and speed after each answer")
      .flag("thinking", "let the model think before it answers (Gemma 4, Qwen 3); its reasoning is shown dimmed");
  add_sampling_options(args, 0.7f);
  add_engine_options(args);
  if (!args.parse(argv)) return 0;
  const std::string dir = model_source_from(args).dir;
  Request base;
  apply_sampling_options(args, base);
  const EngineOptions eo = engine_options_from(args, dir, /*background=*/true);
  auto engine = open_engine(eo);
  const Tokenizer& tok = engine->tokenizer();
  const auto format = args.has("chat-format") ? tokenizer::ChatFormat::by_name(args.get("chat-format"))
                                              : model_chat_format(dir);
  for (const std::string& stop : format.stop_tokens())
    if (auto id = tok.token_to_id(stop)) base.sampling.stop_token_ids.push_back(*id);
  tokenizer::ChatOptions chat_options;
  std::optional<tokenizer::ReasoningSyntax> reasoning;
  if (args.flag_set("thinking")) {
    if (!format.supports_thinking())
      throw Error("--thinking: the chat format " + format.name() + " has no thinking mode (gemma4 and Qwen 3's chatml have)");
    chat_options.enable_thinking = true;
  }
  // (Qwen 3's templates think by default, with or without --thinking.)
  if (format.thinking_on(chat_options)) {
    reasoning = tokenizer::reasoning_syntax_of(format);
    base.skip_special_tokens = false;  // Gemma 4's channel markers are special tokens
  }
  // Dim (SGR 2) only on a terminal: piped output stays plain text.
  const bool dim = isatty(STDOUT_FILENO);

  std::vector<tokenizer::ChatMessage> conversation;
  std::vector<int32_t> kv_ids;  // what the KV holds after the last turn
  std::string kv_text;          // the same, as text
  auto reset = [&] {
    conversation.clear();
    kv_ids.clear();
    kv_text.clear();
    if (auto system = args.get_opt("system")) conversation.push_back({"system", *system});
  };
  reset();
  std::signal(SIGINT, on_sigint);
  std::fprintf(stderr, "rowlm chat (%s format). /reset, /exit, Ctrl-C stops an answer.\n", format.name().c_str());

  std::string line;
  for (;;) {
    std::cout << "> " << std::flush;
    g_interrupted.store(false);
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      reset();
      std::cout << "(conversation reset)\n";
      continue;
    }
    if (line.empty()) continue;
    conversation.push_back({"user", line});
    Request req = base;
    req.add_special_tokens = false;
    const auto cont = kv_ids.empty() ? std::nullopt : format.continuation(kv_text, conversation, true, chat_options);
    std::vector<int32_t> prompt_ids;
    std::string prompt_text;
    if (cont) {
      prompt_ids = kv_ids;
      const auto more = tok.encode(*cont, false);
      prompt_ids.insert(prompt_ids.end(), more.begin(), more.end());
      prompt_text = kv_text + *cont;
    } else {
      prompt_text = format.render(conversation, true, chat_options);
      prompt_ids = tok.encode(prompt_text, false);
    }
    req.prompt_ids = prompt_ids;
    std::shared_ptr<RequestHandle> handle;
    try {
      handle = engine->submit(req);
    } catch (const Error& e) {
      std::cerr << "error: " << e.what() << "\n";
      conversation.pop_back();
      continue;
    }
    TokenEvent ev;
    bool cancelled = false;
    // Poll for Ctrl-C between tokens: next() returns at every token.
    std::thread watcher([&] {
      while (!handle->done()) {
        if (g_interrupted.load() && !cancelled) {
          cancelled = true;
          handle->cancel();
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
    std::optional<tokenizer::ReasoningStream> split;
    if (reasoning) split.emplace(*reasoning, tokenizer::prompt_opens_reasoning(*reasoning, prompt_text));
    bool dimmed = false;
    auto show = [&](const tokenizer::ReasoningSplit& part) {
      if (!part.reasoning.empty()) {
        if (dim && !dimmed) std::cout << "\x1b[2m";
        dimmed = true;
        std::cout << part.reasoning;
      }
      if (!part.content.empty()) {
        if (dimmed) std::cout << (dim ? "\x1b[0m\n" : "\n");
        dimmed = false;
        std::cout << part.content;
      }
      std::cout << std::flush;
    };
    while (handle->next(ev)) {
      if (split) show(split->push(ev.text));
      else std::cout << ev.text << std::flush;
    }
    if (split) show(split->finish());
    if (dimmed && dim) std::cout << "\x1b[0m";
    watcher.join();
    const RequestResult r = handle->result();
    std::cout << (r.finish == FinishReason::Cancelled ? " [stopped]\n" : "\n");
    if (r.finish == FinishReason::Error) std::cerr << "error: " << r.error << "\n";
    // The KV now holds the prompt and the reply, less the end-of-turn token
    // the model stopped on (never fed back), which the next turn's text adds.
    std::vector<int32_t> reply = r.token_ids;
    if (r.finish == FinishReason::Stop && !reply.empty() && !r.stop.empty() &&
        tok.token_to_id(r.stop) == reply.back())
      reply.pop_back();
    kv_ids = prompt_ids;
    kv_ids.insert(kv_ids.end(), reply.begin(), reply.end());
    kv_text = prompt_text + tok.decode(reply, false);
    conversation.push_back({"assistant", r.text});
    if (args.flag_set("stats"))
      std::fprintf(stderr, "(%lld prompt tokens, %lld reused from the previous turn; %lld generated at %.1f tokens/s)\n",
                   (long long)r.usage.prompt_tokens, (long long)r.usage.cached_prompt_tokens,
                   (long long)r.usage.completion_tokens, r.timings.decode_tokens_per_s);
  }
  std::signal(SIGINT, SIG_DFL);
  return 0;
}

}  // namespace rowlm::cli
