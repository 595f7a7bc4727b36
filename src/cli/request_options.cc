#include "cli/request_options.h"

#include "cli/model_source.h"
#include <limits>

#include "cli/runtime.h"
#include "core/error.h"
#include "model/config_fields.h"

namespace rowlm::cli {

void add_engine_options(Args& args, int default_max_waiting) {
  add_device_option(args);
  args.option("threads", "N", "CPU threads (0 = one per core)", "0")
      .option("kv-codec", "CODEC",
              "KV storage: f32, bf16, f16, q8, q4 (q4:32 picks the group size), or a per-layer map "
              "such as bf16,3=q8",
              "bf16")
      .option("kv-quantize-after", "N",
              "re-encode a request's KV in --kv-quantize-to once it holds N positions, and store its later tokens so")
      .option("kv-quantize-to", "CODEC", "the codec of --kv-quantize-after (q8, q4, q4:32, ...; default q8)")
      .option("kv-budget", "BYTES", "KV pool capacity, e.g. 2G (0 = half the available memory, at most 16G)", "0")
      .option("max-running", "N", "most requests in the running batch", "64")
      .option("token-budget", "N", "most tokens per forward step (prefill is chunked to fit)", "256")
      .option("max-waiting", "N", "most queued requests", std::to_string(default_max_waiting))
      .flag("no-prefix-cache", "do not reuse cached prompt prefixes")
      .option("prefix-cache-bytes", "BYTES",
              "KV of finished prompts kept for reuse while idle (evicted first when running requests need room)",
              std::to_string(kDefaultPrefixCacheBytes >> 20) + "M")
      .flag("no-kv-swap", "recompute preempted requests instead of moving their KV to host memory and back")
      .flag("kv-overcommit",
            "admit requests on the KV they hold now, not what they may reach (more run at once; growth preempts)")
      .option("draft", "MODEL_DIR|ngram", "speculative decoding with a draft model (a directory or ORG/REPO) or n-gram prompt lookup")
      .option("draft-tokens", "N", "tokens drafted per row per round", "3");
  add_matmul_precision_option(args);
  add_tensor_parallel_option(args);
}

void apply_kv_quantize_options(const Args& args, EngineOptions& o) {
  const auto after = args.get_opt("kv-quantize-after");
  const auto to = args.get_opt("kv-quantize-to");
  if (to && !after) throw Error("--kv-quantize-to needs --kv-quantize-after N (the position the switch happens at)");
  if (!after) return;
  const int64_t n = parse_int(*after, "--kv-quantize-after");
  if (n < 0) throw Error("--kv-quantize-after must not be negative, got " + *after);
  o.kv_quantize_after = n;
  if (to) o.kv_quantize_to = *to;
}

EngineOptions engine_options_from(const Args& args, const std::string& model_dir, bool background) {
  EngineOptions o;
  o.model_dir = model_dir;
  const auto ranged = [&](const char* name, int64_t lo, int64_t hi) {
    const int64_t v = args.get_int(name);
    if (v < lo || v > hi)
      throw Error(std::string("--") + name + " must be between " + std::to_string(lo) + " and " + std::to_string(hi));
    return int(v);
  };
  o.device = args.get("device");
  o.threads = ranged("threads", 0, 1024);
  o.tensor_parallel = tensor_parallel_from(args);
  o.matmul_precision = matmul_precision_from(args);
  o.kv_codec = args.get("kv-codec");
  apply_kv_quantize_options(args, o);
  o.kv_budget_bytes = parse_bytes(args.get("kv-budget"), "--kv-budget");
  o.max_running = ranged("max-running", 1, 4096);
  o.token_budget = ranged("token-budget", 1, 1 << 20);
  o.max_waiting = ranged("max-waiting", 0, 1 << 24);
  o.prefix_cache = !args.flag_set("no-prefix-cache");
  o.kv_overcommit = args.flag_set("kv-overcommit");
  o.kv_swap = !args.flag_set("no-kv-swap");
  o.prefix_cache_bytes = parse_bytes(args.get("prefix-cache-bytes"), "--prefix-cache-bytes");
  if (o.prefix_cache && o.prefix_cache_bytes == 0)
    throw Error("--prefix-cache-bytes must be more than 0 (--no-prefix-cache turns the cache off)");
  o.draft = args.get_opt("draft").value_or("");
  if (!o.draft.empty() && o.draft != "ngram") o.draft = resolve_model(o.draft, args.flag_set("pull")).dir;
  o.draft_tokens = ranged("draft-tokens", 1, 64);
  o.background = background;
  return o;
}

void add_sampling_options(Args& args, float default_temperature) {
  args.option("max-tokens", "N", "most tokens to generate", "256")
      .option("temperature", "T", "sampling temperature; 0 = greedy", std::to_string(default_temperature).substr(0, 3))
      .option("top-p", "P", "nucleus sampling mass", "1.0")
      .option("top-k", "K", "keep the K most likely tokens (0 = all)", "0")
      .option("min-p", "M", "keep tokens at least M times as likely as the most likely", "0.0")
      .option("seed", "S", "random seed (default: drawn from the OS and reported)")
      .option("repetition-penalty", "R", "HF repetition penalty over prompt and output (1 = off)", "1.0")
      .option("presence-penalty", "P", "OpenAI presence penalty", "0.0")
      .option("frequency-penalty", "F", "OpenAI frequency penalty", "0.0")
      .option("logit-bias", "ID=BIAS", "add BIAS to token ID's logit (repeatable)")
      .option("stop", "STR", "stop when the output contains STR (repeatable; STR is not printed)")
      .option("stop-token-id", "ID", "stop after generating token ID (repeatable)")
      .option("logprobs", "N", "report each token's log-probability and the N most likely alternatives")
      .flag("ignore-eos", "keep generating past the model's end-of-sequence tokens");
}

namespace {

constexpr int64_t kInt32Max = 2147483647;
// The engine step a batch request may join at: far more steps than any run
// takes, small enough that waiting for it cannot hang a run.
constexpr int64_t kMaxArrivalStep = 1000000;

// A flag's integer within [lo, hi]: never wrapped into a narrower type.
int64_t int_in(const std::string& text, const std::string& flag, int64_t lo, int64_t hi) {
  const int64_t v = parse_int(text, flag);
  if (v < lo || v > hi)
    throw Error(flag + " must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " + text);
  return v;
}

}  // namespace

void apply_sampling_options(const Args& args, Request& request) {
  auto& s = request.sampling;
  const int64_t max_tokens = args.get_int("max-tokens");
  if (max_tokens < 1 || max_tokens > (1 << 24)) throw Error("--max-tokens must be between 1 and 16777216");
  s.max_tokens = int32_t(max_tokens);
  s.temperature = float(args.get_double("temperature"));
  s.top_p = float(args.get_double("top-p"));
  s.top_k = int32_t(int_in(args.get("top-k"), "--top-k", 0, kInt32Max));
  s.min_p = float(args.get_double("min-p"));
  if (auto seed = args.get_opt("seed")) {
    const int64_t v = parse_int(*seed, "--seed");
    if (v < 0) throw Error("--seed must not be negative");
    s.seed = uint64_t(v);
  }
  s.repetition_penalty = float(args.get_double("repetition-penalty"));
  s.presence_penalty = float(args.get_double("presence-penalty"));
  s.frequency_penalty = float(args.get_double("frequency-penalty"));
  for (const std::string& b : args.get_all("logit-bias")) {
    const auto eq = b.find('=');
    if (eq == std::string::npos) throw Error("--logit-bias: expected ID=BIAS, got '" + b + "'");
    s.logit_bias[int32_t(int_in(b.substr(0, eq), "--logit-bias ID", 0, kInt32Max))] =
        float(parse_double(b.substr(eq + 1), "--logit-bias"));
  }
  s.stop = args.get_all("stop");
  for (const std::string& id : args.get_all("stop-token-id"))
    s.stop_token_ids.push_back(int32_t(int_in(id, "--stop-token-id", 0, kInt32Max)));
  if (auto n = args.get_opt("logprobs")) s.logprobs = int32_t(int_in(*n, "--logprobs", 0, kInt32Max));
  request.ignore_eos = args.flag_set("ignore-eos");
}

namespace {

// An integer field within [lo, hi]: a non-integer (2.7, "3", true) or an
// integer out of range is refused naming the field, never truncated or
// wrapped.
int64_t integer_field(const nlohmann::json& v, const std::string& what, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) throw Error(what + " must be an integer, got " + v.dump());
  const bool too_big = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max());
  if (too_big || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
    throw Error(what + " must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " + v.dump());
  return v.get<int64_t>();
}

int64_t integer_field(const nlohmann::json& j, const char* name, const std::string& where, int64_t lo, int64_t hi,
                      int64_t fallback) {
  if (!j.contains(name) || j[name].is_null()) return fallback;
  return integer_field(j[name], where + ": field '" + name + "'", lo, hi);
}

std::vector<int32_t> token_id_list(const nlohmann::json& j, const char* name, const std::string& where) {
  std::vector<int32_t> out;
  if (!j.contains(name) || j[name].is_null()) return out;
  if (!j[name].is_array()) throw Error(where + ": field '" + name + "' must be an array of token ids");
  for (std::size_t i = 0; i < j[name].size(); ++i)
    out.push_back(int32_t(integer_field(j[name][i], where + ": " + name + "[" + std::to_string(i) + "]", 0, kInt32Max)));
  return out;
}

template <class T>
T field(const nlohmann::json& j, const char* name, const std::string& where, T fallback) {
  if (!j.contains(name) || j[name].is_null()) return fallback;
  try {
    return j[name].get<T>();
  } catch (const nlohmann::json::exception&) {
    throw Error(where + ": field '" + name + "' has the wrong type (" + j[name].type_name() + ")");
  }
}

}  // namespace

