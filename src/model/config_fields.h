#pragma once
// Reading a Hugging Face config.json: typed fields whose errors name the file
// and the field's full path (e.g. "text_config.hidden_size"), shared by every
// family's config parser.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace rowlm::config {

using json = nlohmann::json;

// Sizes past this are damage, and keeping them small keeps every product
// the forward forms (heads·head_dim, layers·PLE width) inside int.
inline constexpr int64_t kMaxSize = int64_t(1) << 24;

// Reads typed fields of one JSON object; errors name the file and the
// field's full path (e.g. "text_config.hidden_size").
class Fields {
 public:
  Fields(const json& obj, std::string path_prefix, const std::string& source)
      : obj_(obj), prefix_(std::move(path_prefix)), source_(source) {}

  std::string path(const std::string& key) const { return prefix_ + key; }

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw Error(source_ + ": field '" + path(key) + "' " + what);
  }

  const json* find(const std::string& key) const {
    const auto it = obj_.find(key);
    return it == obj_.end() ? nullptr : &*it;
  }
  bool has(const std::string& key) const { return find(key) != nullptr; }
  bool has_value(const std::string& key) const {
    const json* v = find(key);
    return v && !v->is_null();
  }

  // An integer in [min, kMaxSize]; required when no default is given.
  int integer(const std::string& key, std::optional<int> fallback = std::nullopt, int64_t min = 1) const {
    const json* v = find(key);
    if (!v) {
      if (!fallback) fail(key, "is required");
      return *fallback;
    }
    return to_int(key, *v, min);
  }
  // Same, but JSON null is allowed and gives `if_null`.
  int nullable_integer(const std::string& key, int fallback, int if_null, int64_t min) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (v->is_null()) return if_null;
    return to_int(key, *v, min);
  }

  int to_int(const std::string& key, const json& v, int64_t min) const {
    if (!v.is_number_integer()) fail(key, "must be an integer (got " + v.dump() + ")");
    if (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t(kMaxSize) : v.get<int64_t>() > kMaxSize) {
      fail(key, "is implausibly large (" + v.dump() + ")");
    }
    const int64_t x = v.get<int64_t>();
    if (x < min) fail(key, "must be at least " + std::to_string(min) + " (got " + v.dump() + ")");
    return int(x);
  }

  double number(const std::string& key, double fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_number()) fail(key, "must be a number (got " + v->dump() + ")");
    return v->get<double>();
  }

  bool boolean(const std::string& key, bool fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) fail(key, "must be true or false (got " + v->dump() + ")");
    return v->get<bool>();
  }

  std::string string(const std::string& key, const std::string& fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_string()) fail(key, "must be a string (got " + v->dump() + ")");
    return v->get<std::string>();
  }

 private:
  const json& obj_;
  std::string prefix_;
  const std::string& source_;
};


// A token id or list of ids; null means none. Ids must be below `vocab`.
std::vector<int> token_ids(const Fields& f, const std::string& key, std::vector<int> fallback, int vocab);

// Fails on `what` when a · b exceeds int (a product the forward forms).
void check_product_fits(const Fields& f, const std::string& what, int64_t a, int64_t b);

// The whole file, or an Error naming it.
std::string read_text(const std::string& path);

// config.json's text parsed: a JSON object, or an Error naming `source`.
json parse_object(const std::string& json_text, const std::string& source);

// Where a family's text-model fields are: a multimodal checkpoint's
// `text_config` object (wrapped, e.g. model_type gemma3 or gemma4; Fields
// prefixed "text_config."), else the top level. An Error names the field
// when a wrapped config has no text_config object.
struct TextSection {
  const json* object;
  std::string prefix;
};
TextSection text_section(const json& top, const Fields& outer, bool wrapped, const std::string& model_type);

// config.json of `model_dir` parsed, or an Error naming the file.
json read_config(const std::string& model_dir);

}  // namespace rowlm::config
