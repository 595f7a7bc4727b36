#pragma once
// rowlm reports every failure that a user can cause (bad files, configs,
// requests, flags) as rowlm::Error with a message that names the problem.
// Programming errors that cannot come from input are checked with
// ROWLM_CHECK and also throw, so nothing aborts the process.

#include <stdexcept>
#include <string>

namespace rowlm {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A backend could not allocate device (or host) memory for a request that
// was otherwise valid: callers that can free memory (the KV module, which
// turns it into OutOfBlocks) catch it; nothing was changed.
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

[[noreturn]] void throw_check_failure(const char* expr, const char* file, int line,
                                      const std::string& message);

}  // namespace rowlm

#define ROWLM_CHECK(cond, msg)                                                   \
  do {                                                                           \
    if (!(cond)) ::rowlm::throw_check_failure(#cond, __FILE__, __LINE__, (msg)); \
  } while (0)