std::shared_ptr<const constrain::Grammar> json_schema_from_file(const std::string& path) {
  std::string text;
  try {
    text = config::read_text(path);
  } catch (const Error& e) {
    throw Error(std::string("--json-schema: ") + e.what());
  }
  nlohmann::json schema;
  try {
    schema = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error("--json-schema " + path + ": not JSON: " + e.what());
  }
  try {
    return constrain::Grammar::from_schema(schema, "schema");
  } catch (const constrain::UnsupportedSchema& e) {
    throw Error("--json-schema " + path + ": " + e.what());
  }
}

BatchLine parse_batch_line(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw Error(where + ": expected a JSON object");
  static const char* known[] = {"id", "prompt", "ids", "max_tokens", "temperature", "top_p", "top_k", "min_p",
                                "seed", "stop", "logprobs", "presence_penalty", "frequency_penalty",
                                "repetition_penalty", "logit_bias", "ignore_eos", "arrival_step", "stop_token_ids",
                                "json_schema"};
  for (const auto& [key, value] : j.items()) {
    if (std::find(std::begin(known), std::end(known), key) == std::end(known))
      throw Error(where + ": unknown field '" + key + "'");
  }
  BatchLine line;
  line.id = j.value("id", nlohmann::json());
  Request& r = line.request;
  const bool has_prompt = j.contains("prompt"), has_ids = j.contains("ids");
  if (has_prompt == has_ids) throw Error(where + ": give exactly one of 'prompt' (text) and 'ids'");
  if (has_prompt) r.prompt = field<std::string>(j, "prompt", where, "");
  if (has_ids) {
    r.prompt_ids = token_id_list(j, "ids", where);
    if (r.prompt_ids.empty()) throw Error(where + ": field 'ids' is empty");
  }
  auto& s = r.sampling;
  s.max_tokens = int32_t(integer_field(j, "max_tokens", where, 1, 1 << 24, 256));
  s.temperature = field<float>(j, "temperature", where, 1.0f);
  s.top_p = field<float>(j, "top_p", where, 1.0f);
  s.top_k = int32_t(integer_field(j, "top_k", where, 0, kInt32Max, 0));
  s.min_p = field<float>(j, "min_p", where, 0.0f);
  s.presence_penalty = field<float>(j, "presence_penalty", where, 0.0f);
  s.frequency_penalty = field<float>(j, "frequency_penalty", where, 0.0f);
  s.repetition_penalty = field<float>(j, "repetition_penalty", where, 1.0f);
  if (j.contains("seed") && !j["seed"].is_null())
    s.seed = uint64_t(integer_field(j, "seed", where, 0, std::numeric_limits<int64_t>::max(), 0));
  if (j.contains("stop") && j["stop"].is_string()) s.stop = {j["stop"].get<std::string>()};
  else s.stop = field<std::vector<std::string>>(j, "stop", where, {});
  s.stop_token_ids = token_id_list(j, "stop_token_ids", where);
  if (j.contains("logprobs") && !j["logprobs"].is_null()) {
    if (j["logprobs"].is_boolean()) {
      if (j["logprobs"].get<bool>()) s.logprobs = 0;
    } else {
      s.logprobs = int32_t(integer_field(j, "logprobs", where, 0, kInt32Max, 0));
    }
  }
  if (j.contains("logit_bias") && !j["logit_bias"].is_null()) {
    if (!j["logit_bias"].is_object()) throw Error(where + ": field 'logit_bias' must be an object of id: bias");
    for (const auto& [key, value] : j["logit_bias"].items()) {
      if (!value.is_number()) throw Error(where + ": logit_bias['" + key + "'] must be a number");
      s.logit_bias[int32_t(int_in(key, where + ": logit_bias key", 0, kInt32Max))] = value.get<float>();
    }
  }
  r.ignore_eos = field<bool>(j, "ignore_eos", where, false);
  if (j.contains("json_schema") && !j["json_schema"].is_null()) {
    try {
      r.response_format = constrain::Grammar::from_schema(j["json_schema"], "json_schema");
    } catch (const constrain::UnsupportedSchema& e) {
      throw Error(where + ": " + e.what());
    }
  }
  line.arrival_step = integer_field(j, "arrival_step", where, 0, kMaxArrivalStep, 0);
  return line;
}

