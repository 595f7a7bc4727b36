#include "cli/commands.h"

#include <cstdio>
#include <iostream>

#include "cli/tokenize.h"
#include "core/error.h"

namespace rowlm::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> all = {
      {"generate", "generate a continuation of a prompt", run_generate},
      {"chat", "chat with a model in the terminal", run_chat},
      {"batch", "run many requests from a JSON-lines file through one continuous batch", run_batch},
      {"perplexity", "measure a model's perplexity on a text file", run_perplexity},
      {"score", "write the logits of every position of a token sequence (.npy)", run_score},
      {"inspect", "show a model's architecture, size and KV cost per token", run_inspect},
      {"quantize", "write an mlx-community (MLX affine) quantized copy of a model directory", run_quantize},
      {"bench", "measure forward speed against this machine's bandwidth and FMA peak", run_bench},
      {"tokenize", "print the token ids of a text", &tokenize_command},
      {"detokenize", "print the text of token ids", &detokenize_command},
#ifdef ROWLM_HAVE_HUB
      {"pull", "download a model from the Hugging Face Hub into the Hub cache", run_pull},
      {"list", "list the models in the Hub cache", run_list},
      {"rm", "remove a model from the Hub cache", run_rm},
#endif
#ifdef ROWLM_HAVE_SERVER
      {"serve", "serve a model over HTTP (OpenAI- and Anthropic-compatible API)", run_serve},
#endif
  };
  return all;
}

namespace {

void print_usage() {
  std::cout << "rowlm: an LLM inference engine with row-structured batched KV caches\n\n"
               "usage: rowlm <command> [arguments] [options]\n\ncommands:\n";
  for (const auto& c : commands()) std::printf("  %-12s %s\n", c.name, c.summary);
  std::cout << "\nRun 'rowlm <command> --help' for a command's options.\n";
}

}  // namespace

int run_main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    print_usage();
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version") {
    std::cout << "rowlm 0.1.0\n";
    return 0;
  }
  for (const auto& c : commands()) {
    if (args[0] != c.name) continue;
    try {
      return c.run(std::vector<std::string>(args.begin() + 1, args.end()));
    } catch (const std::exception& e) {
      std::cerr << "rowlm " << c.name << ": error: " << e.what() << "\n";
      return 1;
    }
  }
  std::cerr << "rowlm: unknown command '" << args[0] << "' (run 'rowlm --help')\n";
  return 2;
}

}  // namespace rowlm::cli
