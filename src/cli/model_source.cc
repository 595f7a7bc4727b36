#include "cli/model_source.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"

#ifdef ROWLM_HAVE_HUB
#include "cli/pull_progress.h"
#include "hub/hub_cache.h"
#include "hub/hub_settings.h"
#include "hub/pull.h"
#include "hub/repo_ref.h"
#endif

namespace rowlm::cli {

#ifdef ROWLM_HAVE_HUB
namespace {

// A pulled snapshot is a model directory, unless it holds a GGUF pull
// (`rowlm pull --file/--quant`): no config.json and GGUF files. Then the model
// is the one GGUF file; with several, the user names one.
std::string model_path_in_snapshot(const std::filesystem::path& snapshot, const std::string& spec) {
  std::error_code ec;
  if (std::filesystem::exists(snapshot / "config.json", ec)) return snapshot.string();
  std::vector<std::string> ggufs;
  for (const auto& e : std::filesystem::directory_iterator(snapshot, ec))
    if (e.path().extension() == ".gguf") ggufs.push_back(e.path().filename().string());
  if (ggufs.size() == 1) return (snapshot / ggufs[0]).string();
  if (ggufs.empty()) return snapshot.string();  // the loader names what is missing
  std::sort(ggufs.begin(), ggufs.end());
  std::string names;
  for (const std::string& g : ggufs) names += (names.empty() ? "" : ", ") + g;
  throw Error(spec + " in the Hub cache holds several GGUF files (" + names + "): pass one of them as " +
              (snapshot / ggufs[0]).string() + " and so on");
}

}  // namespace
#endif

Args& add_model_argument(Args& args) {
  args.positional("MODEL_DIR",
                  "a Hugging Face model directory, a GGUF file, or a repo id ORG/REPO[@REVISION] from the Hub cache");
  args.flag("pull", "fetch a repo id that is not in the Hub cache yet (as rowlm pull does)");
  return args;
}

ModelSource model_source_from(const Args& args) {
  return resolve_model(args.get("MODEL_DIR"), args.flag_set("pull"));
}

ModelSource resolve_model(const std::string& spec, bool pull) {
  std::error_code ec;
  if (std::filesystem::exists(spec, ec)) return {spec, ""};
#ifdef ROWLM_HAVE_HUB
  const auto ref = hub::parse_repo_ref(spec);
  if (!ref) return {spec, ""};
  const hub::HubSettings settings = hub::HubSettings::from_environment(hub::process_environment());
  const hub::HubCache cache(settings.cache_dir);
  if (auto snapshot = cache.find_snapshot(*ref)) return {model_path_in_snapshot(*snapshot, spec), ref->repo};
  if (!pull) {
    throw Error("no directory " + spec + ", and the Hub cache (" + settings.cache_dir.string() +
                ") has no " + ref->display() + ": run 'rowlm pull " + spec + "' first, or add --pull" +
                (settings.offline ? " (without HF_HUB_OFFLINE)" : ""));
  }
  PullProgress progress;
  const hub::PullResult result = hub::pull(settings, *ref, hub::PullOptions{}, progress);
  progress.summary(ref->display(), result);
  return {model_path_in_snapshot(result.snapshot, spec), ref->repo};
#else
  (void)pull;
  return {spec, ""};
#endif
}

}  // namespace rowlm::cli
