#pragma once
// A JSON Schema compiled into the grammar that constrained decoding walks
// (automaton.h). The supported subset (docs/server.md, "Structured outputs"):
//
//   type             "object", "array", "string", "integer", "number",
//                    "boolean", "null", or a list of them whose JSON forms
//                    start differently (["string", "null"]; "integer" with
//                    "number" is "number")
//   properties       with "required"; keys are generated only from
//                    "properties" (as if "additionalProperties": false); an
//                    object schema without "properties" takes any keys with
//                    any values unless "additionalProperties" is false
//   items            arrays; "minItems", "maxItems"
//   enum, const      any JSON values, generated in their compact form
//   minLength, maxLength  strings, in code points
//   minimum, maximum, exclusiveMinimum, exclusiveMaximum  integers only
//   title, description, $schema, default, examples, strict: ignored
//
// Any other keyword is refused: UnsupportedSchema names it and its place
// ("schema.properties.name.pattern"). A schema with no "type" (and no enum
// or const) takes any JSON value. Numbers are generated with at most 15
// integer digits, 15 fraction digits and 3 exponent digits, and whitespace
// runs between tokens of the JSON text are at most kMaxWhitespace long, so
// that a model cannot loop forever inside one value.
//
// Tool calls (Grammar::for_tool_calls): the text between a call's opening
// and closing tokens, one of the tools' prefixes ("call:get_weather") then
// that tool's arguments, an object of its parameters schema, then the
// markup's suffix; no string holds the markup's string stop (a text the
// call parser would end the string or the call at: "</tool_call>"), and
// numbers have at most kMaxCallExponentDigits exponent digits (every one a
// finite double, as the call parsers need).
//
// Syntax: how values are written. kJson is JSON text. kGemma4 is Gemma 4's
// tool-call argument syntax (server/tool_calls.h): strings between quote
// tokens <|"|>, which the automaton reads as the byte kQuoteByte (never in
// UTF-8 text; the TokenTable built for it maps the quote token there), with
// no escapes, any character but control characters other than tab, newline
// and carriage return, and never the quote token's own text; object keys
// bare where they are names ([A-Za-z0-9_.$-]+), else quoted, with the ':'
// right after them; numbers as JSON's.
//
// A Grammar is immutable once compiled and may be shared by any threads.

#include <cstdint>
#include <climits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/error.h"

namespace rowlm::constrain {

// A schema outside the supported subset, or one no value can satisfy.
// path() is where ("schema.properties.a.pattern"); what() says why.
class UnsupportedSchema : public Error {
 public:
  UnsupportedSchema(std::string path, const std::string& message) : Error(message), path_(std::move(path)) {}
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline constexpr uint32_t kUnbounded = UINT32_MAX;
inline constexpr int kMaxWhitespace = 4;       // whitespace characters in a row between JSON tokens
inline constexpr int kMaxIntegerDigits = 15;
inline constexpr int kMaxFractionDigits = 15;
inline constexpr int kMaxExponentDigits = 3;
inline constexpr int kMaxProperties = 64;      // per object schema
inline constexpr int kMaxSchemaDepth = 12;     // nested object/array schemas
inline constexpr int kMaxCallExponentDigits = 2;

enum class Syntax : uint8_t { kJson, kGemma4 };
// kGemma4: the byte the quote token stands for, and the token's text.
inline constexpr uint8_t kQuoteByte = 0xFF;
inline constexpr std::string_view kGemma4QuoteText = "<|\"|>";

enum class NodeKind : uint8_t { Any, Object, Array, String, Integer, Number, Literals, Union, Call };

struct Property {
  std::string key;  // the key as JSON text, quotes included: "\"name\""
  uint32_t value;   // node of its value
};

struct Node {
  NodeKind kind = NodeKind::Any;
  // Object: properties sorted by key; required as a bit per property. With
  // free_keys (no properties), any string key with an Any value.
  std::vector<Property> properties;
  std::vector<std::string> keys;  // properties' keys, in the same order
  uint64_t required = 0;
  bool free_keys = false;
  // Array.
  uint32_t items = 0;  // node of every item
  uint32_t min_items = 0, max_items = kUnbounded;
  // Integer: the values allowed (both inclusive); bounded when either is set.
  int64_t minimum = INT64_MIN, maximum = INT64_MAX;
  bool bounded() const { return minimum != INT64_MIN || maximum != INT64_MAX; }
  // String, in code points.
  uint32_t min_length = 0, max_length = kUnbounded;
  // Literals: the allowed values as compact texts in the grammar's syntax,
  // sorted, distinct. Call: the tools' prefixes, sorted.
  std::vector<std::string> literals;
  // Union: nodes whose JSON texts start with different bytes. Call: the
  // arguments' node of each prefix in literals.
  std::vector<uint32_t> alternatives;
};

class Grammar {
 public:
  // The node indices every grammar has, for values of any JSON type.
  static constexpr uint32_t kAnyValue = 0, kAnyObject = 1, kAnyArray = 2, kAnyString = 3, kAnyNumber = 4,
                            kAnyLiteral = 5;

  // Throws UnsupportedSchema (a rowlm::Error). `path` prefixes the places
  // errors name ("response_format.json_schema.schema").
  static std::shared_ptr<const Grammar> from_schema(const nlohmann::json& schema, const std::string& path = "schema");
  // Any JSON object (OpenAI's response_format {"type": "json_object"}).
  static std::shared_ptr<const Grammar> any_object();

  // One tool call's text: prefix then arguments (see above). Prefixes must
  // differ and none may be empty; the arguments' schema must admit objects
  // only (null: any object); errors name `path`.
  struct CallSchema {
    std::string prefix;
    const nlohmann::json* parameters = nullptr;
    std::string path;  // "tools[0].function.parameters"
  };
  // `string_stop`'s first byte must occur in it once; kGemma4's is always
  // kGemma4QuoteText.
  struct CallMarkup {
    Syntax syntax = Syntax::kJson;
    std::string suffix;       // after the arguments ("}\n")
    std::string string_stop;  // no string's text holds it
  };
  static std::shared_ptr<const Grammar> for_tool_calls(std::span<const CallSchema> calls, const CallMarkup& markup);

  Syntax syntax() const { return syntax_; }
  const std::string& call_suffix() const { return call_suffix_; }
  const std::string& string_stop() const { return string_stop_; }
  bool for_calls() const { return node(root_).kind == NodeKind::Call; }

  const Node& node(uint32_t i) const { return nodes_[i]; }
  uint32_t root() const { return root_; }
  std::size_t node_count() const { return nodes_.size(); }

 private:
  class Compiler;
  explicit Grammar(Syntax syntax = Syntax::kJson);
  std::vector<Node> nodes_;
  uint32_t root_ = kAnyValue;
  Syntax syntax_ = Syntax::kJson;
  std::string call_suffix_, string_stop_;
};

}  // namespace rowlm::constrain
