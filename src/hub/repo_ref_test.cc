// Repo ids and revisions, the digests that name blobs, and the cache's
// listing and removal.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "hub/digest.h"
#include "hub/hub_cache.h"
#include "hub/repo_ref.h"
#include "io/temp_dir.h"

namespace rowlm::hub {
namespace {

namespace fs = std::filesystem;

TEST(RepoRef, ParsesOrgRepoAndRevision) {
  auto r = parse_repo_ref("google/gemma-4-E2B-it");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->repo, "google/gemma-4-E2B-it");
  EXPECT_EQ(r->revision, "main");
  r = parse_repo_ref("Qwen/Qwen3-0.6B@refs/pr/12");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->repo, "Qwen/Qwen3-0.6B");
  EXPECT_EQ(r->revision, "refs/pr/12");
  EXPECT_EQ(r->display(), "Qwen/Qwen3-0.6B@refs/pr/12");
  EXPECT_EQ(repo_folder_name("Qwen/Qwen3-0.6B"), "models--Qwen--Qwen3-0.6B");
}

TEST(RepoRef, RefusesWhatIsNotARepoId) {
  for (const char* bad : {"gpt2", "a/b/c", "/abs/path", "./local", "a/", "/b", "a--b/c", "a/b..c", "a/-b", "a/b.git",
                          "a/b@", "a/b@../x", "a/b@/x", "a/b c", "a/b@x//y"})
    EXPECT_FALSE(parse_repo_ref(bad)) << bad;
  try {
    repo_ref_or_throw("gpt2");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ORG/REPO"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(is_commit_hash("0123456789abcdef0123456789abcdef01234567"));
  EXPECT_FALSE(is_commit_hash("0123456789ABCDEF0123456789abcdef01234567"));
  EXPECT_FALSE(is_commit_hash("main"));
}

// Known answers: FIPS 180-2's "abc", and `git hash-object` of "hello\n" and
// of an empty file.
TEST(Digest, KnownAnswers) {
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  Digest hello = git_blob_digest(6);
  hello.update("hel");
  hello.update("lo\n");
  EXPECT_EQ(hello.hex(), "ce013625030ba8dba906f756967f9e9ca394464a");
  EXPECT_EQ(git_blob_digest(0).hex(), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
}

TEST(HubCache, ListsAndRemovesRepos) {
  TempDir dir("rowlm-hub-cache");
  const HubCache cache(dir.path());
  const std::string commit = "0123456789abcdef0123456789abcdef01234567";
  for (const std::string repo : {"b-org/model", "a-org/model"}) {
    fs::create_directories(cache.blob_path(repo, "x").parent_path());
    std::ofstream(cache.blob_path(repo, "aaaa")) << std::string(1000, 'w');
    std::ofstream(cache.blob_path(repo, "bbbb")) << "{}";
    cache.link_file(repo, commit, "model.safetensors", "aaaa");
    cache.link_file(repo, commit, "config.json", "bbbb");
    cache.write_ref(repo, "main", commit);
  }
  const auto repos = cache.list();
  ASSERT_EQ(repos.size(), 2u);
  EXPECT_EQ(repos[0].repo, "a-org/model");
  EXPECT_EQ(repos[0].bytes, 1002u);
  EXPECT_EQ(repos[0].revisions, std::vector<std::string>{"main"});
  EXPECT_EQ(repos[0].commits, std::vector<std::string>{commit});
  EXPECT_EQ(repos[0].formats, std::vector<std::string>{"safetensors"});
  EXPECT_TRUE(cache.has_file("a-org/model", commit, "config.json"));
  EXPECT_EQ(cache.find_snapshot(repo_ref_or_throw("a-org/model")), cache.snapshot_dir("a-org/model", commit));
  EXPECT_TRUE(cache.remove("a-org/model"));
  EXPECT_FALSE(cache.remove("a-org/model"));
  ASSERT_EQ(cache.list().size(), 1u);
  EXPECT_EQ(cache.list()[0].repo, "b-org/model");
  // A ref that does not hold a commit is reported, not followed.
  std::ofstream(cache.repo_dir("b-org/model") / "refs" / "main") << "garbage";
  EXPECT_THROW(cache.find_snapshot(repo_ref_or_throw("b-org/model")), Error);
}

}  // namespace
}  // namespace rowlm::hub
