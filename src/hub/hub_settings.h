#pragma once
// Where the Hugging Face Hub is and where its files are cached, read from the
// same environment variables huggingface_hub reads, with its defaults:
//   HF_ENDPOINT      the Hub's base URL (default https://huggingface.co)
//   HF_HUB_CACHE     the cache directory (default $HF_HOME/hub)
//   HF_HOME          (default $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface)
//   HF_TOKEN         the access token (else the file HF_TOKEN_PATH, default $HF_HOME/token)
//   HF_HUB_OFFLINE   1/ON/YES/TRUE: never touch the network
// The environment is passed in (a lookup function), so tests need not change
// the process's own.

#include <filesystem>
#include <functional>
#include <optional>
#include <string>

namespace rowlm::hub {

// Returns the value of an environment variable, or nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

// The process environment (std::getenv).
EnvLookup process_environment();

struct HubSettings {
  std::string endpoint = "https://huggingface.co";  // no trailing slash
  std::filesystem::path cache_dir;                   // the hub cache (models--ORG--REPO/ inside)
  std::optional<std::string> token;                  // sent as "Authorization: Bearer TOKEN"
  bool offline = false;

  // Reads the variables above; a token file that exists but cannot be read
  // throws rowlm::Error naming it. Relative paths and "~" are expanded as
  // huggingface_hub expands them (os.path.expanduser).
  static HubSettings from_environment(const EnvLookup& env);
};

// huggingface_hub's notion of a true environment value: 1, ON, YES or TRUE
// in any case.
bool env_flag_true(const std::optional<std::string>& value);

}  // namespace rowlm::hub
