#pragma once
// Structured outputs as the HTTP API asks for them: OpenAI's chat
// completions `response_format` ({"type": "text"}, {"type": "json_object"},
// {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}) and
// the Responses API's `text.format` (the same with the json_schema object's
// fields beside "type"), compiled into the grammar the engine holds the
// output to (constrain/grammar.h documents the schema subset). Every output
// is held to the schema whether or not "strict" is set.

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "constrain/grammar.h"

namespace rowlm::server {

// Null for {"type": "text"}. Throws ApiError 400 naming the field: a wrong
// shape, an unknown type, or a schema outside the subset (the keyword's
// path, "response_format.json_schema.schema.properties.a.pattern").
std::shared_ptr<const constrain::Grammar> parse_response_format(const nlohmann::json& format, const std::string& path);

}  // namespace rowlm::server
