#pragma once
// The Hub cache on disk, laid out exactly as huggingface_hub lays it out, so
// that either tool reuses what the other fetched:
//
//   CACHE/models--ORG--REPO/blobs/<etag>             file contents, named by
//                                                    sha256 (LFS) or git blob id
//   CACHE/models--ORG--REPO/blobs/<etag>.incomplete  a download in progress
//   CACHE/models--ORG--REPO/snapshots/<commit>/<path> relative symlinks into blobs/
//   CACHE/models--ORG--REPO/refs/<revision>          the commit a branch or tag names
//   CACHE/models--ORG--REPO/trees/<commit>.json      the commit's file listing
//                                                    (huggingface_hub >= 1.x reads it
//                                                    instead of asking the Hub again)
//   CACHE/.locks/models--ORG--REPO/<etag>.lock       held while a blob is written
//
// A blob appears under its final name only when complete and verified (it is
// renamed from .incomplete), and a snapshot entry only once its blob exists,
// so nothing partial is ever reachable from snapshots/. Methods that write
// replace files by rename, so a reader sees the old or the new file.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "hub/repo_listing.h"
#include "hub/repo_ref.h"

namespace rowlm::hub {

struct CachedRepo {
  std::string repo;                      // ORG/REPO
  std::uint64_t bytes = 0;               // the blobs' size on disk
  std::vector<std::string> revisions;    // refs (branch and tag names)
  std::vector<std::string> commits;      // snapshots present
  std::vector<std::string> formats;      // "safetensors", "gguf" (from the files present)
};

class HubCache {
 public:
  explicit HubCache(std::filesystem::path root) : root_(std::move(root)) {}

  const std::filesystem::path& root() const { return root_; }
  std::filesystem::path repo_dir(const std::string& repo) const;
  std::filesystem::path blob_path(const std::string& repo, const std::string& etag) const;
  std::filesystem::path incomplete_path(const std::string& repo, const std::string& etag) const;
  std::filesystem::path lock_path(const std::string& repo, const std::string& etag) const;
  std::filesystem::path snapshot_dir(const std::string& repo, const std::string& commit) const;

  // The commit refs/<revision> names, if the cache has that ref.
  std::optional<std::string> read_ref(const std::string& repo, const std::string& revision) const;
  // Points refs/<revision> at `commit` (no trailing newline, as huggingface_hub writes).
  void write_ref(const std::string& repo, const std::string& revision, const std::string& commit) const;

  // Writes trees/<commit>.json, the commit's whole listing in the format and
  // bytes huggingface_hub's _tree_cache.py writes (format_version 1, files by
  // path with size, blob_id and, for LFS files, lfs_sha256 and lfs_size;
  // json.dump with indent 1), unless it exists: a commit's listing never
  // changes. Written only when every file's size and blob id are listed, as
  // huggingface_hub needs them.
  void write_tree_listing(const std::string& repo, const RepoListing& listing) const;

  // The snapshot directory for `ref` if the cache has it: a commit hash
  // names its snapshot directly, a branch or tag goes through refs/.
  std::optional<std::filesystem::path> find_snapshot(const RepoRef& ref) const;

  // True if snapshots/<commit>/<file> exists and leads to an existing blob.
  bool has_file(const std::string& repo, const std::string& commit, const std::string& file) const;

  // Makes snapshots/<commit>/<file> a relative symlink to blobs/<etag>
  // (which must exist), replacing whatever was there.
  void link_file(const std::string& repo, const std::string& commit, const std::string& file,
                 const std::string& etag) const;

  // Every model repo in the cache, sorted by name.
  std::vector<CachedRepo> list() const;

  // Deletes the repo's folder; false if the cache has no such repo.
  bool remove(const std::string& repo) const;

 private:
  std::filesystem::path root_;
};

}  // namespace rowlm::hub
