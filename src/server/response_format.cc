#include "server/response_format.h"

#include "server/api_error.h"
#include "server/fields.h"

namespace rowlm::server {

std::shared_ptr<const constrain::Grammar> parse_response_format(const nlohmann::json& format, const std::string& path) {
  if (!format.is_object()) throw_bad_field(path, "must be an object");
  const Fields f(format, path);
  const std::string type = f.required_string("type");
  if (type == "text") return nullptr;
  if (type == "json_object") return constrain::Grammar::any_object();
  if (type != "json_schema")
    throw_bad_field(f.path("type"), "must be 'text', 'json_object' or 'json_schema', got '" + type + "'");
  // Chat completions nest the schema's fields in "json_schema"; Responses'
  // text.format has them beside "type".
  std::string where = path;
  const Json* holder = &format;
  if (const Json* nested = f.object("json_schema")) {
    holder = nested;
    where = f.path("json_schema");
  } else if (!f.has("schema")) {
    // Named as the caller's shape names it.
    throw_bad_field(path == "text.format" ? f.path("schema") : f.path("json_schema"),
                    "is required for type 'json_schema'");
  }
  const Fields s(*holder, where);
  (void)s.string("name");
  (void)s.string("description");
  (void)s.boolean("strict");
  const Json* schema = s.find("schema");
  if (!schema) throw_bad_field(s.path("schema"), "is required");
  try {
    return constrain::Grammar::from_schema(*schema, s.path("schema"));
  } catch (const constrain::UnsupportedSchema& e) {
    throw ApiError(400, e.what(), e.path());
  }
}

}  // namespace rowlm::server
