#pragma once
// What every model-running command shares: the backend, the model and the
// KV cache options, set up from the common flags (--threads, --kv-codec,
// --kv-budget).

#include <memory>
#include <string>

#include "backend/backend.h"
#include "cli/args.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace rowlm::cli {

struct Runtime {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
  kv::CacheOptions cache_options;

  std::unique_ptr<kv::KvCache> make_cache() const {
    return std::make_unique<kv::KvCache>(cache_options);
  }
};

// Declares --threads, --kv-codec (default `default_codec`) and --kv-budget.
void add_runtime_options(Args& args, const std::string& default_codec);

// Loads MODEL_DIR; prints a progress line to stderr if loading takes a while.
Runtime open_runtime(const Args& args, const std::string& model_dir);

// Cache options for `model` from the parsed flags.
kv::CacheOptions cache_options_for(const Args& args, const Model& model);

// Parses sizes such as "512M", "2G", "1500000000".
std::size_t parse_bytes(const std::string& text, const std::string& what);

}  // namespace rowlm::cli
