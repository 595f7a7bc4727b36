// Models by repo id through the rowlm command, against a fake Hub on
// loopback serving the bundled draft model: rowlm pull, then generate by
// ORG/REPO offline with the same tokens as from the directory; a second pull
// that fetches nothing; --pull; the error that says how to get a missing
// model; rowlm list and rm.

#if defined(ROWLM_HAVE_HUB) && defined(ROWLM_HAVE_SERVER)  // the fake Hub is cpp-httplib's server

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/cli_test_util.h"
#include "cli/pull_progress.h"
#include "hub/fake_hub_test_util.h"
#include "io/temp_dir.h"

namespace rowlm {
namespace {

namespace fs = std::filesystem;
using cli::testing::run_rowlm;
using hub::testing::FakeHub;
using hub::testing::FakeRepo;
using nlohmann::json;

const std::string kRepoRoot = ROWLM_SOURCE_DIR;

const std::string kCommit = "1111111111111111111111111111111111111111";

// The bundled draft model's files as a repo; its safetensors as LFS files.
FakeRepo repo_of(const fs::path& dir) {
  FakeRepo repo;
  repo.commit = kCommit;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    repo.files.push_back({e.path().filename().string(), ss.str(), e.path().extension() == ".safetensors"});
  }
  return repo;
}

struct HubCli : ::testing::Test {
  FakeHub hub;
  TempDir dir{"rowlm-hub-cli"};
  const fs::path model = fs::path(kRepoRoot) / "models" / "rowlm-tiny-draft";

  void SetUp() override { hub.add_repo("acme/draft", repo_of(model)); }
  // The environment of a user whose Hub is the fake one.
  std::string env(bool offline = false) const {
    return "HF_HOME=" + dir.path() + "/hf HF_HUB_CACHE=" + dir.path() + "/hub HF_TOKEN= HF_ENDPOINT=" +
           hub.endpoint() + " HF_HUB_OFFLINE=" + (offline ? "1" : "");
  }
};

TEST_F(HubCli, PullThenRunByRepoIdOfflineListAndRemove) {
  const auto pulled = run_rowlm("pull acme/draft", "", env());
  ASSERT_EQ(pulled.status, 0) << pulled.err;
  const fs::path snapshot = fs::path(dir.path()) / "hub" / "models--acme--draft" / "snapshots" / kCommit;
  EXPECT_EQ(pulled.out, snapshot.string() + "\n");
  EXPECT_NE(pulled.err.find("5 files downloaded"), std::string::npos) << pulled.err;

  const std::string gen = " --ids 2,100,200,300 --max-tokens 6 --json --device cpu";
  const auto by_id = run_rowlm("generate acme/draft" + gen, "", env(/*offline=*/true));
  const auto by_dir = run_rowlm("generate " + model.string() + gen);
  ASSERT_EQ(by_id.status, 0) << by_id.err;
  ASSERT_EQ(by_dir.status, 0) << by_dir.err;
  EXPECT_EQ(json::parse(by_id.out)["token_ids"], json::parse(by_dir.out)["token_ids"]);

  hub.clear_hits();
  const auto again = run_rowlm("pull acme/draft", "", env());
  ASSERT_EQ(again.status, 0) << again.err;
  EXPECT_NE(again.err.find("0 files downloaded (0 B), 5 already cached"), std::string::npos) << again.err;
  EXPECT_EQ(hub.hits().size(), 1u);  // the listing

  const auto listed = run_rowlm("list --json", "", env());
  ASSERT_EQ(listed.status, 0) << listed.err;
  const json models = json::parse(listed.out)["models"];
  ASSERT_EQ(models.size(), 1u);
  EXPECT_EQ(models[0]["repo"], "acme/draft");
  EXPECT_EQ(models[0]["formats"], json::array({"safetensors"}));
  EXPECT_EQ(models[0]["refs"], json::array({"main"}));
  std::uint64_t bytes = 0;
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                        "tokenizer_config.json"})
    bytes += fs::file_size(model / f);
  EXPECT_EQ(models[0]["bytes"].get<std::uint64_t>(), bytes);
  const auto table = run_rowlm("list", "", env());
  EXPECT_NE(table.out.find("acme/draft"), std::string::npos) << table.out;

  EXPECT_EQ(run_rowlm("rm acme/draft", "", env()).status, 0);
  EXPECT_FALSE(fs::exists(snapshot));
  EXPECT_EQ(json::parse(run_rowlm("list --json", "", env()).out)["models"].size(), 0u);
  const auto gone = run_rowlm("rm acme/draft", "", env());
  EXPECT_EQ(gone.status, 1);
  EXPECT_NE(gone.err.find("has no acme/draft"), std::string::npos) << gone.err;
}

