#include "hub/repo_listing.h"

#include <algorithm>
#include <cctype>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "hub/repo_ref.h"

namespace rowlm::hub {

using nlohmann::json;

namespace {

bool is_hex(const std::string& s, std::size_t n) {
  return s.size() == n && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::uint64_t size_field(const json& j, const std::string& where) {
  if (!j.is_number_unsigned()) throw Error(where + " is not a non-negative integer");
  return j.get<std::uint64_t>();
}

// A path the snapshot may hold: relative, no empty, "." or ".." parts.
bool safe_relative_path(const std::string& p) {
  if (p.empty() || p.front() == '/' || p.back() == '/') return false;
  std::size_t start = 0;
  while (start <= p.size()) {
    const auto slash = p.find('/', start);
    const std::string part = p.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (part.empty() || part == "." || part == "..") return false;
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return p.find('\\') == std::string::npos && p.find('\0') == std::string::npos;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::toupper(c)); });
  return s;
}

// Files rowlm reads besides the weights, when the repo has them.
const std::set<std::string>& support_files() {
  static const std::set<std::string> names = {
      "config.json",          "generation_config.json", "tokenizer.json", "tokenizer_config.json",
      "special_tokens_map.json", "chat_template.jinja", "chat_template.json", "tokenizer.model"};
  return names;
}

std::string names_of(const std::vector<const RepoFile*>& files) {
  std::string s;
  for (const auto* f : files) s += (s.empty() ? "" : ", ") + f->path;
  return s;
}

}  // namespace

RepoListing parse_repo_listing(const std::string& json_text, const std::string& what) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    throw Error(what + ": not JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw Error(what + ": not a JSON object");
  RepoListing out;
  if (!j.contains("sha") || !j["sha"].is_string() || !is_commit_hash(j["sha"].get<std::string>()))
    throw Error(what + ": no commit hash in \"sha\"");
  out.commit = j["sha"].get<std::string>();
  if (!j.contains("siblings") || !j["siblings"].is_array()) throw Error(what + ": no \"siblings\" file list");
  for (const auto& s : j["siblings"]) {
    if (!s.is_object() || !s.contains("rfilename") || !s["rfilename"].is_string())
      throw Error(what + ": a sibling without \"rfilename\"");
    RepoFile f;
    f.path = s["rfilename"].get<std::string>();
    if (!safe_relative_path(f.path)) throw Error(what + ": unsafe file name '" + f.path + "'");
    const std::string where = what + ": " + f.path;
    if (s.contains("size")) f.size = size_field(s["size"], where + " size");
    if (s.contains("blobId") && s["blobId"].is_string()) {
      f.blob_id = s["blobId"].get<std::string>();
      if (!is_hex(f.blob_id, 40)) throw Error(where + ": blobId is not a git object id");
    }
    if (s.contains("lfs") && s["lfs"].is_object()) {
      const auto& lfs = s["lfs"];
      if (!lfs.contains("sha256") || !lfs["sha256"].is_string() || !is_hex(lfs["sha256"].get<std::string>(), 64))
        throw Error(where + ": lfs.sha256 is not a SHA-256");
      f.lfs_sha256 = lfs["sha256"].get<std::string>();
      if (lfs.contains("size")) f.size = size_field(lfs["size"], where + " lfs.size");
    }
    out.files.push_back(std::move(f));
  }
  return out;
}

std::vector<RepoFile> select_files(const RepoListing& listing, const FileChoice& choice) {
  std::vector<RepoFile> out;
  std::vector<const RepoFile*> safetensors, gguf;
  const RepoFile* index = nullptr;
  for (const auto& f : listing.files) {
    if (f.path.find('/') != std::string::npos) continue;  // top level only (e.g. not original/)
    if (support_files().count(f.path)) out.push_back(f);
    if (ends_with(f.path, ".safetensors")) safetensors.push_back(&f);
    if (ends_with(upper(f.path), ".GGUF")) gguf.push_back(&f);
    if (f.path == "model.safetensors.index.json") index = &f;
  }
  if (!choice.file.empty() && !choice.quant.empty()) throw Error("give --file or --quant, not both");
  if (!choice.file.empty()) {
    auto it = std::find_if(listing.files.begin(), listing.files.end(),
                           [&](const RepoFile& f) { return f.path == choice.file; });
    if (it == listing.files.end()) throw Error("the repo has no file '" + choice.file + "'");
    if (!support_files().count(it->path)) out.push_back(*it);
    return out;
  }
  if (!choice.quant.empty()) {
    std::vector<const RepoFile*> matches;
    for (const auto* f : gguf)
      if (upper(f->path).find(upper(choice.quant)) != std::string::npos) matches.push_back(f);
    if (matches.empty())
      throw Error("no GGUF file of the repo matches --quant " + choice.quant +
                  (gguf.empty() ? std::string(" (it has none)") : "; its GGUF files: " + names_of(gguf)));
    const bool split = std::all_of(matches.begin(), matches.end(),
                                   [](const RepoFile* f) { return f->path.find("-of-") != std::string::npos; });
    if (matches.size() > 1 && !split)
      throw Error("--quant " + choice.quant + " matches several GGUF files: " + names_of(matches) +
                  "; choose one with --file");
    for (const auto* f : matches) out.push_back(*f);
    return out;
  }
  if (!safetensors.empty()) {
    for (const auto* f : safetensors) out.push_back(*f);
    if (index) out.push_back(*index);
    return out;
  }
  if (!gguf.empty())
    throw Error("the repo has GGUF files but no safetensors: choose one with --quant or --file (" + names_of(gguf) +
                ")");
  throw Error("the repo has no weights rowlm reads (top-level *.safetensors or *.gguf)");
}

}  // namespace rowlm::hub
