#pragma once
// From EngineOptions to the parts an engine is built of: the checks on the
// options, the target model's KV cache options (the pool's size, the prefix
// cache's share), and the drafter for speculative decoding, whose draft
// model's cache takes its share of the same budget.

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "engine/drafter.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "rowlm/engine.h"

namespace rowlm::engine {

inline constexpr int kMaxDraftTokens = 64;

// Throws rowlm::Error naming the first option out of range.
void check_options(const EngineOptions& options);

// What options.draft names when it is a directory (neither for "" and
// "ngram"): a draft model, or a Gemma 4 assistant (config.json's model_type
// gemma4_assistant or architectures Gemma4AssistantForCausalLM) bound to
// `target`, loaded on `backend`.
struct DraftSource {
  std::unique_ptr<Model> model;
  std::unique_ptr<gemma4::Assistant> assistant;
};
// Throws rowlm::Error if it cannot be loaded, its vocabulary is not the
// target's, or an assistant does not fit the target.
DraftSource load_draft(const EngineOptions& options, Backend& backend, const Model& target);

// The precision switch options.kv_quantize_after / kv_quantize_to ask for
// over `layers`: every layer whose codec is wider than the target switches.
// Throws rowlm::Error for a negative length, an unknown codec, or a target
// no layer is wider than.
kv::PrecisionSwitch precision_switch(const EngineOptions& options, const std::vector<kv::LayerSpec>& layers);

// The target cache's options: the model's layers with options.kv_codec,
// options.kv_budget_bytes (default from `backend`'s free memory: on the CPU
// half of it, at most 16 GiB; on a GPU, after the weights were uploaded, 80%
// of what is left), options.prefix_cache_bytes for the prefix cache (0 when
// it is off) and the precision switch when options.kv_quantize_after is set.
kv::CacheOptions cache_options(const EngineOptions& options, const Model& model, const Backend& backend);

// The drafter options.draft asks for, or null. A draft model runs on
// `backend` (the target's). With a draft model, its
// cache takes the share of `target`'s capacity and prefix-cache bytes that
// one full-context row costs it beside the target, and `target` keeps the
// rest. An assistant has no cache: `target`'s window layers it reads are
// widened to keep the keys it attends to.
std::unique_ptr<Drafter> make_drafter(const EngineOptions& options, DraftSource draft, Backend& backend,
                                      const Model& target_model, kv::CacheOptions& target);

}  // namespace rowlm::engine