TEST_F(HubCli, AMissingModelSaysHowToGetItAndTouchesNoNetwork) {
  const auto r = run_rowlm("generate acme/draft --ids 1,2", "", env());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("rowlm pull acme/draft"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--pull"), std::string::npos) << r.err;
  const auto offline = run_rowlm("inspect acme/draft --pull", "", env(/*offline=*/true));
  EXPECT_EQ(offline.status, 1);
  EXPECT_NE(offline.err.find("HF_HUB_OFFLINE"), std::string::npos) << offline.err;
  EXPECT_TRUE(hub.hits().empty());
}

TEST_F(HubCli, PullFlagFetchesFirst) {
  const auto r = run_rowlm("inspect acme/draft --pull --json --device cpu", "", env());
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_TRUE(j.is_object());
  // The tensor list is read from the pulled snapshot, like the model.
  EXPECT_FALSE(j["tensors"].empty()) << r.out;
  EXPECT_TRUE(fs::exists(fs::path(dir.path()) / "hub" / "models--acme--draft" / "refs" / "main"));
}

// A GGUF pull (--quant) leaves a snapshot with no config.json: the repo id
// then names its one GGUF file, everywhere a model is taken.
TEST_F(HubCli, AGgufPullRunsByRepoId) {
  const fs::path gguf = fs::path(kRepoRoot) / "tests" / "fixtures" / "gguf";
  FakeRepo repo;
  repo.commit = kCommit;
  for (const char* name : {"qwen3_chat_f32.gguf", "qwen3_chat_mixed.gguf"}) {
    std::ifstream in(gguf / name, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    // Named as Hub GGUF repos name their quantizations.
    repo.files.push_back({std::string(name) == "qwen3_chat_f32.gguf" ? "chat-F32.gguf" : "chat-Q4_0.gguf", ss.str(),
                          true});
  }
  hub.add_repo("acme/chat-gguf", repo);
  const auto pulled = run_rowlm("pull acme/chat-gguf --quant Q4_0", "", env());
  ASSERT_EQ(pulled.status, 0) << pulled.err;
  const std::string gen = " --ids 5,6,7 --max-tokens 4 --json --device cpu";
  const auto by_id = run_rowlm("generate acme/chat-gguf" + gen, "", env(/*offline=*/true));
  const auto by_file = run_rowlm("generate " + (gguf / "qwen3_chat_mixed.gguf").string() + gen);
  ASSERT_EQ(by_id.status, 0) << by_id.err;
  ASSERT_EQ(by_file.status, 0) << by_file.err;
  EXPECT_EQ(json::parse(by_id.out)["token_ids"], json::parse(by_file.out)["token_ids"]);
  // With both quantizations cached the repo id is ambiguous: the error names the files.
  ASSERT_EQ(run_rowlm("pull acme/chat-gguf --quant F32", "", env()).status, 0);
  const auto both = run_rowlm("generate acme/chat-gguf" + gen, "", env(/*offline=*/true));
  EXPECT_EQ(both.status, 1);
  EXPECT_NE(both.err.find("chat-F32.gguf, chat-Q4_0.gguf"), std::string::npos) << both.err;
}

TEST_F(HubCli, BadPullArgumentsAreNamed) {
  const auto not_id = run_rowlm("pull gpt2", "", env());
  EXPECT_EQ(not_id.status, 1);
  EXPECT_NE(not_id.err.find("ORG/REPO"), std::string::npos) << not_id.err;
  const auto no_gguf = run_rowlm("pull acme/draft --quant Q4_K_M", "", env());
  EXPECT_EQ(no_gguf.status, 1);
  EXPECT_NE(no_gguf.err.find("no GGUF file"), std::string::npos) << no_gguf.err;
  const auto bad_endpoint = run_rowlm("pull acme/draft --endpoint ftp://x", "", env());
  EXPECT_EQ(bad_endpoint.status, 1);
  EXPECT_NE(bad_endpoint.err.find("--endpoint"), std::string::npos) << bad_endpoint.err;
  const auto unknown = run_rowlm("pull acme/nothing", "", env());
  EXPECT_EQ(unknown.status, 1);
  EXPECT_NE(unknown.err.find("acme/nothing"), std::string::npos) << unknown.err;
}

TEST(PullProgress, HumanBytes) {
  EXPECT_EQ(cli::human_bytes(0), "0 B");
  EXPECT_EQ(cli::human_bytes(1023), "1023 B");
  EXPECT_EQ(cli::human_bytes(1536), "1.5 KiB");
  EXPECT_EQ(cli::human_bytes(3u << 20), "3.0 MiB");
  EXPECT_EQ(cli::human_bytes(std::uint64_t(5) << 40), "5.0 TiB");
}

}  // namespace
}  // namespace rowlm

#endif