nlohmann::json result_json(const RequestResult& r, bool with_top_logprobs) {
  nlohmann::json j;
  j["token_ids"] = r.token_ids;
  j["text"] = r.text;
  j["finish_reason"] = finish_reason_name(r.finish);
  if (!r.stop.empty()) j["stop"] = r.stop;
  if (!r.error.empty()) j["error"] = r.error;
  if (!r.logprobs.empty()) {
    // A float converted to double is exact, and the JSON writer prints the
    // shortest decimal that reads back as that double: the float round-trips.
    nlohmann::json lp = nlohmann::json::array(), top = nlohmann::json::array();
    for (const auto& l : r.logprobs) {
      lp.push_back(double(l.chosen));
      nlohmann::json alts = nlohmann::json::array();
      for (const auto& t : l.top) alts.push_back({{"token", t.token}, {"logprob", double(t.logprob)}});
      top.push_back(alts);
    }
    j["logprobs"] = lp;
    if (with_top_logprobs) j["top_logprobs"] = top;
  }
  j["usage"] = {{"prompt_tokens", r.usage.prompt_tokens},
                {"completion_tokens", r.usage.completion_tokens},
                {"cached_prompt_tokens", r.usage.cached_prompt_tokens}};
  j["timings"] = {{"queue_s", r.timings.queue_s},
                  {"time_to_first_token_s", r.timings.time_to_first_token_s},
                  {"total_s", r.timings.total_s},
                  {"decode_tokens_per_s", r.timings.decode_tokens_per_s}};
  if (r.preemptions) j["preemptions"] = r.preemptions;
  if (r.draft_proposed) j["speculative"] = {{"proposed", r.draft_proposed}, {"accepted", r.draft_accepted}};
  return j;
}

}  // namespace rowlm::cli
