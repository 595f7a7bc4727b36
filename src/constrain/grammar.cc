#include "constrain/grammar.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

namespace rowlm::constrain {

namespace {

using Json = nlohmann::json;

// Keywords that change nothing about which values are valid.
const std::set<std::string> kAnnotations = {"title", "description", "$schema", "$comment", "$id", "default", "examples",
                                            "strict"};
const std::set<std::string> kSupported = {"type",     "properties", "required",  "additionalProperties",
                                          "items",    "minItems",   "maxItems",  "enum",
                                          "const",    "minLength",  "maxLength", "minimum",
                                          "maximum",  "exclusiveMinimum", "exclusiveMaximum"};
const char* const kBounds[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};

[[noreturn]] void refuse(const std::string& path, const std::string& why) { throw UnsupportedSchema(path, path + ": " + why); }

// The first byte every JSON text of a type starts with, as a class.
char first_byte_class(NodeKind kind) {
  switch (kind) {
    case NodeKind::Object: return '{';
    case NodeKind::Array: return '[';
    case NodeKind::String: return '"';
    case NodeKind::Integer:
    case NodeKind::Number: return '0';
    default: return 0;
  }
}

// A key Gemma 4's call parser reads bare.
bool bare_key(const std::string& key) {
  return !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
           c == '-' || c == '$';
  });
}

bool json_is_type(const Json& v, const std::string& type) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "number") return v.is_number();
  if (type == "integer")
    return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  return false;
}

}  // namespace

class Grammar::Compiler {
 public:
  explicit Compiler(Grammar& g) : g_(g) {}

  // The node of a tool's arguments: an object schema, or any object.
  uint32_t arguments(const Json* s, const std::string& path) {
    if (!s) return kAnyObject;
    const uint32_t node = compile(*s, path, 0);
    const Node& n = g_.nodes_[node];
    if (n.kind == NodeKind::Object) return node;
    if (n.kind == NodeKind::Any) return kAnyObject;
    if (n.kind == NodeKind::Literals &&
        std::all_of(n.literals.begin(), n.literals.end(), [](const std::string& l) { return l[0] == '{'; }))
      return node;
    refuse(path, "a tool's arguments are an object: the schema must have \"type\": \"object\"");
  }

  uint32_t compile(const Json& s, const std::string& path, int depth) {
    if (depth > kMaxSchemaDepth) refuse(path, "schemas nest deeper than " + std::to_string(kMaxSchemaDepth) + " levels");
    if (s.is_boolean()) {
      if (!s.get<bool>()) refuse(path, "the schema false admits no value");
      return kAnyValue;
    }
    if (!s.is_object()) refuse(path, "a schema must be a JSON object or a boolean");
    for (const auto& [key, value] : s.items())
      if (!kSupported.count(key) && !kAnnotations.count(key))
        refuse(path + "." + key, "the schema keyword '" + key +
                                     "' is not supported (supported: type, properties, required, "
                                     "additionalProperties, items, minItems, maxItems, enum, const, minLength, "
                                     "maxLength; minimum, maximum, exclusiveMinimum, exclusiveMaximum on integers)");
    std::vector<std::string> types = type_list(s, path);
    for (const char* key : kBounds) {
      if (!s.contains(key)) continue;
      if (s.contains("enum") || s.contains("const")) refuse(path + "." + key, "is not supported together with enum or const");
      if (types.empty()) refuse(path + "." + key, "needs \"type\": \"integer\"");
    }
    if (s.contains("enum") || s.contains("const")) return literals(s, path, types);
    if (types.empty()) {
      // No type: the keywords say which, or any value.
      if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties"))
        types = {"object"};
      else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems"))
        types = {"array"};
      else if (s.contains("minLength") || s.contains("maxLength"))
        types = {"string"};
      else
        return kAnyValue;
    }
    if (std::count(types.begin(), types.end(), "number")) std::erase(types, std::string("integer"));
    if (types.size() == 1) return typed(s, path, types[0], depth);
    Node u;
    u.kind = NodeKind::Union;
    std::set<char> starts;
    for (const std::string& t : types) {
      const uint32_t alt = typed(s, path, t, depth);
      // boolean and null start with t, f, n (merged into one literal node
      // below); the other types each with their own byte.
      const char c = first_byte_class(g_.nodes_[alt].kind);
      if (c != 0 && !starts.insert(c).second) refuse(path + ".type", "the types listed must start differently in JSON");
      u.alternatives.push_back(alt);
    }
    merge_literal_alternatives(u);
    return add(std::move(u));
  }

