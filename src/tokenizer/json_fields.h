#pragma once
// Reading tokenizer.json component fields with errors that name the
// component and the field, e.g. "pre_tokenizer.pretokenizers[1] (Split):
// field 'behavior' ...".

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "core/error.h"

namespace rowlm::tok {

using Json = nlohmann::json;

// The component's "type" string; `where` names it for errors.
std::string component_type(const Json& j, const std::string& where);

template <typename T>
T field(const Json& j, const char* name, const std::string& where) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) throw Error(where + ": missing field '" + name + "'");
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    throw Error(where + ": field '" + name + "' has the wrong type (" + it->type_name() + ")");
  }
}

template <typename T>
T field_or(const Json& j, const char* name, T fallback, const std::string& where) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return fallback;
  return field<T>(j, name, where);
}

// The parts of a Sequence component: each element of the array `key`, made
// by `make(element, where)`; null parts (components that do nothing) are
// left out.
template <typename Part, typename Make>
std::vector<std::unique_ptr<Part>> sequence_parts(const Json& j, const char* key, const std::string& where,
                                                  const std::string& w, Make make) {
  const auto list = field<Json>(j, key, w);
  if (!list.is_array()) throw Error(w + ": '" + key + "' must be an array");
  std::vector<std::unique_ptr<Part>> parts;
  for (std::size_t i = 0; i < list.size(); ++i) {
    auto part = make(list[i], where + "." + key + "[" + std::to_string(i) + "]");
    if (part) parts.push_back(std::move(part));
  }
  return parts;
}

}  // namespace rowlm::tok
