#pragma once
// Reads the fields of a JSON request object with exact types and ranges.
// Every failure is an ApiError 400 naming the field by its path in the body
// ("messages[1].content"), so clients learn which value to fix. Absent and
// null fields read as "not given".

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace rowlm::server {

using Json = nlohmann::json;

class Fields {
 public:
  // `object` must be a JSON object; `path` names it in errors ("" for the
  // body itself, whose fields are then named bare: "temperature").
  Fields(const Json& object, std::string path);

  // The field, or nullptr when it is absent or null.
  const Json* find(std::string_view name) const;
  bool has(std::string_view name) const { return find(name) != nullptr; }
  // The field's path for errors: "<path>.<name>" (or "<name>" at the top).
  std::string path(std::string_view name) const;

  std::optional<std::string> string(std::string_view name) const;
  std::string required_string(std::string_view name) const;
  std::optional<bool> boolean(std::string_view name) const;
  // An integer (an integral float such as 5.0 counts) in [lo, hi].
  std::optional<int64_t> integer(std::string_view name, int64_t lo, int64_t hi) const;
  // A finite number in [lo, hi].
  std::optional<double> number(std::string_view name, double lo, double hi) const;
  // A present field must be an array / object (checked, then returned).
  const Json* array(std::string_view name) const;
  const Json* object(std::string_view name) const;

  // A 400 for a field given with a value this server cannot honour.
  [[noreturn]] void unsupported(std::string_view name, const std::string& why) const;

 private:
  const Json& object_;
  std::string path_;
};

// Request JSON may nest at most this deep: the server's own formatting of
// tool schemas and arguments recurses, so depth is checked before use.
inline constexpr int kMaxJsonDepth = 64;
// Throws ApiError 400 naming `path` when `value` nests deeper than
// kMaxJsonDepth (checked without recursion).
void check_depth(const Json& value, const std::string& path);

// "<path>[i]".
std::string index_path(const std::string& path, std::size_t i);
// A short rendering of a JSON value for error messages (truncated).
std::string describe_value(const Json& value);
// The JSON type name as a client would say it ("string", "integer", ...).
std::string json_type_name(const Json& value);

}  // namespace rowlm::server
