#pragma once
// The one place the rowlm command turns a model argument into a directory.
// MODEL_DIR may be a local directory, a GGUF file (model_files.h, gguf_model.h:
// passed on as it is) or a Hugging Face repo id
// ORG/REPO[@REVISION]: an existing path always wins; a repo id is looked up
// in the Hub cache (HF_HUB_CACHE / HF_HOME, see hub/hub_settings.h) and, when
// absent, fetched first with --pull or refused with an error that says how
// to get it. HF_HUB_OFFLINE=1 never touches the network.

#include <string>

#include "cli/args.h"

namespace rowlm::cli {

struct ModelSource {
  std::string dir;   // the directory (or GGUF file) to load
  std::string repo;  // ORG/REPO when named by repo id, else empty
};

// Declares the positional MODEL_DIR (first) and --pull; returns `args`.
Args& add_model_argument(Args& args);

// MODEL_DIR of parsed `args`, resolved.
ModelSource model_source_from(const Args& args);

// Resolves `spec` (a path or a repo id); `pull` fetches a repo id missing
// from the cache. A spec that is neither an existing path nor a repo id is
// returned unchanged, for the loader to report.
ModelSource resolve_model(const std::string& spec, bool pull);

}  // namespace rowlm::cli
