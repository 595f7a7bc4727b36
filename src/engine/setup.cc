#include "engine/setup.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "kvcodec/codec.h"

namespace rowlm::engine {

namespace {

// The draft cache's codec: the default (first) entry of --kv-codec; layer
// overrides name the target's layers, not the draft's.
kv::CodecSpec draft_codec(const std::string& kv_codec) {
  const std::string first = kv_codec.substr(0, kv_codec.find(','));
  return first.find('=') == std::string::npos ? kv::parse_codec(first) : kv::CodecSpec{};
}

// Bytes one row of `tokens` positions holds in these layers (a window layer
// holds its window and one step).
std::size_t context_bytes(const std::vector<kv::LayerSpec>& layers, int64_t tokens, int64_t step_tokens) {
  std::size_t total = 0;
  for (const kv::LayerSpec& l : layers)
    total += kv::token_record_bytes(l) *
             std::size_t(l.window ? std::min<int64_t>(tokens, l.window - 1 + step_tokens) : tokens);
  return total;
}

}  // namespace

kv::PrecisionSwitch precision_switch(const EngineOptions& options, const std::vector<kv::LayerSpec>& layers) {
  const int64_t after = options.kv_quantize_after.value_or(0);
  if (after < 0)
    throw Error("engine: kv_quantize_after must not be negative, got " + std::to_string(after));
  kv::CodecSpec to;
  try {
    to = kv::parse_codec(options.kv_quantize_to);
  } catch (const Error& e) {
    throw Error(std::string("engine: kv_quantize_to: ") + e.what());
  }
  // A layer switches when the target stores its heads in fewer bytes.
  kv::PrecisionSwitch sw{after, {}};
  bool any = false;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    kv::LayerSpec target = layers[i];
    target.codec = to;
    try {
      kv::check_layer_spec(target, int(i));  // e.g. a head_dim the group does not divide
    } catch (const Error& e) {
      throw Error("engine: kv_quantize_to " + options.kv_quantize_to + ": " + e.what());
    }
    const bool narrower = kv::token_record_bytes(target) < kv::token_record_bytes(layers[i]);
    sw.codecs.push_back(narrower ? to : layers[i].codec);
    any = any || narrower;
  }
  if (!any)
    throw Error("engine: kv_quantize_to " + options.kv_quantize_to + " is not narrower than the KV codec (" +
                options.kv_codec + ") of any storage layer; nothing would switch");
  return sw;
}

void check_options(const EngineOptions& opt) {
  if (opt.max_running < 1) throw Error("engine: max_running must be at least 1");
  if (opt.token_budget < 1) throw Error("engine: token_budget must be at least 1");
  if (opt.max_waiting < 0) throw Error("engine: max_waiting must not be negative");
  if (opt.prefix_cache && opt.prefix_cache_bytes == 0)
    throw Error("engine: prefix_cache_bytes must be more than 0 (prefix_cache = false turns the cache off)");
  if (!opt.draft.empty() && (opt.draft_tokens < 1 || opt.draft_tokens > kMaxDraftTokens))
    throw Error("engine: draft_tokens must be 1.." + std::to_string(kMaxDraftTokens) + ", got " +
                std::to_string(opt.draft_tokens));
}

DraftSource load_draft(const EngineOptions& options, Backend& backend, const Model& target_model) {
  const std::string& dir = options.draft;
  const ModelInfo& target = target_model.info();
  if (dir.empty() || dir == "ngram") return {};
  if (!std::filesystem::is_directory(dir))
    throw Error("engine: draft '" + dir + "' is neither \"ngram\" nor a model directory");
  if (gemma4::is_assistant_dir(dir)) {
    try {
      return {nullptr, gemma4::Assistant::load(dir, backend, target_model)};
    } catch (const std::exception& e) {
      throw Error("engine: cannot use the assistant " + dir + " for the model " + target.directory + ": " + e.what());
    }
  }
  std::unique_ptr<Model> draft;
  try {
    draft = load_model(dir, backend);
  } catch (const std::exception& e) {
    throw Error("engine: cannot load the draft model " + dir + ": " + e.what());
  }
  if (draft->info().vocab_size != target.vocab_size)
    throw Error("engine: the draft model " + dir + " has a vocabulary of " + std::to_string(draft->info().vocab_size) +
                " tokens, the model " + target.directory + " one of " + std::to_string(target.vocab_size) +
                "; a draft must share the model's vocabulary");
  return {std::move(draft), nullptr};
}

kv::CacheOptions cache_options(const EngineOptions& options, const Model& model, const Backend& backend) {
  kv::CacheOptions copt;
  copt.layers = kv_layers_with_codecs(model, options.kv_codec);
  copt.layer_backends = model.kv_backends();
  if (options.kv_quantize_after) copt.precision_switch = precision_switch(options, copt.layers);
  copt.capacity_bytes = options.kv_budget_bytes;
  if (copt.capacity_bytes == 0) {
    const std::size_t avail = backend.available_memory();
    if (backend.device().is_host()) {
      // Half of the memory available now, at most 16 GiB: room for the
      // model's pages and the rest of the system.
      copt.capacity_bytes = avail ? std::min(avail / 2, std::size_t(16) << 30) : std::size_t(2) << 30;
    } else {
      // The weights are on the device already: 80% of what is left, the
      // rest for each step's workspace (activations, logits).
      copt.capacity_bytes = avail ? avail / 10 * 8 : std::size_t(2) << 30;
    }
  }
  copt.prefix_cache_bytes = options.prefix_cache ? options.prefix_cache_bytes : 0;
  return copt;
}

std::unique_ptr<Drafter> make_drafter(const EngineOptions& options, DraftSource draft, Backend& backend,
                                      const Model& target_model, kv::CacheOptions& target) {
  if (draft.assistant) {
    draft.assistant->widen_target_windows(target.layers);
    return make_assistant_drafter(std::move(draft.assistant));
  }
  std::unique_ptr<Model> draft_model = std::move(draft.model);
  if (!draft_model) return options.draft == "ngram" ? make_ngram_drafter() : nullptr;
  // The split below weighs a step of the token budget. Admission counts
  // what a draft row appends between settle points: one propose() is one
  // round that catches up at most a prefill chunk (the budget) and then
  // feeds γ - 1 drafts after the token they follow.
  const int64_t step_tokens = options.token_budget;
  const int64_t catch_up_tokens = options.token_budget + std::max(0, options.draft_tokens);
  // The draft's cache takes its share of the budget: what one row of the
  // full context costs each model.
  kv::CacheOptions dopt;
  dopt.layers = draft_model->kv_layers(draft_codec(options.kv_codec));
  const int64_t context = target_model.info().max_position > 0 ? target_model.info().max_position : 4096;
  const double t = double(context_bytes(target.layers, context, step_tokens));
  const double d = double(context_bytes(dopt.layers, context, step_tokens));
  const double share = d / (t + d);
  dopt.capacity_bytes = std::size_t(double(target.capacity_bytes) * share);
  dopt.prefix_cache_bytes = std::size_t(double(target.prefix_cache_bytes) * share);
  target.capacity_bytes -= dopt.capacity_bytes;
  target.prefix_cache_bytes -= dopt.prefix_cache_bytes;
  return make_model_drafter(std::move(draft_model), backend, std::move(dopt), options.prefix_cache,
                            catch_up_tokens, options.kv_overcommit);
}

}  // namespace rowlm::engine
