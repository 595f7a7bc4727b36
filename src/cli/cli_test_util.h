#pragma once
// Runs the built rowlm command for the CLI tests, as a user would.

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace rowlm::cli::testing {

struct CommandRun {
  int status;
  std::string out, err;
};

// Runs `ENV rowlm ARGS` through the shell with stdin from `input`, capturing
// both streams; `env` is shell assignments such as "HF_HOME=/x" (or empty).
inline CommandRun run_rowlm(const std::string& args, const std::string& input = "", const std::string& env = "") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("rowlm_cli_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "in") << input;
  const std::string cmd = env + (env.empty() ? "" : " ") + std::string(ROWLM_BINARY_DIR) + "/rowlm " + args + " <" +
                          (dir / "in").string() + " >" + (dir / "out").string() + " 2>" + (dir / "err").string();
  const int rc = std::system(cmd.c_str());
  auto slurp = [](const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  CommandRun r{WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, slurp(dir / "out"), slurp(dir / "err")};
  fs::remove_all(dir);
  return r;
}

}  // namespace rowlm::cli::testing
