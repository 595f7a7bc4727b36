#include "server/fields.h"

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "server/api_error.h"

namespace rowlm::server {

std::string index_path(const std::string& path, std::size_t i) { return path + "[" + std::to_string(i) + "]"; }

void check_depth(const Json& value, const std::string& path) {
  std::vector<std::pair<const Json*, int>> stack = {{&value, 1}};
  while (!stack.empty()) {
    const auto [v, depth] = stack.back();
    stack.pop_back();
    if (!v->is_structured()) continue;
    if (depth > kMaxJsonDepth)
      throw_bad_field(path.empty() ? "body" : path, "nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    for (const Json& child : *v) stack.emplace_back(&child, depth + 1);
  }
}

std::string json_type_name(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "integer";
    case Json::value_t::number_float: return "number";
    case Json::value_t::string: return "string";
    case Json::value_t::array: return "array";
    case Json::value_t::object: return "object";
    default: return "unknown";
  }
}

std::string describe_value(const Json& value) {
  std::string s = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  constexpr std::size_t kMax = 80;
  if (s.size() > kMax) s = s.substr(0, kMax) + "...";
  return s;
}

Fields::Fields(const Json& object, std::string path) : object_(object), path_(std::move(path)) {
  if (!object_.is_object())
    throw_bad_field(path_.empty() ? "body" : path_, "must be a JSON object, got " + json_type_name(object_));
}

const Json* Fields::find(std::string_view name) const {
  auto it = object_.find(name);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string Fields::path(std::string_view name) const {
  return path_.empty() ? std::string(name) : path_ + "." + std::string(name);
}

std::optional<std::string> Fields::string(std::string_view name) const {
  const Json* v = find(name);
  if (!v) return std::nullopt;
  if (!v->is_string()) throw_bad_field(path(name), "must be a string, got " + json_type_name(*v));
  return v->get<std::string>();
}

std::string Fields::required_string(std::string_view name) const {
  auto s = string(name);
  if (!s) throw_bad_field(path(name), "is required");
  return *s;
}

std::optional<bool> Fields::boolean(std::string_view name) const {
  const Json* v = find(name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) throw_bad_field(path(name), "must be a boolean, got " + json_type_name(*v));
  return v->get<bool>();
}

std::optional<int64_t> Fields::integer(std::string_view name, int64_t lo, int64_t hi) const {
  const Json* v = find(name);
  if (!v) return std::nullopt;
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  int64_t x = 0;
  if (v->is_number_integer() && !v->is_number_unsigned()) {
    x = v->get<int64_t>();
  } else if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > uint64_t(std::numeric_limits<int64_t>::max()))
      throw_bad_field(path(name), "must be an integer in " + range + ", got " + describe_value(*v));
    x = int64_t(u);
  } else if (v->is_number_float()) {
    const double d = v->get<double>();
    // Exactly representable integers only, well inside int64.
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e15)
      throw_bad_field(path(name), "must be an integer in " + range + ", got " + describe_value(*v));
    x = int64_t(d);
  } else {
    throw_bad_field(path(name), "must be an integer, got " + json_type_name(*v));
  }
  if (x < lo || x > hi) throw_bad_field(path(name), "must be an integer in " + range + ", got " + describe_value(*v));
  return x;
}

std::optional<double> Fields::number(std::string_view name, double lo, double hi) const {
  const Json* v = find(name);
  if (!v) return std::nullopt;
  if (!v->is_number()) throw_bad_field(path(name), "must be a number, got " + json_type_name(*v));
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) {
    const Json bounds = {lo, hi};
    throw_bad_field(path(name), "must be a number in [" + describe_value(bounds[0]) + ", " +
                                    describe_value(bounds[1]) + "], got " + describe_value(*v));
  }
  return d;
}

const Json* Fields::array(std::string_view name) const {
  const Json* v = find(name);
  if (v && !v->is_array()) throw_bad_field(path(name), "must be an array, got " + json_type_name(*v));
  return v;
}

const Json* Fields::object(std::string_view name) const {
  const Json* v = find(name);
  if (v && !v->is_object()) throw_bad_field(path(name), "must be an object, got " + json_type_name(*v));
  return v;
}

void Fields::unsupported(std::string_view name, const std::string& why) const {
  throw_bad_field(path(name), "is not supported by this server: " + why);
}

}  // namespace rowlm::server
