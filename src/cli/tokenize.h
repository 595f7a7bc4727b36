#pragma once
// The tokenize and detokenize subcommands.

#include <string>
#include <vector>

namespace rowlm::cli {

int tokenize_command(const std::vector<std::string>& args);
int detokenize_command(const std::vector<std::string>& args);

}  // namespace rowlm::cli
