#pragma once
// A fake Hugging Face Hub on loopback for the hub tests: the API listing,
// resolve URLs with the Hub's headers (X-Repo-Commit, ETag / X-Linked-Etag,
// X-Linked-Size), LFS files redirected to a second server under another host
// name ("localhost" rather than 127.0.0.1) that serves byte ranges, and
// faults on request: a connection cut mid-file, corrupted bytes, a gated repo
// that needs a token. Every request is logged.

#include <httplib.h>

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "hub/digest.h"

namespace rowlm::hub::testing {

struct FakeFile {
  std::string path;
  std::string content;
  bool lfs = false;
};

struct FakeRepo {
  std::string commit;
  std::map<std::string, std::string> refs;  // revision -> commit (main is added)
  std::vector<FakeFile> files;
  std::string token;  // non-empty: gated, its files need "Authorization: Bearer TOKEN"
};

struct Hit {
  std::string method, host, path, range, auth;
};

class FakeHub {
 public:
  FakeHub() {
    api_port_ = api_.bind_to_any_port("127.0.0.1");
    blob_port_ = blobs_.bind_to_any_port("127.0.0.1");
    routes();
    api_thread_ = std::thread([this] { api_.listen_after_bind(); });
    blob_thread_ = std::thread([this] { blobs_.listen_after_bind(); });
    // stop() only stops a server that is running: wait until both are.
    while (!api_.is_running() || !blobs_.is_running()) std::this_thread::yield();
  }
  ~FakeHub() {
    api_.stop();
    blobs_.stop();
    api_thread_.join();
    blob_thread_.join();
  }

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(api_port_); }
  std::string blob_host() const { return "localhost:" + std::to_string(blob_port_); }

  void add_repo(const std::string& id, FakeRepo repo) {
    std::lock_guard lock(mu_);
    repo.refs.emplace("main", repo.commit);
    repos_[id] = std::move(repo);
  }

  // The next `times` GETs of `path`'s content send only `bytes` bytes (of the
  // range asked for), then cut the connection.
  void cut_after(const std::string& path, std::size_t bytes, int times) {
    std::lock_guard lock(mu_);
    cuts_[path] = {bytes, times};
  }
  // The next `times` GETs of `path`'s content have one byte changed.
  void corrupt(const std::string& path, int times) {
    std::lock_guard lock(mu_);
    corruptions_[path] = times;
  }

  std::vector<Hit> hits() const {
    std::lock_guard lock(mu_);
    return hits_;
  }
  void clear_hits() {
    std::lock_guard lock(mu_);
    hits_.clear();
  }

  static std::string blob_name(const FakeFile& f) {
    if (f.lfs) return sha256_hex(f.content);
    Digest d = git_blob_digest(f.content.size());
    d.update(f.content);
    return d.hex();
  }

 private:
  struct Cut {
    std::size_t bytes;
    int times;
  };

  void log(const httplib::Request& req) {
    std::lock_guard lock(mu_);
    hits_.push_back({req.method, req.get_header_value("Host"), req.path, req.get_header_value("Range"),
                     req.get_header_value("Authorization")});
  }

  // The repo `id` if the request may see it; otherwise answers 401 and
  // returns null. As on the Hub, a gated repo's listing is public and its
  // files need the token.
  const FakeRepo* visible(const std::string& id, const httplib::Request& req, httplib::Response& res,
                          bool files) {
    auto it = repos_.find(id);
    if (it == repos_.end()) {
      res.status = 401;
      res.set_header("X-Error-Message", "Repository not found");
      return nullptr;
    }
    if (files && !it->second.token.empty() &&
        req.get_header_value("Authorization") != "Bearer " + it->second.token) {
      res.status = 401;
      res.set_header("X-Error-Code", "GatedRepo");
      res.set_header("X-Error-Message", "Access to model " + id + " is restricted");
      return nullptr;
    }
    return &it->second;
  }

