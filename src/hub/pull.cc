#include "hub/pull.h"

#include <chrono>
#include <fstream>
#include <thread>

#include "core/error.h"
#include "hub/digest.h"
#include "hub/file_lock.h"
#include "hub/http_client.h"
#include "hub/hub_cache.h"

namespace rowlm::hub {

namespace fs = std::filesystem;

namespace {

// The token goes to the endpoint's own origin only.
std::vector<std::string> auth_headers(const HubSettings& s, const std::string& url) {
  std::vector<std::string> h;
  if (s.token && url_origin(url) == url_origin(s.endpoint)) h.push_back("Authorization: Bearer " + *s.token);
  return h;
}

// Why the Hub refused, for messages: its X-Error-Message if it sent one.
std::string hub_reason(const HttpResponse& r) {
  const std::string m = r.header("x-error-message");
  return m.empty() ? "" : " (the Hub says: " + m + ")";
}

[[noreturn]] void throw_http(const HubSettings& s, const RepoRef& ref, const HttpResponse& r, const std::string& url) {
  if (r.status == 401 || r.status == 403) {
    const std::string how = s.token ? "the token given (HF_TOKEN or the token file) was not accepted for it"
                                    : "set HF_TOKEN, or put a token in " +
                                          (s.cache_dir.parent_path() / "token").string() +
                                          " (huggingface-cli login writes it there)";
    throw Error(ref.repo + " is gated, private or does not exist (HTTP " + std::to_string(r.status) + " from " +
                url + ")" + hub_reason(r) + ": " + how + "; for a gated repo, also accept its terms on the Hub");
  }
  if (r.status == 404)
    throw Error("the Hub has no " + ref.display() + " (HTTP 404 from " + url + ")" + hub_reason(r));
  throw Error("HTTP " + std::to_string(r.status) + " from " + url + hub_reason(r));
}

bool retryable_status(long status) {
  return status == 408 || status == 429 || status == 500 || status == 502 || status == 503 || status == 504;
}

// huggingface_hub's ETag normalisation: no weak prefix, no quotes.
std::string normalize_etag(std::string etag) {
  if (etag.rfind("W/", 0) == 0) etag = etag.substr(2);
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') etag = etag.substr(1, etag.size() - 2);
  return etag;
}

std::optional<std::uint64_t> parse_size(const std::string& v) {
  if (v.empty()) return std::nullopt;
  std::uint64_t n = 0;
  for (char c : v) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + std::uint64_t(c - '0');
  }
  return n;
}

struct FileMetadata {
  std::string etag;
  std::string commit;
  std::uint64_t size = 0;
  std::string location;  // where to GET the content
};

class Puller {
 public:
  Puller(const HubSettings& settings, const RepoRef& ref, const PullOptions& options, PullObserver& observer)
      : s_(settings), ref_(ref), options_(options), observer_(observer), cache_(settings.cache_dir) {}

  PullResult run() {
    if (s_.offline) {
      std::string msg = "HF_HUB_OFFLINE is set, so rowlm pull does not touch the network";
      if (auto snap = cache_.find_snapshot(ref_)) msg += " (" + ref_.display() + " is cached: " + snap->string() + ")";
      throw Error(msg);
    }
    const RepoListing listing = fetch_listing();
    const std::vector<RepoFile> files = select_files(listing, options_.choice);
    observer_.listed(listing.commit, files.size());
    PullResult result;
    result.commit = listing.commit;
    for (const RepoFile& f : files) fetch_file(listing.commit, f, result);
    if (ref_.revision != listing.commit) cache_.write_ref(ref_.repo, ref_.revision, listing.commit);
    cache_.write_tree_listing(ref_.repo, listing);
    result.snapshot = cache_.snapshot_dir(ref_.repo, listing.commit);
    fs::create_directories(result.snapshot);
    return result;
  }

 private:
  RepoListing fetch_listing() {
    const std::string url =
        s_.endpoint + "/api/models/" + ref_.repo + "/revision/" + url_escape(ref_.revision, false) + "?blobs=true";
    const HttpResponse r = with_retries(ref_.display(), [&] {
      RequestOptions o{auth_headers(s_, url), /*follow_redirects=*/true};
      return http_.get(url, o);
    });
    if (r.status != 200) throw_http(s_, ref_, r, url);
    return parse_repo_listing(r.body, "the Hub's listing of " + ref_.display() + " (" + url + ")");
  }

