#pragma once
// What every model-running command shares: the backend, the model and the
// KV cache options, set up from the common flags (--device, --threads,
// --kv-codec, --kv-budget, --matmul-precision).

#include <chrono>
#include <cstdio>
#include <future>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "cli/args.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "rowlm/engine.h"

namespace rowlm::cli {

struct Runtime {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
  kv::CacheOptions cache_options;

  std::unique_ptr<kv::KvCache> make_cache() const {
    return std::make_unique<kv::KvCache>(cache_options, *backend);
  }
};

// Declares --device, --threads, --kv-codec (default `default_codec`),
// --kv-budget and --matmul-precision.
void add_runtime_options(Args& args, const std::string& default_codec);

// --tensor-parallel N (default 1), and its value (1 to 64).
void add_tensor_parallel_option(Args& args);
int tensor_parallel_from(const Args& args);

// The backend options the flags ask for (--device, --threads, --matmul-precision).
BackendOptions backend_options_from(const Args& args);

// --device auto|cpu|cuda|cuda:N (default auto).
void add_device_option(Args& args);

// --matmul-precision f32|bf16 (default f32), and its value.
void add_matmul_precision_option(Args& args);
MatmulPrecision matmul_precision_from(const Args& args);

// Loads MODEL_DIR; prints a progress line to stderr if loading takes a while.
Runtime open_runtime(const Args& args, const std::string& model_dir);

// Engine::create with the loading progress line; with --device auto, says on
// stderr which device was chosen.
std::unique_ptr<Engine> open_engine(const EngineOptions& options);

// "rowlm: running on DEVICE" on stderr when the device was chosen for the
// user (`requested` is "auto").
void announce_device(const std::string& requested, const ModelInfo& info);

// Runs `load` (which loads `what`) on another thread; if it takes more than
// a moment, stderr shows "loading WHAT ..." with a dot a second until done.
template <class Load>
auto with_loading_progress(const std::string& what, Load&& load) {
  auto loading = std::async(std::launch::async, std::forward<Load>(load));
  if (loading.wait_for(std::chrono::milliseconds(700)) != std::future_status::ready) {
    std::fprintf(stderr, "loading %s ...", what.c_str());
    const auto start = std::chrono::steady_clock::now();
    while (loading.wait_for(std::chrono::seconds(1)) != std::future_status::ready) std::fputc('.', stderr);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, " done (%.1f s)\n", s + 0.7);
  }
  return loading.get();
}

// Cache options for `model` from the parsed flags.
kv::CacheOptions cache_options_for(const Args& args, const Model& model);

// Parses sizes such as "512M", "2G", "1500000000".
std::size_t parse_bytes(const std::string& text, const std::string& what);

}  // namespace rowlm::cli
