#include "core/error.h"

namespace rowlm {

void throw_check_failure(const char* expr, const char* file, int line, const std::string& message) {
  throw Error("internal check failed: " + message + " (" + expr + " at " + file + ":" +
              std::to_string(line) + ")");
}

}  // namespace rowlm
