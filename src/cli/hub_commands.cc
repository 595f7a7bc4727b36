// rowlm pull, list and rm: models in the Hugging Face Hub cache.

#ifdef ROWLM_HAVE_HUB

#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/pull_progress.h"
#include "core/error.h"
#include "hub/hub_cache.h"
#include "hub/hub_settings.h"
#include "hub/pull.h"
#include "hub/repo_ref.h"

namespace rowlm::cli {

namespace {

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : ",") + i;
  return s.empty() ? "-" : s;
}

}  // namespace

int run_pull(const std::vector<std::string>& argv) {
  Args args("pull",
            "Downloads a model repository from the Hugging Face Hub into the Hub cache ($HF_HUB_CACHE, else\n"
            "$HF_HOME/hub, else ~/.cache/huggingface/hub), laid out as huggingface_hub lays it out, so\n"
            "either reuses the other's files. Fetches the config, tokenizer and generation config files and\n"
            "the safetensors weights (or one GGUF file, with --quant or --file); resumes interrupted\n"
            "downloads; checks every file against the Hub's sha256 or git blob id. Prints the snapshot\n"
            "directory on stdout. Gated repos need a token: HF_TOKEN, or the file $HF_HOME/token.");
  args.positional("REPO", "ORG/REPO, optionally @REVISION (a branch, tag or commit; default main)")
      .option("file", "NAME", "fetch this file of the repo (e.g. one GGUF) instead of the safetensors weights")
      .option("quant", "Q", "fetch the GGUF file whose name contains Q (e.g. Q4_K_M)")
      .option("endpoint", "URL", "the Hub or a mirror (default: HF_ENDPOINT, else https://huggingface.co)");
  if (!args.parse(argv)) return 0;
  const hub::RepoRef ref = hub::repo_ref_or_throw(args.get("REPO"));
  hub::HubSettings settings = hub::HubSettings::from_environment(hub::process_environment());
  if (auto endpoint = args.get_opt("endpoint")) {
    std::string e = *endpoint;
    while (!e.empty() && e.back() == '/') e.pop_back();
    if (e.rfind("http://", 0) != 0 && e.rfind("https://", 0) != 0)
      throw Error("--endpoint must be an http:// or https:// URL, got '" + *endpoint + "'");
    settings.endpoint = e;
  }
  hub::PullOptions options;
  options.choice.file = args.get_opt("file").value_or("");
  options.choice.quant = args.get_opt("quant").value_or("");
  PullProgress progress;
  const hub::PullResult result = hub::pull(settings, ref, options, progress);
  progress.summary(ref.display(), result);
  std::cout << result.snapshot.string() << "\n";
  return 0;
}

int run_list(const std::vector<std::string>& argv) {
  Args args("list", "Lists the models in the Hugging Face Hub cache with their size on disk, weight formats and\n"
                    "revisions. Any of them can be given where a command takes MODEL_DIR.");
  args.flag("json", "print JSON");
  if (!args.parse(argv)) return 0;
  const hub::HubSettings settings = hub::HubSettings::from_environment(hub::process_environment());
  const auto repos = hub::HubCache(settings.cache_dir).list();
  if (args.flag_set("json")) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : repos)
      out.push_back({{"repo", r.repo}, {"bytes", r.bytes}, {"formats", r.formats}, {"refs", r.revisions},
                     {"commits", r.commits}});
    std::cout << nlohmann::json{{"cache_dir", settings.cache_dir.string()}, {"models", out}}.dump() << "\n";
    return 0;
  }
  if (repos.empty()) {
    std::fprintf(stderr, "the Hub cache %s holds no models (rowlm pull ORG/REPO fetches one)\n",
                 settings.cache_dir.c_str());
    return 0;
  }
  std::size_t width = 4;
  for (const auto& r : repos) width = std::max(width, r.repo.size());
  std::printf("%-*s  %10s  %-16s  %s\n", int(width), "REPO", "SIZE", "FORMATS", "REFS");
  for (const auto& r : repos)
    std::printf("%-*s  %10s  %-16s  %s\n", int(width), r.repo.c_str(), human_bytes(r.bytes).c_str(),
                join(r.formats).c_str(), join(r.revisions).c_str());
  return 0;
}

int run_rm(const std::vector<std::string>& argv) {
  Args args("rm", "Removes a model (every revision of it) from the Hugging Face Hub cache.");
  args.positional("REPO", "ORG/REPO");
  if (!args.parse(argv)) return 0;
  const hub::RepoRef ref = hub::repo_ref_or_throw(args.get("REPO"));
  if (ref.revision != "main" || args.get("REPO").find('@') != std::string::npos)
    throw Error("rm removes a whole repo: give ORG/REPO without @REVISION");
  const hub::HubSettings settings = hub::HubSettings::from_environment(hub::process_environment());
  const hub::HubCache cache(settings.cache_dir);
  std::uint64_t bytes = 0;
  for (const auto& r : cache.list())
    if (r.repo == ref.repo) bytes = r.bytes;
  if (!cache.remove(ref.repo))
    throw Error("the Hub cache " + settings.cache_dir.string() + " has no " + ref.repo + " (see rowlm list)");
  std::fprintf(stderr, "removed %s (%s) from %s\n", ref.repo.c_str(), human_bytes(bytes).c_str(),
               settings.cache_dir.c_str());
  return 0;
}

}  // namespace rowlm::cli

#endif  // ROWLM_HAVE_HUB