  void routes() {
    api_.Get(R"(/api/models/([^/]+)/([^/]+)/revision/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
      log(req);
      std::lock_guard lock(mu_);
      const FakeRepo* repo = visible(std::string(req.matches[1]) + "/" + std::string(req.matches[2]), req, res, false);
      if (!repo) return;
      const std::string rev = req.matches[3];
      std::string commit;
      if (auto r = repo->refs.find(rev); r != repo->refs.end()) commit = r->second;
      else if (rev == repo->commit) commit = rev;
      if (commit.empty()) {
        res.status = 404;
        res.set_header("X-Error-Message", "Invalid rev id: " + rev);
        return;
      }
      nlohmann::json siblings = nlohmann::json::array();
      for (const auto& f : repo->files) {
        Digest git = git_blob_digest(f.lfs ? 130 : f.content.size());  // an LFS pointer's blob id
        git.update(f.lfs ? std::string(130, 'p') : f.content);
        nlohmann::json s = {{"rfilename", f.path}, {"blobId", git.hex()}, {"size", f.lfs ? 130 : f.content.size()}};
        if (f.lfs) s["lfs"] = {{"sha256", sha256_hex(f.content)}, {"size", f.content.size()}, {"pointerSize", 130}};
        siblings.push_back(s);
      }
      const nlohmann::json body = {{"id", std::string(req.matches[1]) + "/" + std::string(req.matches[2])},
                                   {"sha", commit}, {"siblings", siblings}, {"gated", !repo->token.empty()}};
      res.set_content(body.dump(), "application/json");
    });
    api_.Get(R"(/([^/]+)/([^/]+)/resolve/([^/]+)/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
      log(req);
      std::lock_guard lock(mu_);
      const FakeRepo* repo = visible(std::string(req.matches[1]) + "/" + std::string(req.matches[2]), req, res, true);
      if (!repo) return;
      if (req.matches[3] != repo->commit) {
        res.status = 404;
        return;
      }
      for (const auto& f : repo->files) {
        if (f.path != req.matches[4]) continue;
        res.set_header("X-Repo-Commit", repo->commit);
        if (f.lfs) {
          res.status = 302;
          res.set_header("Location", "http://" + blob_host() + "/blobs/" + blob_name(f));
          res.set_header("X-Linked-Etag", "\"" + blob_name(f) + "\"");
          res.set_header("X-Linked-Size", std::to_string(f.content.size()));
        } else {
          res.set_header("ETag", "\"" + blob_name(f) + "\"");
          res.set_content(f.content, "application/octet-stream");
        }
        return;
      }
      res.status = 404;
      res.set_header("X-Error-Code", "EntryNotFound");
    });
    blobs_.Get(R"(/blobs/([0-9a-f]+))", [this](const httplib::Request& req, httplib::Response& res) {
      log(req);
      std::lock_guard lock(mu_);
      if (req.has_header("Authorization")) {  // a presigned URL: the token must not travel here
        res.status = 400;
        return;
      }
      for (const auto& [id, repo] : repos_) {
        for (const auto& f : repo.files) {
          if (!f.lfs || blob_name(f) != req.matches[1]) continue;
          std::string content = f.content;
          if (auto c = corruptions_.find(f.path); c != corruptions_.end() && c->second > 0) {
            --c->second;
            content[content.size() / 2] ^= 0x5a;
          }
          std::size_t limit = content.size();
          if (auto c = cuts_.find(f.path); c != cuts_.end() && c->second.times > 0) {
            --c->second.times;
            limit = c->second.bytes;
          }
          auto shared = std::make_shared<std::string>(std::move(content));
          auto start = std::make_shared<std::optional<std::size_t>>();
          // httplib applies the Range header: the provider is asked for the
          // range's bytes, from its first offset on; `limit` counts from there.
          res.set_content_provider(
              shared->size(), "application/octet-stream",
              [shared, start, limit](std::size_t offset, std::size_t length, httplib::DataSink& sink) {
                if (!*start) *start = offset;
                const std::size_t sent = offset - **start;
                if (sent >= limit) return false;  // cut the connection here
                sink.write(shared->data() + offset, std::min(length, limit - sent));
                return true;
              });
          return;
        }
      }
      res.status = 404;
    });
  }

  httplib::Server api_, blobs_;
  int api_port_ = 0, blob_port_ = 0;
  std::thread api_thread_, blob_thread_;
  mutable std::mutex mu_;
  std::map<std::string, FakeRepo> repos_;
  std::map<std::string, Cut> cuts_;
  std::map<std::string, int> corruptions_;
  std::vector<Hit> hits_;
};

}  // namespace rowlm::hub::testing
