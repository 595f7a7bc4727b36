#include "hub/hub_settings.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace rowlm::hub {

namespace fs = std::filesystem;

EnvLookup process_environment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

bool env_flag_true(const std::optional<std::string>& value) {
  if (!value) return false;
  std::string up = *value;
  std::transform(up.begin(), up.end(), up.begin(), [](unsigned char c) { return char(std::toupper(c)); });
  return up == "1" || up == "ON" || up == "YES" || up == "TRUE";
}

namespace {

// os.path.expanduser for "~" and "~/...": the home directory from $HOME.
fs::path expand_user(const std::string& path, const EnvLookup& env) {
  if (path == "~" || path.rfind("~/", 0) == 0) {
    const auto home = env("HOME");
    if (!home || home->empty()) throw Error("cannot expand '" + path + "': HOME is not set");
    return fs::path(*home) / path.substr(std::min<std::size_t>(2, path.size()));
  }
  return fs::path(path);
}

std::optional<std::string> non_empty(const std::optional<std::string>& v) {
  if (v && !v->empty()) return v;
  return std::nullopt;
}

// The token file's content without surrounding whitespace, as huggingface_hub
// reads it; nullopt when there is no such file or it is empty.
std::optional<std::string> read_token_file(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  std::ifstream in(path);
  if (!in) throw Error("cannot read the Hugging Face token file " + path.string());
  std::stringstream ss;
  ss << in.rdbuf();
  std::string t = ss.str();
  const auto first = t.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return std::nullopt;
  const auto last = t.find_last_not_of(" \t\r\n");
  return t.substr(first, last - first + 1);
}

}  // namespace

HubSettings HubSettings::from_environment(const EnvLookup& env) {
  HubSettings s;
  if (auto endpoint = non_empty(env("HF_ENDPOINT"))) {
    s.endpoint = *endpoint;
    while (!s.endpoint.empty() && s.endpoint.back() == '/') s.endpoint.pop_back();
    if (s.endpoint.rfind("http://", 0) != 0 && s.endpoint.rfind("https://", 0) != 0)
      throw Error("HF_ENDPOINT must be an http:// or https:// URL, got '" + *endpoint + "'");
  }
  fs::path home;
  if (auto h = non_empty(env("HF_HOME"))) {
    home = expand_user(*h, env);
  } else if (auto xdg = non_empty(env("XDG_CACHE_HOME"))) {
    home = expand_user(*xdg, env) / "huggingface";
  } else {
    home = expand_user("~/.cache", env) / "huggingface";
  }
  if (auto c = non_empty(env("HF_HUB_CACHE"))) s.cache_dir = expand_user(*c, env);
  else s.cache_dir = home / "hub";
  if (auto t = non_empty(env("HF_TOKEN"))) {
    s.token = *t;
  } else {
    const auto token_path = non_empty(env("HF_TOKEN_PATH"));
    s.token = read_token_file(token_path ? expand_user(*token_path, env) : home / "token");
  }
  s.offline = env_flag_true(env("HF_HUB_OFFLINE"));
  return s;
}

}  // namespace rowlm::hub
