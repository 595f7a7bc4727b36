#include "hub/hub_cache.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace rowlm::hub {

namespace fs = std::filesystem;

namespace {

// A name in the same directory for writing before the rename.
fs::path temporary_beside(const fs::path& target) {
  return target.parent_path() / ("." + target.filename().string() + ".tmp" + std::to_string(::getpid()));
}

std::string read_small_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The weight formats of the files in a snapshot directory.
void add_formats(const fs::path& snapshot, std::set<std::string>& formats) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(snapshot, ec)) {
    const std::string ext = e.path().extension().string();
    if (ext == ".safetensors") formats.insert("safetensors");
    if (ext == ".gguf") formats.insert("gguf");
  }
}

}  // namespace

fs::path HubCache::repo_dir(const std::string& repo) const { return root_ / repo_folder_name(repo); }

fs::path HubCache::blob_path(const std::string& repo, const std::string& etag) const {
  return repo_dir(repo) / "blobs" / etag;
}

fs::path HubCache::incomplete_path(const std::string& repo, const std::string& etag) const {
  return repo_dir(repo) / "blobs" / (etag + ".incomplete");
}

fs::path HubCache::lock_path(const std::string& repo, const std::string& etag) const {
  return root_ / ".locks" / repo_folder_name(repo) / (etag + ".lock");
}

fs::path HubCache::snapshot_dir(const std::string& repo, const std::string& commit) const {
  return repo_dir(repo) / "snapshots" / commit;
}

std::optional<std::string> HubCache::read_ref(const std::string& repo, const std::string& revision) const {
  const fs::path p = repo_dir(repo) / "refs" / revision;
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return std::nullopt;
  std::string commit = read_small_file(p);
  while (!commit.empty() && std::isspace(static_cast<unsigned char>(commit.back()))) commit.pop_back();
  if (!is_commit_hash(commit)) throw Error("the cache file " + p.string() + " does not hold a commit hash");
  return commit;
}

void HubCache::write_ref(const std::string& repo, const std::string& revision, const std::string& commit) const {
  const fs::path p = repo_dir(repo) / "refs" / revision;
  fs::create_directories(p.parent_path());
  const fs::path tmp = temporary_beside(p);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << commit;
    if (!out.flush()) throw Error("cannot write " + tmp.string());
  }
  fs::rename(tmp, p);
}

void HubCache::write_tree_listing(const std::string& repo, const RepoListing& listing) const {
  const fs::path p = repo_dir(repo) / "trees" / (listing.commit + ".json");
  std::error_code ec;
  if (fs::exists(p, ec)) return;
  std::map<std::string, const RepoFile*> by_path;  // Python's sorted(): code point order = UTF-8 byte order
  for (const RepoFile& f : listing.files) {
    if (!f.size || f.blob_id.empty()) return;
    by_path[f.path] = &f;
  }
  // ordered_json keeps the keys in huggingface_hub's order.
  nlohmann::ordered_json files = nlohmann::ordered_json::object();
  for (const auto& [path, f] : by_path) {
    nlohmann::ordered_json e;
    e["size"] = *f->size;
    e["blob_id"] = f->blob_id;
    if (f->lfs_sha256) {
      e["lfs_sha256"] = *f->lfs_sha256;
      e["lfs_size"] = *f->size;
    }
    files[path] = std::move(e);
  }
  nlohmann::ordered_json doc;
  doc["format_version"] = 1;
  doc["files"] = std::move(files);
  fs::create_directories(p.parent_path());
  const fs::path tmp = temporary_beside(p);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << doc.dump(1, ' ', /*ensure_ascii=*/true);  // json.dump's defaults: ASCII, no final newline
    if (!out.flush()) throw Error("cannot write " + tmp.string());
  }
  fs::rename(tmp, p);
}

std::optional<fs::path> HubCache::find_snapshot(const RepoRef& ref) const {
  std::optional<std::string> commit;
  if (is_commit_hash(ref.revision)) commit = ref.revision;
  else commit = read_ref(ref.repo, ref.revision);
  if (!commit) return std::nullopt;
  const fs::path dir = snapshot_dir(ref.repo, *commit);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return std::nullopt;
  return dir;
}

bool HubCache::has_file(const std::string& repo, const std::string& commit, const std::string& file) const {
  std::error_code ec;
  return fs::is_regular_file(snapshot_dir(repo, commit) / file, ec);  // follows the symlink
}

void HubCache::link_file(const std::string& repo, const std::string& commit, const std::string& file,
                         const std::string& etag) const {
  const fs::path blob = blob_path(repo, etag);
  ROWLM_CHECK(fs::is_regular_file(blob), "link_file: blob " + blob.string() + " missing");
  const fs::path pointer = snapshot_dir(repo, commit) / file;
  fs::create_directories(pointer.parent_path());
  const fs::path tmp = temporary_beside(pointer);
  std::error_code ec;
  fs::remove(tmp, ec);
  // Both paths lie under root_, so their lexical relation is the link
  // huggingface_hub writes (../../blobs/<etag>, one more ../ per folder).
  fs::create_symlink(blob.lexically_relative(pointer.parent_path()), tmp);
  fs::rename(tmp, pointer);
}

std::vector<CachedRepo> HubCache::list() const {
  std::vector<CachedRepo> out;
  std::error_code ec;
  if (!fs::is_directory(root_, ec)) return out;
  for (const auto& entry : fs::directory_iterator(root_, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name.rfind("models--", 0) != 0) continue;
    const std::string rest = name.substr(8);
    const auto sep = rest.find("--");
    if (sep == std::string::npos) continue;
    CachedRepo r;
    r.repo = rest.substr(0, sep) + "/" + rest.substr(sep + 2);
    for (const auto& b : fs::directory_iterator(entry.path() / "blobs", ec))
      if (b.is_regular_file()) r.bytes += b.file_size();
    const fs::path refs = entry.path() / "refs";
    if (fs::is_directory(refs, ec))
      for (const auto& f : fs::recursive_directory_iterator(refs, ec))
        if (f.is_regular_file()) r.revisions.push_back(fs::relative(f.path(), refs).string());
    std::set<std::string> formats;
    for (const auto& s : fs::directory_iterator(entry.path() / "snapshots", ec)) {
      r.commits.push_back(s.path().filename().string());
      add_formats(s.path(), formats);
    }
    r.formats.assign(formats.begin(), formats.end());
    std::sort(r.revisions.begin(), r.revisions.end());
    std::sort(r.commits.begin(), r.commits.end());
    out.push_back(std::move(r));
  }
  std::sort(out.begin(), out.end(), [](const CachedRepo& a, const CachedRepo& b) { return a.repo < b.repo; });
  return out;
}

bool HubCache::remove(const std::string& repo) const {
  const fs::path dir = repo_dir(repo);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return false;
  fs::remove_all(dir);
  fs::remove_all(root_ / ".locks" / repo_folder_name(repo), ec);
  return true;
}

}  // namespace rowlm::hub
