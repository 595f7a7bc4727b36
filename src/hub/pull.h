#pragma once
// rowlm pull: brings a model repository from the Hub into the cache.
//
// It lists the repo at the revision (one API call, which also resolves the
// revision to a commit), picks the files rowlm needs (select_files), and for
// each one not already in snapshots/<commit>/ asks the resolve URL for its
// ETag, size and location (HEAD, as huggingface_hub does), downloads it into
// blobs/<etag>.incomplete (resuming a previous partial download with a Range
// request; lost connections are retried, resuming where they stopped),
// checks its size and checksum against the listing (SHA-256 for LFS files,
// the git blob id for others; a mismatch discards the download and fetches
// it once more), renames it to blobs/<etag> and links it into the snapshot.
// refs/<revision> is written last, so a branch name only ever leads to a
// complete snapshot. The token goes only to the endpoint's own host, never
// to the host a download is redirected to.
//
// Failure atomicity: on any error the cache holds what it held before plus
// complete, verified blobs and their links (and possibly one .incomplete
// file to resume from); nothing partial is reachable from snapshots/ or refs/.

#include <cstdint>
#include <filesystem>
#include <string>

#include "hub/hub_settings.h"
#include "hub/repo_listing.h"
#include "hub/repo_ref.h"

namespace rowlm::hub {

// What a pull reports as it goes (the CLI draws progress from it). Called on
// the pulling thread.
class PullObserver {
 public:
  virtual ~PullObserver() = default;
  virtual void listed(const std::string& /*commit*/, std::size_t /*files*/) {}
  // A file already in the snapshot (or its blob already in the cache).
  virtual void cached(const std::string& /*file*/) {}
  // A download of `total` bytes begins, continuing from `from` bytes.
  virtual void started(const std::string& /*file*/, std::uint64_t /*from*/, std::uint64_t /*total*/) {}
  virtual void progressed(const std::string& /*file*/, std::uint64_t /*done*/, std::uint64_t /*total*/) {}
  virtual void finished(const std::string& /*file*/) {}
  // A transfer failed and is tried again (why says why).
  virtual void retrying(const std::string& /*file*/, const std::string& /*why*/) {}
};

struct PullResult {
  std::string commit;
  std::filesystem::path snapshot;     // CACHE/models--ORG--REPO/snapshots/<commit>
  std::uint64_t bytes_downloaded = 0;  // body bytes received this time
  int files_downloaded = 0;
  int files_cached = 0;
};

struct PullOptions {
  FileChoice choice;
  int max_attempts = 5;          // transfers of one file, counting the first
  double retry_wait_s = 0.5;     // before the first retry; doubles, at most 8 s
};

// Throws rowlm::Error naming the repo, file or URL at fault: offline mode
// (HF_HUB_OFFLINE), a gated or private repo without an accepted token, an
// unknown repo or revision, a file whose checksum stays wrong, a transfer
// that keeps failing.
PullResult pull(const HubSettings& settings, const RepoRef& ref, const PullOptions& options,
                PullObserver& observer);

}  // namespace rowlm::hub
