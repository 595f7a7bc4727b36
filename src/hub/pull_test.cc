// rowlm pull against a fake Hub on loopback: the cache layout huggingface_hub
// writes, redirects to another host without the token, resumption after a
// cut connection (in one run and across runs), checksums that refuse corrupt
// data, gated repos, offline mode, and a second pull that downloads nothing.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "hub/fake_hub_test_util.h"
#include "hub/hub_cache.h"
#include "hub/pull.h"
#include "io/temp_dir.h"

namespace rowlm::hub {
namespace {

namespace fs = std::filesystem;
using testing::FakeFile;
using testing::FakeHub;
using testing::FakeRepo;

const std::string kCommit = "0123456789abcdef0123456789abcdef01234567";
const std::string kOtherCommit = "89abcdef0123456789abcdef0123456789abcdef";

std::string bytes_of(std::size_t n, unsigned seed) {
  std::string s(n, '\0');
  unsigned x = seed * 2654435761u + 1;
  for (auto& c : s) {
    x = x * 1664525u + 1013904223u;
    c = char(x >> 24);
  }
  return s;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A small sharded safetensors model, plus files rowlm does not fetch.
FakeRepo model_repo() {
  FakeRepo r;
  r.commit = kCommit;
  r.files = {{"config.json", R"({"model_type":"gemma4_text"})", false},
             {"tokenizer.json", R"({"model":{"type":"BPE"}})", false},
             {"model-00001-of-00002.safetensors", bytes_of(150000, 1), true},
             {"model-00002-of-00002.safetensors", bytes_of(90000, 2), true},
             {"model.safetensors.index.json", R"({"weight_map":{}})", false},
             {"README.md", "# a model", false},
             {"original/consolidated.safetensors", bytes_of(5000, 3), true}};
  return r;
}

class RecordingObserver : public PullObserver {
 public:
  void retrying(const std::string& file, const std::string& why) override { retries.push_back(file + ": " + why); }
  std::vector<std::string> retries;
};

struct PullFixture : ::testing::Test {
  FakeHub hub;
  TempDir dir{"rowlm-hub"};
  HubSettings settings;
  PullOptions options;
  RecordingObserver observer;

  void SetUp() override {
    settings.endpoint = hub.endpoint();
    settings.cache_dir = fs::path(dir.path()) / "hub";
    options.retry_wait_s = 0.01;
  }
  PullResult pull_repo(const std::string& text) {
    return pull(settings, repo_ref_or_throw(text), options, observer);
  }
  fs::path repo_dir() const { return settings.cache_dir / "models--acme--tiny"; }
  std::size_t gets_of(const std::string& blob) const {
    std::size_t n = 0;
    for (const auto& h : hub.hits())
      if (h.method == "GET" && h.path == "/blobs/" + blob) ++n;
    return n;
  }
};

TEST_F(PullFixture, LaysOutTheCacheAsHuggingfaceHubDoes) {
  const FakeRepo repo = model_repo();
  hub.add_repo("acme/tiny", repo);
  const PullResult r = pull_repo("acme/tiny");
  EXPECT_EQ(r.commit, kCommit);
  EXPECT_EQ(r.snapshot, repo_dir() / "snapshots" / kCommit);
  EXPECT_EQ(r.files_downloaded, 5);
  // refs/main holds the commit, without a newline.
  EXPECT_EQ(slurp(repo_dir() / "refs" / "main"), kCommit);
  for (const FakeFile& f : repo.files) {
    const fs::path pointer = r.snapshot / f.path;
    const bool wanted = f.path != "README.md" && f.path.rfind("original/", 0) != 0;
    ASSERT_EQ(fs::is_symlink(pointer), wanted) << f.path;
    if (!wanted) continue;
    // blobs are named by the content's sha256 (LFS) or git blob id; the
    // snapshot entry is a relative link to it.
    const std::string blob = FakeHub::blob_name(f);
    EXPECT_EQ(fs::read_symlink(pointer).string(), "../../blobs/" + blob) << f.path;
    EXPECT_EQ(slurp(repo_dir() / "blobs" / blob), f.content) << f.path;
  }
  EXPECT_EQ(FakeHub::blob_name(repo.files[2]).size(), 64u);
  EXPECT_EQ(FakeHub::blob_name(repo.files[0]).size(), 40u);
  EXPECT_TRUE(fs::exists(settings.cache_dir / ".locks" / "models--acme--tiny"));
  // Nothing else lies in blobs/ (no .incomplete files left).
  std::size_t blobs = 0;
  for (const auto& e : fs::directory_iterator(repo_dir() / "blobs")) {
    EXPECT_EQ(e.path().extension(), "") << e.path();
    ++blobs;
  }
  EXPECT_EQ(blobs, 5u);
  // LFS content came from the second host, which never saw the token header.
  bool redirected = false;
  for (const auto& h : hub.hits()) {
    if (h.host == hub.blob_host()) redirected = true;
    EXPECT_TRUE(h.auth.empty());
  }
  EXPECT_TRUE(redirected);
}

TEST_F(PullFixture, ASecondPullDownloadsNothing) {
  hub.add_repo("acme/tiny", model_repo());
  const PullResult first = pull_repo("acme/tiny");
  hub.clear_hits();
  const PullResult second = pull_repo("acme/tiny");
  EXPECT_EQ(second.bytes_downloaded, 0u);
  EXPECT_EQ(second.files_downloaded, 0);
  EXPECT_EQ(second.files_cached, 5);
  ASSERT_EQ(hub.hits().size(), 1u);  // the listing only
  EXPECT_EQ(hub.hits()[0].path.rfind("/api/models/acme/tiny/revision/main", 0), 0u);
  EXPECT_EQ(second.snapshot, first.snapshot);
}

TEST_F(PullFixture, ResumesACutConnectionWhereItStopped) {
  const FakeRepo repo = model_repo();
  hub.add_repo("acme/tiny", repo);
  hub.cut_after("model-00001-of-00002.safetensors", 40000, 2);
  const PullResult r = pull_repo("acme/tiny");
  const std::string blob = FakeHub::blob_name(repo.files[2]);
  EXPECT_EQ(slurp(r.snapshot / repo.files[2].path), repo.files[2].content);
  std::vector<std::string> ranges;
  for (const auto& h : hub.hits())
    if (h.path == "/blobs/" + blob) ranges.push_back(h.range);
  // The second cut request asked for the rest from 40000 and again got 40000 more.
  EXPECT_EQ(ranges, (std::vector<std::string>{"", "bytes=40000-", "bytes=80000-"}));
  // Every byte crossed the wire once.
  std::uint64_t total = 0;
  for (const auto& f : repo.files)
    if (f.path != "README.md" && f.path.rfind("original/", 0) != 0) total += f.content.size();
  EXPECT_EQ(r.bytes_downloaded, total);
  EXPECT_EQ(observer.retries.size(), 2u);
}

TEST_F(PullFixture, ResumesAnInterruptedPullInTheNextRun) {
  const FakeRepo repo = model_repo();
  hub.add_repo("acme/tiny", repo);
  const std::string& shard = repo.files[3].path;
  const std::string blob = FakeHub::blob_name(repo.files[3]);
  hub.cut_after(shard, 30000, 1000);
  options.max_attempts = 2;
  EXPECT_THROW(pull_repo("acme/tiny"), Error);
  // The partial download waits as .incomplete; nothing partial is reachable.
  EXPECT_EQ(fs::file_size(repo_dir() / "blobs" / (blob + ".incomplete")), 60000u);
  EXPECT_FALSE(fs::exists(repo_dir() / "blobs" / blob));
  EXPECT_FALSE(fs::exists(repo_dir() / "snapshots" / kCommit / shard));
  EXPECT_FALSE(fs::exists(repo_dir() / "refs" / "main"));
  EXPECT_FALSE(HubCache(settings.cache_dir).find_snapshot(repo_ref_or_throw("acme/tiny")));

  hub.cut_after(shard, 0, 0);
  hub.clear_hits();
  const PullResult r = pull_repo("acme/tiny");
  std::vector<std::string> ranges;
  for (const auto& h : hub.hits())
    if (h.path == "/blobs/" + blob) ranges.push_back(h.range);
  EXPECT_EQ(ranges, std::vector<std::string>{"bytes=60000-"});
  // The rest of the shard, then the index that came after it; the files
  // before it were done.
  EXPECT_EQ(r.bytes_downloaded, 30000u + repo.files[4].content.size());
  EXPECT_EQ(slurp(r.snapshot / shard), repo.files[3].content);
  EXPECT_EQ(slurp(repo_dir() / "refs" / "main"), kCommit);
}

TEST_F(PullFixture, ACorruptDownloadIsDiscardedAndFetchedAgain) {
  const FakeRepo repo = model_repo();
  hub.add_repo("acme/tiny", repo);
  hub.corrupt(repo.files[2].path, 1);
  const PullResult r = pull_repo("acme/tiny");
  EXPECT_EQ(slurp(r.snapshot / repo.files[2].path), repo.files[2].content);
  EXPECT_EQ(gets_of(FakeHub::blob_name(repo.files[2])), 2u);
  ASSERT_EQ(observer.retries.size(), 1u);
  EXPECT_NE(observer.retries[0].find("sha256"), std::string::npos) << observer.retries[0];
}

TEST_F(PullFixture, AFileThatStaysCorruptIsRefused) {
  const FakeRepo repo = model_repo();
  hub.add_repo("acme/tiny", repo);
  const std::string blob = FakeHub::blob_name(repo.files[2]);
  hub.corrupt(repo.files[2].path, 1000);
  try {
    pull_repo("acme/tiny");
    FAIL() << "a corrupt file was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sha256"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(repo.files[2].path), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(repo_dir() / "blobs" / blob));
  EXPECT_FALSE(fs::exists(repo_dir() / "blobs" / (blob + ".incomplete")));
  EXPECT_FALSE(fs::exists(repo_dir() / "snapshots" / kCommit / repo.files[2].path));
  EXPECT_FALSE(fs::exists(repo_dir() / "refs" / "main"));
}

TEST_F(PullFixture, AGatedRepoNeedsTheToken) {
  FakeRepo repo = model_repo();
  repo.token = "hf_secret";
  hub.add_repo("acme/tiny", repo);
  try {
    pull_repo("acme/tiny");
    FAIL() << "a gated repo was pulled without a token";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gated"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("HF_TOKEN"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();  // the file refused
  }
  EXPECT_FALSE(fs::exists(repo_dir() / "snapshots"));
  settings.token = "hf_wrong";
  EXPECT_THROW(pull_repo("acme/tiny"), Error);
  settings.token = "hf_secret";
  const PullResult r = pull_repo("acme/tiny");
  EXPECT_EQ(slurp(r.snapshot / "config.json"), repo.files[0].content);
  bool redirected = false;
  for (const auto& h : hub.hits()) {
    if (h.host != hub.blob_host()) continue;
    redirected = true;
    EXPECT_TRUE(h.auth.empty()) << "the token went to " << h.host;
  }
  EXPECT_TRUE(redirected);
}

TEST_F(PullFixture, OfflineModeTouchesNoNetwork) {
  hub.add_repo("acme/tiny", model_repo());
  settings.offline = true;
  try {
    pull_repo("acme/tiny");
    FAIL() << "pulled while offline";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("HF_HUB_OFFLINE"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(hub.hits().empty());
}

TEST_F(PullFixture, AnUnknownRepoOrRevisionIsNamed) {
  hub.add_repo("acme/tiny", model_repo());
  try {
    pull_repo("acme/tiny@no-such-branch");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("acme/tiny@no-such-branch"), std::string::npos) << e.what();
  }
  EXPECT_THROW(pull_repo("acme/nothing"), Error);
}

TEST_F(PullFixture, RevisionsGetTheirOwnRefAndCommitsNone) {
  FakeRepo repo = model_repo();
  repo.refs["v1"] = kCommit;
  hub.add_repo("acme/tiny", repo);
  pull_repo("acme/tiny@v1");
  EXPECT_EQ(slurp(repo_dir() / "refs" / "v1"), kCommit);
  EXPECT_FALSE(fs::exists(repo_dir() / "refs" / "main"));
  pull_repo("acme/tiny@" + kCommit);
  EXPECT_FALSE(fs::exists(repo_dir() / "refs" / "main"));
  const HubCache cache(settings.cache_dir);
  EXPECT_EQ(cache.find_snapshot(repo_ref_or_throw("acme/tiny@v1")), repo_dir() / "snapshots" / kCommit);
  EXPECT_EQ(cache.find_snapshot(repo_ref_or_throw("acme/tiny@" + kCommit)), repo_dir() / "snapshots" / kCommit);
  EXPECT_FALSE(cache.find_snapshot(repo_ref_or_throw("acme/tiny")));
  EXPECT_FALSE(cache.find_snapshot(repo_ref_or_throw("acme/tiny@" + kOtherCommit)));
}

TEST_F(PullFixture, GgufRepoNeedsAChoiceOfQuantization) {
  FakeRepo repo;
  repo.commit = kCommit;
  repo.files = {{"config.json", "{}", false},
                {"tiny-Q4_K_M.gguf", bytes_of(3000, 4), true},
                {"tiny-Q8_0.gguf", bytes_of(5000, 5), true}};
  hub.add_repo("acme/tiny", repo);
  try {
    pull_repo("acme/tiny");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tiny-Q4_K_M.gguf, tiny-Q8_0.gguf"), std::string::npos) << e.what();
  }
  options.choice.quant = "q8_0";
  const PullResult r = pull_repo("acme/tiny");
  EXPECT_EQ(slurp(r.snapshot / "tiny-Q8_0.gguf"), repo.files[2].content);
  EXPECT_FALSE(fs::exists(r.snapshot / "tiny-Q4_K_M.gguf"));
  options.choice.quant = "Q5";
  EXPECT_THROW(pull_repo("acme/tiny"), Error);
  options.choice.quant = "";
  options.choice.file = "tiny-Q4_K_M.gguf";
  pull_repo("acme/tiny");
  EXPECT_EQ(slurp(r.snapshot / "tiny-Q4_K_M.gguf"), repo.files[1].content);
}

TEST_F(PullFixture, AFileInAFolderLinksUpToTheBlobs) {
  hub.add_repo("acme/tiny", model_repo());
  options.choice.file = "original/consolidated.safetensors";
  const PullResult r = pull_repo("acme/tiny");
  const std::string blob = FakeHub::blob_name(model_repo().files[6]);
  EXPECT_EQ(fs::read_symlink(r.snapshot / "original/consolidated.safetensors").string(), "../../../blobs/" + blob);
}

// The oracle: the cache the real huggingface_hub wrote for the same repo,
// recorded by tools/hub/record_hf_cache_layout.py (which serves it from a
// Python fake Hub with this fake's behaviour). rowlm's cache must be the same
// tree: blob names, relative links, refs and their content.
nlohmann::json tree_of(const fs::path& folder) {
  nlohmann::json tree = nlohmann::json::object();
  for (const auto& e : fs::recursive_directory_iterator(folder)) {
    const std::string rel = e.path().lexically_relative(folder).string();  // fs::relative would follow links
    if (e.is_symlink()) {
      tree[rel] = {{"link", fs::read_symlink(e.path()).string()}};
    } else if (e.is_regular_file()) {
      const std::string data = slurp(e.path());
      nlohmann::json entry = {{"size", data.size()}, {"sha256", sha256_hex(data)}};
      if (rel.rfind("refs/", 0) == 0) entry["text"] = data;
      tree[rel] = entry;
    }
  }
  return tree;
}

TEST_F(PullFixture, HuggingfaceHubLayout) {
  const fs::path fixture = fs::path(ROWLM_SOURCE_DIR) / "tests/fixtures/hub/huggingface_hub_cache.json";
  if (!fs::exists(fixture))
    GTEST_SKIP() << fixture << " is not recorded yet: run tools/hub/record_hf_cache_layout.py where huggingface_hub is";
  const nlohmann::json hf = nlohmann::json::parse(slurp(fixture));
  FakeRepo repo;
  repo.commit = hf["commit"];
  for (const auto& [rev, commit] : hf["refs"].items()) repo.refs[rev] = commit;
  for (const auto& f : hf["files"]) repo.files.push_back({f["path"], f["content"], f["lfs"]});
  const std::string id = hf["repo"];
  hub.add_repo(id, repo);
  for (const auto& [rev, commit] : hf["refs"].items()) pull_repo(id + "@" + rev);
  const fs::path folder = settings.cache_dir / repo_folder_name(id);
  EXPECT_EQ(tree_of(folder).dump(1), hf["tree"].dump(1)) << "huggingface_hub " << hf["huggingface_hub"];
  // Where huggingface_hub left lock files, rowlm locks the same files.
  for (const auto& lock : hf["locks"])
    EXPECT_TRUE(fs::exists(settings.cache_dir / ".locks" / repo_folder_name(id) / lock.get<std::string>())) << lock;
}

}  // namespace
}  // namespace rowlm::hub
