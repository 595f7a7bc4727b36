#include "model/config_fields.h"

#include <climits>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace rowlm::config {

std::vector<int> token_ids(const Fields& f, const std::string& key, std::vector<int> fallback, int vocab) {
  const json* v = f.find(key);
  if (!v) return fallback;
  std::vector<int> ids;
  if (v->is_null()) return ids;
  if (v->is_array()) {
    for (const json& item : *v) ids.push_back(f.to_int(key, item, 0));
  } else {
    ids.push_back(f.to_int(key, *v, 0));
  }
  for (int id : ids) {
    if (id >= vocab) f.fail(key, "holds token id " + std::to_string(id) + ", not below vocab_size " + std::to_string(vocab));
  }
  return ids;
}

void check_product_fits(const Fields& f, const std::string& what, int64_t a, int64_t b) {
  if (a * b > INT_MAX) f.fail(what, "makes a dimension too large (" + std::to_string(a * b) + ")");
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

json parse_object(const std::string& json_text, const std::string& source) {
  json top;
  try {
    top = json::parse(json_text);
  } catch (const json::exception& e) {
    throw Error(source + ": not valid JSON (" + e.what() + ")");
  }
  if (!top.is_object()) throw Error(source + ": not a JSON object (got " + std::string(top.type_name()) + ")");
  return top;
}

TextSection text_section(const json& top, const Fields& outer, bool wrapped, const std::string& model_type) {
  if (!wrapped) return {&top, ""};
  const auto it = top.find("text_config");
  if (it == top.end()) outer.fail("text_config", "is required for model_type " + model_type);
  if (!it->is_object()) outer.fail("text_config", "must be an object (got " + std::string(it->type_name()) + ")");
  return {&*it, "text_config."};
}

json read_config(const std::string& model_dir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(model_dir)) throw Error("model directory " + model_dir + " does not exist");
  const std::string path = (fs::path(model_dir) / "config.json").string();
  // Checked before opening: opening a FIFO would block until a writer comes.
  std::error_code ec;
  if (fs::exists(path, ec) && !fs::is_regular_file(path, ec)) throw Error(path + ": not a regular file");
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open (is " + model_dir + " a Hugging Face model directory?)");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw Error(path + ": invalid JSON: " + e.what());
  }
  if (!j.is_object()) throw Error(path + ": not a JSON object (got " + std::string(j.type_name()) + ")");
  return j;
}

}  // namespace rowlm::config