 private:
  // A call's strings cannot hold the markup's string stop (only strings
  // can: the rest of the text is JSON's structure, numbers and literals).
  const std::string& checked(const std::string& text, const std::string& path) const {
    if (!g_.string_stop_.empty() && text.find(g_.string_stop_) != std::string::npos)
      refuse(path, "the text " + g_.string_stop_ + " cannot be written in the model's tool-call markup");
    return text;
  }

  // A key as the automaton matches it: JSON's quoted key; Gemma 4's bare
  // (or quoted) key with its ':'.
  std::string key_text(const std::string& key, const std::string& path) const {
    if (g_.syntax_ == Syntax::kJson) return checked(Json(key).dump(), path);
    if (bare_key(key)) return key + ":";
    const std::string q(1, char(kQuoteByte));
    return checked(q + key + q + ":", path);
  }

  // A value's compact text in the grammar's syntax.
  std::string text_of(const Json& v, const std::string& path) const {
    if (g_.syntax_ == Syntax::kJson) return checked(v.dump(), path);
    if (v.is_string()) {
      const std::string q(1, char(kQuoteByte));
      return checked(q + v.get<std::string>() + q, path);
    }
    if (v.is_object()) {
      std::string out = "{";
      for (const auto& [key, sub] : v.items()) out += (out.size() > 1 ? "," : "") + key_text(key, path) + text_of(sub, path);
      return out + "}";
    }
    if (v.is_array()) {
      std::string out = "[";
      for (const Json& sub : v) out += (out.size() > 1 ? "," : "") + text_of(sub, path);
      return out + "]";
    }
    return v.dump();
  }

  uint32_t add(Node n) {
    g_.nodes_.push_back(std::move(n));
    return uint32_t(g_.nodes_.size() - 1);
  }

  // A union's boolean and null alternatives become one literal node, so that
  // every alternative's first bytes differ from the others'.
  void merge_literal_alternatives(Node& u) {
    Node merged;
    merged.kind = NodeKind::Literals;
    std::vector<uint32_t> rest;
    for (uint32_t a : u.alternatives) {
      const Node& n = g_.nodes_[a];
      if (n.kind == NodeKind::Literals)
        merged.literals.insert(merged.literals.end(), n.literals.begin(), n.literals.end());
      else
        rest.push_back(a);
    }
    if (!merged.literals.empty()) {
      std::sort(merged.literals.begin(), merged.literals.end());
      rest.push_back(add(std::move(merged)));
    }
    u.alternatives = std::move(rest);
  }

  std::vector<std::string> type_list(const Json& s, const std::string& path) {
    static const std::set<std::string> known = {"object", "array", "string", "integer", "number", "boolean", "null"};
    std::vector<std::string> types;
    const auto it = s.find("type");
    if (it == s.end()) return types;
    auto take = [&](const Json& t, const std::string& where) {
      if (!t.is_string() || !known.count(t.get<std::string>()))
        refuse(where, "must be one of object, array, string, integer, number, boolean, null");
      if (std::find(types.begin(), types.end(), t.get<std::string>()) == types.end())
        types.push_back(t.get<std::string>());
    };
    if (it->is_array()) {
      if (it->empty()) refuse(path + ".type", "is an empty list");
      for (std::size_t i = 0; i < it->size(); ++i) take((*it)[i], path + ".type[" + std::to_string(i) + "]");
    } else {
      take(*it, path + ".type");
    }
    return types;
  }

