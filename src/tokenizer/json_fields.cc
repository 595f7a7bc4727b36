#include "tokenizer/json_fields.h"

namespace rowlm::tok {

std::string component_type(const Json& j, const std::string& where) {
  if (!j.is_object()) throw Error(where + ": expected an object, got " + std::string(j.type_name()));
  return field<std::string>(j, "type", where);
}

}  // namespace rowlm::tok