  // HEAD on the resolve URL, following only redirects within the endpoint
  // (a renamed repo), as huggingface_hub does: a redirect elsewhere is where
  // the content lives.
  FileMetadata fetch_metadata(const std::string& commit, const RepoFile& f) {
    std::string url = s_.endpoint + "/" + ref_.repo + "/resolve/" + commit + "/" + url_escape(f.path, true);
    for (int hop = 0; hop < 10; ++hop) {
      HttpResponse r = with_retries(f.path, [&] {
        RequestOptions o{auth_headers(s_, url), false};
        o.headers.push_back("Accept-Encoding: identity");
        return http_.head(url, o);
      });
      const std::string location = r.header("location");
      if (r.status >= 300 && r.status < 400 && !location.empty() && location.front() == '/') {
        url = url_origin(url) + location;
        continue;
      }
      if (r.status != 200 && !(r.status >= 300 && r.status < 400 && !location.empty())) throw_http(s_, ref_, r, url);
      FileMetadata m;
      m.etag = normalize_etag(r.header("x-linked-etag").empty() ? r.header("etag") : r.header("x-linked-etag"));
      m.commit = r.header("x-repo-commit");
      const auto size = parse_size(r.header("x-linked-size").empty() ? r.header("content-length")
                                                                      : r.header("x-linked-size"));
      if (m.etag.empty() || m.etag.find('/') != std::string::npos || m.etag.find("..") != std::string::npos)
        throw Error("the Hub sent no usable ETag for " + f.path + " (" + url + ")");
      if (!size) throw Error("the Hub sent no size for " + f.path + " (" + url + ")");
      if (!m.commit.empty() && m.commit != commit)
        throw Error("the Hub answered " + f.path + " from commit " + m.commit + ", not the listed " + commit);
      if (f.lfs_sha256 && m.etag != *f.lfs_sha256)
        throw Error("the Hub's ETag for " + f.path + " (" + m.etag + ") is not its listed sha256 " + *f.lfs_sha256);
      if (f.size && *size != *f.size)
        throw Error("the Hub's size for " + f.path + " (" + std::to_string(*size) + ") is not its listed size " +
                    std::to_string(*f.size));
      m.size = *size;
      m.location = r.status == 200 ? url : location;
      return m;
    }
    throw Error("too many redirects for " + f.path);
  }

  void fetch_file(const std::string& commit, const RepoFile& f, PullResult& result) {
    if (cache_.has_file(ref_.repo, commit, f.path)) {
      observer_.cached(f.path);
      ++result.files_cached;
      return;
    }
    const FileMetadata m = fetch_metadata(commit, f);
    const fs::path blob = cache_.blob_path(ref_.repo, m.etag);
    std::error_code ec;
    bool downloaded = false;
    if (!fs::is_regular_file(blob, ec)) {
      fs::create_directories(blob.parent_path());
      FileLock lock(cache_.lock_path(ref_.repo, m.etag));
      if (!fs::is_regular_file(blob, ec)) {  // another process may have finished it meanwhile
        download_verified(f, m, result);
        downloaded = true;
      }
    }
    if (downloaded) {
      ++result.files_downloaded;
    } else {  // the blob came with another revision, or from another tool
      observer_.cached(f.path);
      ++result.files_cached;
    }
    cache_.link_file(ref_.repo, commit, f.path, m.etag);
  }

  // Downloads into .incomplete and renames it to the blob once its checksum
  // is right; a wrong one discards the download and starts once more.
  void download_verified(const RepoFile& f, const FileMetadata& m, PullResult& result) {
    const fs::path incomplete = cache_.incomplete_path(ref_.repo, m.etag);
    const fs::path blob = cache_.blob_path(ref_.repo, m.etag);
    for (int round = 0;; ++round) {
      const std::string digest = download(f, m, incomplete, result);
      const std::string expected = f.lfs_sha256 ? *f.lfs_sha256 : f.blob_id;
      if (expected.empty() || digest == expected) break;
      fs::remove(incomplete);
      const std::string what = std::string(f.lfs_sha256 ? "sha256 " : "git blob id ") + digest + " of " + f.path +
                               " is not the listed " + expected;
      if (round == 1) throw Error(what + ", twice: refused (the download was discarded)");
      observer_.retrying(f.path, what + ": downloading it again");
    }
    fs::rename(incomplete, blob);
    observer_.finished(f.path);
  }

