#pragma once
// Errors the HTTP API reports to a client: an HTTP status, a message that
// names the request field at fault, and the field itself. The same error is
// rendered in OpenAI's shape ({"error": {"message", "type", "param",
// "code"}}) or Anthropic's ({"type": "error", "error": {"type", "message"}}),
// depending on the endpoint that failed.

#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace rowlm::server {

enum class Dialect { kOpenAI, kAnthropic };

class ApiError : public Error {
 public:
  // `param` is the field at fault ("messages[2].content"), "" if none; the
  // message should already name it. `code` is OpenAI's optional machine code.
  ApiError(int status, const std::string& message, std::string param = "", std::string code = "");

  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }

 private:
  int status_;
  std::string param_;
  std::string code_;
};

// A 400 for a bad field: "<param>: <problem>".
[[noreturn]] void throw_bad_field(const std::string& param, const std::string& problem);

// The error body for `dialect`.
nlohmann::json error_body(Dialect dialect, const ApiError& error);
// OpenAI's error type for a status ("invalid_request_error", ...).
const char* openai_error_type(int status);
// Anthropic's error type for a status ("invalid_request_error", ...).
const char* anthropic_error_type(int status);

}  // namespace rowlm::server
