#include "server/api_error.h"

namespace rowlm::server {

ApiError::ApiError(int status, const std::string& message, std::string param, std::string code)
    : Error(message), status_(status), param_(std::move(param)), code_(std::move(code)) {}

void throw_bad_field(const std::string& param, const std::string& problem) {
  throw ApiError(400, param + ": " + problem, param);
}

const char* openai_error_type(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

const char* anthropic_error_type(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

nlohmann::json error_body(Dialect dialect, const ApiError& error) {
  using nlohmann::json;
  if (dialect == Dialect::kAnthropic)
    return {{"type", "error"},
            {"error", {{"type", anthropic_error_type(error.status())}, {"message", error.what()}}}};
  return {{"error",
           {{"message", error.what()},
            {"type", openai_error_type(error.status())},
            {"param", error.param().empty() ? json(nullptr) : json(error.param())},
            {"code", error.code().empty() ? json(nullptr) : json(error.code())}}}};
}

}  // namespace rowlm::server
