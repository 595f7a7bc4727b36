#pragma once
// Reading tokenizer.json component fields with errors that name the
// component and the field, e.g. "pre_tokenizer.pretokenizers[1] (Split):
// field 'behavior' ...".

#include <nlohmann/json.hpp>

#include <string>

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

}  // namespace rowlm::tok