  static uint32_t count_field(const Json& s, const char* key, const std::string& path, uint32_t fallback) {
    const auto it = s.find(key);
    if (it == s.end()) return fallback;
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > 1000000)
      refuse(path + "." + key, "must be an integer in [0, 1000000]");
    return uint32_t(it->get<int64_t>());
  }

  uint32_t literals(const Json& s, const std::string& path, const std::vector<std::string>& types) {
    if (s.contains("enum") && s.contains("const")) refuse(path + ".const", "is given together with enum");
    std::vector<Json> values;
    if (s.contains("const")) {
      values.push_back(s["const"]);
    } else {
      const Json& e = s["enum"];
      if (!e.is_array() || e.empty()) refuse(path + ".enum", "must be a non-empty array");
      values.assign(e.begin(), e.end());
    }
    Node n;
    n.kind = NodeKind::Literals;
    for (const Json& v : values) {
      if (!types.empty() && std::none_of(types.begin(), types.end(), [&](const std::string& t) { return json_is_type(v, t); }))
        refuse(path + (s.contains("const") ? ".const" : ".enum"), "the value " + v.dump() + " is not of the schema's type");
      n.literals.push_back(text_of(v, path + (s.contains("const") ? ".const" : ".enum")));
    }
    std::sort(n.literals.begin(), n.literals.end());
    n.literals.erase(std::unique(n.literals.begin(), n.literals.end()), n.literals.end());
    return add(std::move(n));
  }

  // Integer bounds, as inclusive integers. The values written have at most
  // kMaxIntegerDigits digits, so bounds beyond them are clamped.
  static void integer_bounds(const Json& s, const std::string& path, Node& n) {
    const double limit = std::pow(10.0, kMaxIntegerDigits) - 1;
    double lo = -limit, hi = limit;
    for (const char* key : kBounds) {
      const auto it = s.find(key);
      if (it == s.end()) continue;
      if (!it->is_number()) refuse(path + "." + key, "must be a number");
      const double v = it->get<double>();
      const std::string k = key;
      if (k == "minimum") lo = std::max(lo, std::ceil(v));
      else if (k == "exclusiveMinimum") lo = std::max(lo, std::floor(v) + 1);
      else if (k == "maximum") hi = std::min(hi, std::floor(v));
      else hi = std::min(hi, std::ceil(v) - 1);
    }
    if (lo > hi)
      refuse(path + "." + (s.contains("minimum") ? "minimum" : s.contains("exclusiveMinimum") ? "exclusiveMinimum" : "maximum"),
             "no integer of at most " + std::to_string(kMaxIntegerDigits) + " digits lies within the bounds");
    if (lo > -limit) n.minimum = int64_t(lo);
    if (hi < limit) n.maximum = int64_t(hi);
  }

  uint32_t typed(const Json& s, const std::string& path, const std::string& type, int depth) {
    if (type == "number")  // on other types JSON Schema ignores them
      for (const char* key : kBounds)
        if (s.contains(key)) refuse(path + "." + key, std::string("'") + key + "' is supported on integers only, not numbers");
    Node n;
    if (type == "boolean" || type == "null") {
      n.kind = NodeKind::Literals;
      n.literals = type == "null" ? std::vector<std::string>{"null"} : std::vector<std::string>{"false", "true"};
    } else if (type == "integer") {
      n.kind = NodeKind::Integer;
      integer_bounds(s, path, n);
    } else if (type == "number") {
      n.kind = NodeKind::Number;
    } else if (type == "string") {
      n.kind = NodeKind::String;
      n.min_length = count_field(s, "minLength", path, 0);
      n.max_length = count_field(s, "maxLength", path, kUnbounded);
      if (n.min_length > n.max_length) refuse(path + ".minLength", "is larger than maxLength");
    } else if (type == "array") {
      n.kind = NodeKind::Array;
      n.min_items = count_field(s, "minItems", path, 0);
      n.max_items = count_field(s, "maxItems", path, kUnbounded);
      if (n.min_items > n.max_items) refuse(path + ".minItems", "is larger than maxItems");
      const auto items = s.find("items");
      if (items != s.end() && items->is_array()) refuse(path + ".items", "a list of item schemas (tuples) is not supported");
      n.items = items == s.end() ? kAnyValue : compile(*items, path + ".items", depth + 1);
    } else {
      object(s, path, depth, n);
    }
    return add(std::move(n));
  }

  void object(const Json& s, const std::string& path, int depth, Node& n) {
    n.kind = NodeKind::Object;
    bool closed = false;
    if (const auto a = s.find("additionalProperties"); a != s.end()) {
      if (a->is_boolean()) closed = !a->get<bool>();
      else if (!(a->is_object() && a->empty()))
        refuse(path + ".additionalProperties", "only true or false is supported, not a schema");
    }
    if (const auto p = s.find("properties"); p != s.end()) {
      if (!p->is_object()) refuse(path + ".properties", "must be an object");
      if (p->size() > std::size_t(kMaxProperties))
        refuse(path + ".properties", "has more than " + std::to_string(kMaxProperties) + " properties");
      for (const auto& [name, sub] : p->items())
        n.properties.push_back({key_text(name, path + ".properties." + name),
                                compile(sub, path + ".properties." + name, depth + 1)});
      std::sort(n.properties.begin(), n.properties.end(),
                [](const Property& a, const Property& b) { return a.key < b.key; });
      for (const Property& q : n.properties) n.keys.push_back(q.key);
    }
    n.free_keys = n.properties.empty() && !closed;
    if (const auto r = s.find("required"); r != s.end()) {
      if (!r->is_array()) refuse(path + ".required", "must be an array of property names");
      for (std::size_t i = 0; i < r->size(); ++i) {
        const std::string where = path + ".required[" + std::to_string(i) + "]";
        if (!(*r)[i].is_string()) refuse(where, "must be a string");
        const std::string key = key_text((*r)[i].get<std::string>(), where);
        const auto it = std::find_if(n.properties.begin(), n.properties.end(),
                                     [&](const Property& q) { return q.key == key; });
        if (it == n.properties.end())
          refuse(where, "the required property " + key + " is not in properties");
        n.required |= uint64_t(1) << (it - n.properties.begin());
      }
    }
  }

  Grammar& g_;
};

