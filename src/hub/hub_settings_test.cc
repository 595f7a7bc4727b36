// The environment variables huggingface_hub reads, with its defaults and
// precedence (HF_HUB_CACHE over HF_HOME over XDG_CACHE_HOME over ~/.cache).

#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "core/error.h"
#include "hub/hub_settings.h"
#include "io/temp_dir.h"

namespace rowlm::hub {
namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(HubSettings, DefaultsFollowHuggingfaceHub) {
  const auto s = HubSettings::from_environment(env_of({{"HOME", "/home/u"}}));
  EXPECT_EQ(s.endpoint, "https://huggingface.co");
  EXPECT_EQ(s.cache_dir, "/home/u/.cache/huggingface/hub");
  EXPECT_FALSE(s.token);
  EXPECT_FALSE(s.offline);
}

TEST(HubSettings, CacheDirectoryPrecedence) {
  EXPECT_EQ(HubSettings::from_environment(env_of({{"HOME", "/h"}, {"XDG_CACHE_HOME", "/x"}})).cache_dir,
            "/x/huggingface/hub");
  EXPECT_EQ(HubSettings::from_environment(env_of({{"HOME", "/h"}, {"XDG_CACHE_HOME", "/x"}, {"HF_HOME", "/hf"}})).cache_dir,
            "/hf/hub");
  EXPECT_EQ(HubSettings::from_environment(env_of({{"HOME", "/h"}, {"HF_HOME", "/hf"}, {"HF_HUB_CACHE", "~/c"}})).cache_dir,
            "/h/c");
}

TEST(HubSettings, TokenFromTheEnvironmentOrTheTokenFile) {
  TempDir dir("rowlm-hub-settings");
  std::ofstream(dir.file("token")) << "  hf_from_file\n";
  EXPECT_EQ(HubSettings::from_environment(env_of({{"HF_HOME", dir.path()}})).token, "hf_from_file");
  EXPECT_EQ(HubSettings::from_environment(env_of({{"HF_HOME", dir.path()}, {"HF_TOKEN", "hf_env"}})).token, "hf_env");
  std::ofstream(dir.file("other")) << "hf_other";
  EXPECT_EQ(HubSettings::from_environment(env_of({{"HF_HOME", "/nowhere"}, {"HF_TOKEN_PATH", dir.file("other")}})).token,
            "hf_other");
  EXPECT_FALSE(HubSettings::from_environment(env_of({{"HF_HOME", "/nowhere"}})).token);
}

TEST(HubSettings, EndpointAndOffline) {
  const auto s = HubSettings::from_environment(
      env_of({{"HOME", "/h"}, {"HF_ENDPOINT", "http://mirror.example:8080/"}, {"HF_HUB_OFFLINE", "yes"}}));
  EXPECT_EQ(s.endpoint, "http://mirror.example:8080");
  EXPECT_TRUE(s.offline);
  EXPECT_THROW(HubSettings::from_environment(env_of({{"HOME", "/h"}, {"HF_ENDPOINT", "mirror.example"}})), Error);
  for (const char* v : {"1", "ON", "true", "Yes"}) EXPECT_TRUE(env_flag_true(std::string(v))) << v;
  for (const char* v : {"0", "", "off", "no", "2"}) EXPECT_FALSE(env_flag_true(std::string(v))) << v;
  EXPECT_FALSE(env_flag_true(std::nullopt));
}

}  // namespace
}  // namespace rowlm::hub
