#pragma once
// The rowlm subcommands. Each takes its arguments (after the command name)
// and returns the process exit status; errors are thrown as rowlm::Error.

#include <string>
#include <vector>

namespace rowlm::cli {

using CommandFn = int (*)(const std::vector<std::string>& args);

struct Command {
  const char* name;
  const char* summary;
  CommandFn run;
};

int run_generate(const std::vector<std::string>& args);
int run_score(const std::vector<std::string>& args);
int run_inspect(const std::vector<std::string>& args);
int run_quantize(const std::vector<std::string>& args);
int run_bench(const std::vector<std::string>& args);
int run_chat(const std::vector<std::string>& args);
int run_batch(const std::vector<std::string>& args);
int run_perplexity(const std::vector<std::string>& args);
int run_serve(const std::vector<std::string>& args);
int run_pull(const std::vector<std::string>& args);  // the Hub cache (hub_commands.cc)
int run_list(const std::vector<std::string>& args);
int run_rm(const std::vector<std::string>& args);

// Every subcommand, in the order `rowlm --help` lists them.
const std::vector<Command>& commands();

// Runs `rowlm argv...`; catches errors, prints them, returns the exit status.
int run_main(int argc, char** argv);

}  // namespace rowlm::cli
