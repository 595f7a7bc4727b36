#include "io/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace rowlm {
namespace fs = std::filesystem;
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open " + path);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw Error("cannot read " + path);
  return text.str();
}

// Shard names come from a file on disk: allow only plain file names so an
// index cannot point outside the model directory.
bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\\') == std::string::npos && name.find('\0') == std::string::npos;
}

}  // namespace

Checkpoint Checkpoint::open(const std::string& model_dir) {
  Checkpoint ck;
  ck.dir_ = model_dir;
  std::error_code ec;
  if (!fs::is_directory(model_dir, ec)) throw Error(model_dir + " is not a directory");
  const fs::path dir(model_dir);
  const fs::path single = dir / "model.safetensors";
  const fs::path index = dir / "model.safetensors.index.json";

  auto add_file = [&](const std::string& path) {
    ck.files_.push_back(SafetensorsFile::open(path));
    return ck.files_.size() - 1;
  };

  if (fs::exists(single, ec)) {
    ck.listing_ = single.string();
    const std::size_t f = add_file(ck.listing_);
    for (const std::string& name : ck.files_[f].names()) ck.where_.emplace(name, f);
  } else if (fs::exists(index, ec)) {
    ck.listing_ = index.string();
    const std::string& src = ck.listing_;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_text(src));
    } catch (const nlohmann::json::exception& e) {
      throw Error(src + ": not valid JSON (" + e.what() + ")");
    }
    if (!j.is_object()) throw Error(src + ": not a JSON object");
    const auto map = j.find("weight_map");
    if (map == j.end()) throw Error(src + ": missing weight_map");
    if (!map->is_object()) throw Error(src + ": weight_map is not an object");
    std::map<std::string, std::size_t> shard_index;
    for (const auto& [name, shard] : map->items()) {
      if (!shard.is_string()) throw Error(src + ": weight_map entry for tensor '" + name + "' is not a file name");
      const std::string file = shard.get<std::string>();
      if (!is_plain_file_name(file)) {
        throw Error(src + ": weight_map entry for tensor '" + name + "' names '" + file +
                    "', which is not a file name in the model directory");
      }
      auto it = shard_index.find(file);
      if (it == shard_index.end()) {
        const fs::path shard_path = dir / file;
        if (!fs::exists(shard_path, ec)) {
          throw Error(src + ": shard " + file + " (holding tensor '" + name + "') is missing from " + model_dir);
        }
        it = shard_index.emplace(file, add_file(shard_path.string())).first;
      }
      if (!ck.files_[it->second].contains(name)) {
        throw Error(src + ": tensor '" + name + "' is listed in shard " + file + " but " +
                    ck.files_[it->second].path() + " does not contain it");
      }
      ck.where_.emplace(name, it->second);
    }
  } else {
    std::vector<std::string> found;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (entry.path().extension() == ".safetensors" && entry.is_regular_file(ec)) found.push_back(entry.path().string());
    }
    if (found.empty()) {
      throw Error(model_dir + ": no model.safetensors, model.safetensors.index.json or *.safetensors files");
    }
    std::sort(found.begin(), found.end());
    ck.listing_ = model_dir;
    for (const std::string& path : found) {
      const std::size_t f = add_file(path);
      for (const std::string& name : ck.files_[f].names()) {
        const auto [it, fresh] = ck.where_.emplace(name, f);
        if (!fresh) {
          throw Error(model_dir + ": tensor '" + name + "' is in both " + ck.files_[it->second].path() + " and " + path);
        }
      }
    }
  }
  return ck;
}

const SafetensorsEntry* Checkpoint::find(const std::string& name) const {
  const auto it = where_.find(name);
  return it == where_.end() ? nullptr : files_[it->second].find(name);
}

Tensor Checkpoint::tensor(const std::string& name) const {
  const auto it = where_.find(name);
  if (it == where_.end()) throw Error(listing_ + ": no tensor named '" + name + "'");
  return files_[it->second].tensor(name);
}

const std::string& Checkpoint::file_of(const std::string& name) const {
  const auto it = where_.find(name);
  return it == where_.end() ? listing_ : files_[it->second].path();
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [name, f] : where_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

std::shared_ptr<const void> Checkpoint::storage() const {
  auto owners = std::make_shared<std::vector<std::shared_ptr<const void>>>();
  for (const SafetensorsFile& f : files_) owners->push_back(f.owner());
  return owners;
}

std::string detect_text_prefix(const Checkpoint& checkpoint) {
  static constexpr const char* kPrefixes[] = {"model.language_model.", "language_model.model.", "model."};
  std::string tried;
  for (const char* prefix : kPrefixes) {
    const std::string name = std::string(prefix) + "embed_tokens.weight";
    if (checkpoint.contains(name)) return prefix;
    tried += (tried.empty() ? "" : ", ") + name;
  }
  throw Error(checkpoint.listing() + ": cannot find the text decoder's embedding; tried " + tried);
}

}  // namespace rowlm