  // Brings `incomplete` to m.size bytes, resuming what it holds; returns the
  // digest of the whole content.
  std::string download(const RepoFile& f, const FileMetadata& m, const fs::path& incomplete, PullResult& result) {
    const bool lfs = f.lfs_sha256.has_value();
    if (m.size == 0) std::ofstream(incomplete, std::ios::binary | std::ios::trunc);  // no body will come
    for (int attempt = 1;; ++attempt) {
      std::error_code ec;
      std::uint64_t have = fs::is_regular_file(incomplete, ec) ? fs::file_size(incomplete) : 0;
      if (have > m.size) {  // not a prefix of this file
        fs::remove(incomplete);
        have = 0;
      }
      Digest digest = lfs ? Digest(Digest::Kind::Sha256) : git_blob_digest(m.size);
      if (have > 0) hash_prefix(incomplete, have, digest);
      if (have == m.size) return digest.hex();
      observer_.started(f.path, have, m.size);
      std::ofstream out;
      std::uint64_t written = have;
      RequestOptions o{auth_headers(s_, m.location), /*follow_redirects=*/true};
      o.headers.push_back("Accept-Encoding: identity");
      if (have > 0) o.headers.push_back("Range: bytes=" + std::to_string(have) + "-");
      const auto begin = [&](long status, const std::map<std::string, std::string>& headers) {
        if (status == 206 && have > 0) {
          const auto range = headers.find("content-range");
          const std::string expected = "bytes " + std::to_string(have) + "-";
          if (range == headers.end() || range->second.rfind(expected, 0) != 0)
            throw Error("the server answered the request for " + f.path + " from byte " + std::to_string(have) +
                        " with Content-Range '" + (range == headers.end() ? "" : range->second) + "'");
          out.open(incomplete, std::ios::binary | std::ios::app);
        } else {  // the whole file: start over
          digest = lfs ? Digest(Digest::Kind::Sha256) : git_blob_digest(m.size);
          written = 0;
          out.open(incomplete, std::ios::binary | std::ios::trunc);
        }
        if (!out) throw Error("cannot write " + incomplete.string());
      };
      const auto sink = [&](std::string_view bytes) {
        if (written + bytes.size() > m.size)
          throw Error("the Hub sent more than the " + std::to_string(m.size) + " bytes of " + f.path);
        out.write(bytes.data(), std::streamsize(bytes.size()));
        if (!out) throw Error("cannot write " + incomplete.string() + " (disk full?)");
        digest.update(bytes);
        written += bytes.size();
        result.bytes_downloaded += bytes.size();
      };
      const auto progress = [&](std::uint64_t) { observer_.progressed(f.path, written, m.size); };
      std::string failure;
      try {
        const HttpResponse r = http_.stream(m.location, o, begin, sink, progress);
        out.close();
        if (r.status == 416) {  // our partial file does not fit the server's: start over
          fs::remove(incomplete);
          failure = "HTTP 416 for the range";
        } else if (r.status < 200 || r.status >= 300) {
          if (!retryable_status(r.status)) throw_http(s_, ref_, r, r.url);
          failure = "HTTP " + std::to_string(r.status);
        } else if (written != m.size) {
          failure = "the connection closed after " + std::to_string(written) + " of " + std::to_string(m.size) +
                    " bytes";
        } else {
          return digest.hex();
        }
      } catch (const TransferError& e) {
        if (!e.retryable()) throw Error("downloading " + f.path + ": " + e.what());
        failure = e.what();
      }
      if (attempt >= options_.max_attempts)
        throw Error("downloading " + f.path + " failed " + std::to_string(attempt) + " times (last: " + failure +
                    "); run rowlm pull again to resume from byte " + std::to_string(written));
      observer_.retrying(f.path, failure);
      wait_before_retry(attempt);
    }
  }

  static void hash_prefix(const fs::path& path, std::uint64_t bytes, Digest& digest) {
    std::ifstream in(path, std::ios::binary);
    std::vector<char> buf(1 << 20);
    while (bytes > 0 && in) {
      const auto n = std::streamsize(std::min<std::uint64_t>(bytes, buf.size()));
      in.read(buf.data(), n);
      if (in.gcount() != n) throw Error("cannot read " + path.string());
      digest.update(std::string_view(buf.data(), std::size_t(n)));
      bytes -= std::uint64_t(n);
    }
  }

  void wait_before_retry(int attempt) const {
    double wait = options_.retry_wait_s;
    for (int i = 1; i < attempt && wait < 8; ++i) wait *= 2;
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(wait, 8.0)));
  }

  // Runs `request`, retrying transfer failures and retryable statuses.
  template <class Request>
  HttpResponse with_retries(const std::string& what, Request&& request) {
    for (int attempt = 1;; ++attempt) {
      std::string failure;
      try {
        HttpResponse r = request();
        if (!retryable_status(r.status)) return r;
        if (attempt >= options_.max_attempts) return r;
        failure = "HTTP " + std::to_string(r.status);
      } catch (const TransferError& e) {
        if (!e.retryable() || attempt >= options_.max_attempts)
          throw Error(std::string("cannot reach the Hub for ") + what + ": " + e.what());
        failure = e.what();
      }
      observer_.retrying(what, failure);
      wait_before_retry(attempt);
    }
  }

  const HubSettings& s_;
  const RepoRef& ref_;
  const PullOptions& options_;
  PullObserver& observer_;
  HubCache cache_;
  HttpClient http_;
};

}  // namespace

PullResult pull(const HubSettings& settings, const RepoRef& ref, const PullOptions& options, PullObserver& observer) {
  return Puller(settings, ref, options, observer).run();
}

}  // namespace rowlm::hub
