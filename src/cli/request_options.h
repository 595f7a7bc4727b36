#pragma once
// The per-request and engine options shared by generate, chat, batch and
// serve: as command-line flags, and as the JSON fields of a batch line.

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "constrain/grammar.h"
#include "rowlm/engine.h"

namespace rowlm::cli {

// --threads --kv-codec --kv-budget --max-running --token-budget --max-waiting
// --no-prefix-cache --draft --draft-tokens --matmul-precision
void add_engine_options(Args& args, int default_max_waiting = 1024);
// --kv-quantize-after N [--kv-quantize-to CODEC] into o (also for bench).
void apply_kv_quantize_options(const Args& args, EngineOptions& o);
EngineOptions engine_options_from(const Args& args, const std::string& model_dir, bool background);

// --max-tokens --temperature --top-p --top-k --min-p --seed
// --repetition-penalty --presence-penalty --frequency-penalty --logit-bias
// --stop --stop-token-id --logprobs --ignore-eos. Temperature defaults to
// `default_temperature` (0 = greedy).
void add_sampling_options(Args& args, float default_temperature);
void apply_sampling_options(const Args& args, Request& request);

// `generate --json-schema FILE`: the JSON Schema in FILE, compiled. Errors
// name the file, and the keyword outside the supported subset.
std::shared_ptr<const constrain::Grammar> json_schema_from_file(const std::string& path);

// A batch line: {"id", "prompt" | "ids", "max_tokens", "temperature", "top_p",
// "top_k", "min_p", "seed", "stop", "logprobs", "presence_penalty",
// "frequency_penalty", "repetition_penalty", "logit_bias", "ignore_eos",
// "arrival_step", "json_schema"}. Errors name `where` and the field.
struct BatchLine {
  nlohmann::json id;
  Request request;
  int64_t arrival_step = 0;
};
BatchLine parse_batch_line(const nlohmann::json& j, const std::string& where);

// The result fields printed by `generate --json` and `batch`: token_ids,
// text, finish_reason, stop, logprobs (floats that round-trip exactly),
// top_logprobs (when asked for), usage, timings.
nlohmann::json result_json(const RequestResult& result, bool with_top_logprobs);

}  // namespace rowlm::cli