Grammar::Grammar(Syntax syntax) : syntax_(syntax) {
  nodes_.resize(6);
  nodes_[kAnyValue].kind = NodeKind::Any;
  nodes_[kAnyObject].kind = NodeKind::Object;
  nodes_[kAnyObject].free_keys = true;
  nodes_[kAnyArray].kind = NodeKind::Array;
  nodes_[kAnyArray].items = kAnyValue;
  nodes_[kAnyString].kind = NodeKind::String;
  nodes_[kAnyNumber].kind = NodeKind::Number;
  nodes_[kAnyLiteral].kind = NodeKind::Literals;
  nodes_[kAnyLiteral].literals = {"false", "null", "true"};
}

std::shared_ptr<const Grammar> Grammar::from_schema(const nlohmann::json& schema, const std::string& path) {
  std::shared_ptr<Grammar> g(new Grammar());
  Compiler c(*g);
  g->root_ = c.compile(schema, path, 0);
  return g;
}

std::shared_ptr<const Grammar> Grammar::for_tool_calls(std::span<const CallSchema> calls, const CallMarkup& markup) {
  std::shared_ptr<Grammar> g(new Grammar(markup.syntax));
  g->call_suffix_ = markup.suffix;
  g->string_stop_ = markup.syntax == Syntax::kGemma4 ? std::string(kGemma4QuoteText) : markup.string_stop;
  const std::string& stop = g->string_stop_;
  ROWLM_CHECK(stop.empty() || stop.find(stop[0], 1) == std::string::npos,
              "tool-call markup: the string stop's first byte occurs in it again");
  Compiler c(*g);
  std::vector<std::pair<std::string, uint32_t>> tools;
  for (const CallSchema& call : calls) {
    if (call.prefix.empty()) refuse(call.path, "a tool call's prefix is empty");
    tools.emplace_back(call.prefix, c.arguments(call.parameters, call.path));
  }
  if (tools.empty()) refuse("tools", "no tool to call");
  std::sort(tools.begin(), tools.end());
  Node n;
  n.kind = NodeKind::Call;
  for (std::size_t i = 0; i < tools.size(); ++i) {
    if (i > 0 && tools[i].first == tools[i - 1].first) refuse(calls[0].path, "two tools have the prefix '" + tools[i].first + "'");
    n.literals.push_back(tools[i].first);
    n.alternatives.push_back(tools[i].second);
  }
  g->nodes_.push_back(std::move(n));
  g->root_ = uint32_t(g->nodes_.size() - 1);
  return g;
}

std::shared_ptr<const Grammar> Grammar::any_object() {
  std::shared_ptr<Grammar> g(new Grammar());
  g->root_ = kAnyObject;
  return g;
}

}  // namespace rowlm::constrain
