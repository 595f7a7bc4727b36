// rowlm bench: forward-pass speed on random weights with real Gemma 4 layer
// geometry, judged against ceilings measured in the same run on the same
// machine: memory read bandwidth (decode streams every weight once per step)
// and the peak of the matmuls' arithmetic, f32 FMA or bf16 dot products
// (prefill is compute-bound). --concurrency runs requests through the engine.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "backend/factory/make_backend.h"
#include "cli/commands.h"
#include "cli/model_source.h"
#include "cli/request_options.h"
#include "cli/runtime.h"
#include "core/error.h"
#include "model/gemma4.h"
#include "model/mlx_checkpoint.h"
#include "rowlm/engine.h"

namespace rowlm::cli {
namespace {

using Clock = std::chrono::steady_clock;

// The text decoder of a released size with its first `layers` layers (the
// KV-shared tail scaled down in proportion), as a config.json.
nlohmann::json shape_config(const std::string& shape, int layers) {
  nlohmann::json j;
  int full_every = 0, total = 0, shared = 0;
  if (shape == "e2b") {
    j = {{"hidden_size", 1536}, {"intermediate_size", 6144}, {"num_attention_heads", 8},
         {"num_key_value_heads", 1}, {"use_double_wide_mlp", true}};
    full_every = 5, total = 35, shared = 20;
  } else if (shape == "e4b") {
    j = {{"hidden_size", 2560}, {"intermediate_size", 10240}, {"num_attention_heads", 8},
         {"num_key_value_heads", 2}, {"use_double_wide_mlp", false}};
    full_every = 6, total = 42, shared = 18;
  } else {
    throw Error("--shape must be e2b or e4b, got '" + shape + "'");
  }
  if (layers < 1 || layers > total) throw Error("--layers must be 1.." + std::to_string(total) + " for " + shape);
  std::vector<std::string> types;
  for (int i = 0; i < layers; ++i) types.push_back((i + 1) % full_every ? "sliding_attention" : "full_attention");
  types.back() = "full_attention";
  int n_shared = shared * layers / total;
  // Keep at least one donor of each type before the shared region.
  while (n_shared > 0) {
    bool s = false, f = false;
    for (int i = 0; i < layers - n_shared; ++i) (types[std::size_t(i)] == "full_attention" ? f : s) = true;
    if (s && f) break;
    --n_shared;
  }
  j.update({{"model_type", "gemma4_text"}, {"vocab_size", 262144}, {"num_hidden_layers", layers},
            {"layer_types", types}, {"head_dim", 256}, {"global_head_dim", 512}, {"sliding_window", 512},
            {"hidden_size_per_layer_input", 256}, {"vocab_size_per_layer_input", 262144},
            {"num_kv_shared_layers", n_shared}, {"final_logit_softcapping", 30.0},
            {"rms_norm_eps", 1e-6}, {"tie_word_embeddings", true}, {"max_position_embeddings", 131072}});
  return j;
}

// The matrices a decode step streams (every linear layer and the tied
// output head; embedding rows are gathered, not streamed): their bytes as
// held (codes, scales and biases for a quantized one) and their elements.
struct Streamed {
  std::size_t bytes = 0;
  double elements = 0;
};
Streamed streamed_weights(const decoder::DecoderWeights& w) {
  Streamed s;
  auto add = [&](const Weight& m) {
    if (m.empty()) return;
    s.bytes += m.nbytes();
    s.elements += double(m.rows) * double(m.cols);
  };
  add(w.embed);
  add(w.per_layer_model_projection);
  for (const auto& l : w.layers)
    for (const Weight* m : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj,
                            &l.per_layer_gate, &l.per_layer_projection})
      add(*m);
  return s;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double idx = p * double(v.size() - 1);
  const std::size_t lo = std::size_t(idx), hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (v[hi] - v[lo]) * (idx - double(lo));
}

// The backend's profile since it was cleared, turned off: the device time of
// each kind of operation per `per` (runs or steps), largest first, beside
// the wall time per `per` (the gap is what the host adds while profiled).
nlohmann::json profile_summary(Backend& backend, double per, double wall_seconds) {
  backend.set_profiling(false);
  std::vector<Backend::OpProfile> ops = backend.profile();
  backend.clear_profile();
  std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
  double device = 0;
  for (const auto& op : ops) device += op.seconds;
  device /= per;
  nlohmann::json list = nlohmann::json::array();
  for (const auto& op : ops)
    list.push_back({{"op", op.op},
                    {"launches", double(op.launches) / per},
                    {"seconds", op.seconds / per},
                    {"fraction", device > 0 ? op.seconds / per / device : 0.0}});
  return {{"wall_seconds", wall_seconds / per}, {"device_seconds", device}, {"ops", list}};
}

// Runs `run` `repeats` times with the backend's profiling on; per run.
template <class Run>
nlohmann::json profiled(Backend& backend, int repeats, Run&& run) {
  backend.clear_profile();
  backend.set_profiling(true);
  const auto t0 = Clock::now();
  for (int i = 0; i < repeats; ++i) run();
  return profile_summary(backend, repeats, seconds_since(t0));
}

// Continuous batching under load: C requests submitted at once to one
// engine; aggregate and per-request throughput, time to first token.
// With `grammar`, every request is held to it (structured outputs) and
// ends where its JSON value does, or at gen_tokens.
// With `profiled_backend` (the engine's, in manual mode) the steps run on
// this thread with its profiling on, and the run reports the operations'
// time per step.
// The host pool's regions, stalls and narrowed regions between two readings
// (core/thread_pool.h): many narrowed regions mean other work took the cores
// during the measurement.
nlohmann::json host_pool_json(const ThreadPool::Stats& before, const ThreadPool::Stats& after) {
  return {{"regions", after.regions - before.regions},
          {"stalls", after.stalls - before.stalls},
          {"narrowed", after.narrowed - before.narrowed}};
}

nlohmann::json concurrency_run(Engine& engine, int concurrency, int64_t prompt_tokens, int64_t gen_tokens,
                               uint32_t& rng, int vocab, float temperature, float top_p,
                               const std::shared_ptr<const constrain::Grammar>& grammar, Backend* profiled_backend) {
  std::vector<std::shared_ptr<RequestHandle>> handles;
  const EngineStats before = engine.stats();
  if (profiled_backend) {
    profiled_backend->clear_profile();
    profiled_backend->set_profiling(true);
  }
  const auto t0 = Clock::now();
  for (int c = 0; c < concurrency; ++c) {
    Request r;
    for (int64_t i = 0; i < prompt_tokens; ++i) {
      rng = rng * 1664525u + 1013904223u;
      r.prompt_ids.push_back(int32_t(4 + rng % uint32_t(vocab - 4)));
    }
    r.sampling.temperature = temperature;
    r.sampling.top_p = top_p;
    r.sampling.seed = uint64_t(c);
    r.sampling.max_tokens = int32_t(gen_tokens);
    r.ignore_eos = grammar == nullptr;
    r.response_format = grammar;
    handles.push_back(engine.submit(r));
  }
  if (profiled_backend) engine.run_until_idle();
  std::vector<double> ttft, per_request;
  int64_t generated = 0;
  for (auto& h : handles) {
    const RequestResult res = h->result();
    if (res.finish == FinishReason::Error) throw Error("bench request failed: " + res.error);
    ttft.push_back(res.timings.time_to_first_token_s);
    per_request.push_back(res.timings.decode_tokens_per_s);
    generated += res.usage.completion_tokens;
  }
  const double wall = seconds_since(t0);
  // The engine's steps over this run: the forward passes, and what each step
  // cost outside them (sampling, detokenization, scheduling).
  const EngineStats after = engine.stats();
  const double steps = double(std::max<int64_t>(after.steps - before.steps, 1));
  const double forward_s = after.forward_seconds - before.forward_seconds;
  const double outside_s = after.step_seconds - before.step_seconds - forward_s;
  const double decode_steps = double(std::max<int64_t>(after.decode_steps - before.decode_steps, 1));
  const double decode_forward_s = after.decode_forward_seconds - before.decode_forward_seconds;
  const double decode_outside_s = after.decode_step_seconds - before.decode_step_seconds - decode_forward_s;
  nlohmann::json run = {{"concurrency", concurrency},
          {"steps", after.steps - before.steps},
          {"forward_ms_per_step", forward_s / steps * 1e3},
          {"outside_forward_ms_per_step", outside_s / steps * 1e3},
          {"decode_steps", after.decode_steps - before.decode_steps},
          {"decode_forward_ms_per_step", decode_forward_s / decode_steps * 1e3},
          {"decode_outside_forward_ms_per_step", decode_outside_s / decode_steps * 1e3},
          {"seconds", wall},
          {"generated_tokens", generated},
          {"aggregate_tokens_per_s", double(generated) / wall},
          {"per_request_decode_tokens_per_s_p50", percentile(per_request, 0.5)},
          {"time_to_first_token_p50_s", percentile(ttft, 0.5)},
          {"time_to_first_token_p95_s", percentile(ttft, 0.95)},
          {"host_pool", host_pool_json({before.host_pool_regions, before.host_pool_stalls, before.host_pool_narrowed},
                                       {after.host_pool_regions, after.host_pool_stalls, after.host_pool_narrowed})}};
  if (profiled_backend) run["profile_per_step"] = profile_summary(*profiled_backend, steps, forward_s);
  return run;
}

// --concurrency: the engine under C simultaneous requests, for each C.
int concurrency_bench(const Args& args, const std::string& concurrency, const std::string& shape, int layers,
                      int64_t threads) {
  const auto levels = parse_int_list(concurrency, "--concurrency");
  for (int32_t c : levels) if (c < 1 || c > 4096) throw Error("--concurrency levels must be 1..4096");
  const int64_t prompt_tokens = args.get_int("prompt-tokens"), gen_tokens = args.get_int("gen-tokens");
  if (prompt_tokens < 1 || gen_tokens < 1) throw Error("--prompt-tokens and --gen-tokens must be positive");
  const float temperature = float(args.get_double("temperature")), top_p = float(args.get_double("top-p"));
  if (!(top_p > 0.0f && top_p <= 1.0f)) throw Error("--top-p must be in (0, 1]");
  std::shared_ptr<const constrain::Grammar> grammar;
  if (auto schema = args.get_opt("json-schema")) {
    if (!args.has("model")) throw Error("--json-schema needs --model (a tokenizer)");
    grammar = json_schema_from_file(*schema);
  }
  EngineOptions eo;
  eo.device = args.get("device");
  eo.threads = int(threads);
  eo.tensor_parallel = tensor_parallel_from(args);
  eo.matmul_precision = matmul_precision_from(args);
  eo.kv_codec = args.get("kv-codec");
  apply_kv_quantize_options(args, eo);
  eo.kv_budget_bytes = parse_bytes(args.get("kv-budget"), "--kv-budget");
  eo.prefix_cache = false;
  // --profile: the steps run on this thread (manual mode), each operation timed.
  const bool profile = args.flag_set("profile");
  eo.background = !profile;
  eo.max_running = *std::max_element(levels.begin(), levels.end());
  eo.token_budget = std::max<int>(256, eo.max_running);
  std::unique_ptr<Engine> engine;
  Backend* backend_of_engine = nullptr;  // with random weights: the engine's backend
  std::string source;
  if (auto dir = args.get_opt("model")) {
    if (args.get_opt("quantize")) throw Error("--quantize applies to random weights (leave out --model)");
    eo.model_dir = resolve_model(*dir, false).dir;
    if (profile) {
      // The engine on a backend this command holds, so that its operations
      // can be timed (tensor-parallel shards then run on that one backend).
      auto backend = make_backend(backend_options_from(args));
      auto model = load_model(eo.model_dir, *backend, {.tensor_parallel = eo.tensor_parallel});
      backend_of_engine = backend.get();
      engine = Engine::create(eo, std::move(backend), std::move(model));
    } else {
      engine = Engine::create(eo);
    }
    source = *dir;
  } else {
    auto backend = make_backend(backend_options_from(args));
    const gemma4::Config cfg = gemma4::parse_config(shape_config(shape, layers).dump(), "bench:" + shape);
    std::fprintf(stderr, "bench: building random %s weights with %d layers...\n", shape.c_str(), layers);
    std::optional<quant::AffineSpec> quantize;
    if (auto q = args.get_opt("quantize")) quantize = parse_quantize_spec(*q);
    auto model = gemma4::make_model(cfg, gemma4::make_synthetic_weights(cfg, 1, 0.02f, quantize), *backend, "",
                                    {.tensor_parallel = eo.tensor_parallel});
    backend_of_engine = backend.get();
    engine = Engine::create(eo, std::move(backend), std::move(model));
    source = "random " + shape + " weights, " + std::to_string(layers) + " layers" +
             (quantize ? ", quantized " + *args.get_opt("quantize") : "");
  }
  nlohmann::json runs = nlohmann::json::array();
  uint32_t seed = 7;
  const int vocab = std::min(engine->model_info().vocab_size, 262144);
  for (int32_t c : levels)
    runs.push_back(concurrency_run(*engine, c, prompt_tokens, gen_tokens, seed, vocab, temperature, top_p, grammar,
                                   profile ? backend_of_engine : nullptr));
  const double single = runs[0]["aggregate_tokens_per_s"];
  for (auto& r : runs) r["aggregate_vs_first"] = double(r["aggregate_tokens_per_s"]) / single;
  nlohmann::json out = {{"model", source}, {"kv_codec", eo.kv_codec}, {"threads", eo.threads},
                        {"matmul_precision", matmul_precision_name(eo.matmul_precision)},
                        {"prompt_tokens", prompt_tokens}, {"gen_tokens", gen_tokens}, {"temperature", temperature}, {"top_p", top_p},
                        {"json_schema", args.get_opt("json-schema").value_or("")}, {"runs", runs}};
  if (eo.kv_quantize_after) {
    out["kv_quantize_after"] = *eo.kv_quantize_after;
    out["kv_quantize_to"] = eo.kv_quantize_to;
  }
  std::cout << out.dump(1) << "\n";
  if (args.flag_set("table")) {
    std::fprintf(stderr, "%11s %16s %10s %18s %12s %12s %16s %16s\n", "concurrency", "aggregate tok/s", "vs first",
                 "per-request tok/s", "TTFT p50 ms", "TTFT p95 ms", "forward ms/step", "outside ms/step");
    for (const auto& r : runs)
      std::fprintf(stderr, "%11d %16.1f %9.2fx %18.1f %12.1f %12.1f %16.2f %16.2f\n", int(r["concurrency"]),
                   double(r["aggregate_tokens_per_s"]), double(r["aggregate_vs_first"]),
                   double(r["per_request_decode_tokens_per_s_p50"]), 1e3 * double(r["time_to_first_token_p50_s"]),
                   1e3 * double(r["time_to_first_token_p95_s"]), double(r["forward_ms_per_step"]),
                   double(r["outside_forward_ms_per_step"]));
  }
  return 0;
}

}  // namespace

int run_bench(const std::vector<std::string>& argv) {
  Args args("bench", "Measures the forward pass on random bf16 weights with a released Gemma 4 size's layer\n"
                     "geometry, and the machine's read bandwidth and FMA (or bf16 dot) peak in the same run;\n"
                     "or, with --concurrency, many requests at once through the engine. Prints JSON.");
  args.option("shape", "NAME", "layer geometry: e2b or e4b", "e2b")
      .option("layers", "N", "number of decoder layers (the vocabulary and output head stay full size)", "4")
      .option("prefill", "N", "prompt tokens for the prefill measurement", "256")
      .option("decode-steps", "N", "decode steps per batch size", "16")
      .option("batch", "B,B,...", "decode batch sizes", "1,8")
      .option("context", "N", "tokens already in each row before decode steps", "64")
      .option("quantize", "BITS/GROUP",
              "quantize the random matrices as MLX does (e.g. 4/64: mlx-community q4), bf16 scales and biases")
      .option("logits", "argmax|full",
              "what a decode step brings back per row: the argmax (greedy decoding, as the engine runs a greedy "
              "request) or the whole logits row (as for a sampled one)",
              "argmax")
      .flag("no-ceilings", "skip the bandwidth and FMA measurements")
      .flag("profile", "after the timed runs, time each kind of device operation in a prefill and in a decode step "
                       "of each batch size (GPU: device time, launches one by one while profiled; CPU: wall time of each "
                       "operation, its threads included); with --concurrency, the engine's steps run on the calling "
                       "thread, profiled, and each run reports its operations per step")
      .option("concurrency", "C,C,...",
              "instead: run C requests at once through the engine, for each C (continuous batching)")
      .option("model", "MODEL_DIR", "with --concurrency: a real model instead of random weights")
      .option("prompt-tokens", "N", "with --concurrency: prompt length of each request", "16")
      .option("gen-tokens", "N", "with --concurrency: tokens each request generates", "64")
      .option("kv-quantize-after", "N", "with --concurrency: re-encode a request's KV in --kv-quantize-to at N positions")
      .option("kv-quantize-to", "CODEC", "with --concurrency: the codec of --kv-quantize-after (default q8)")
      .option("temperature", "T", "with --concurrency: sampling temperature (request c is seeded with c)", "0")
      .option("top-p", "P", "with --concurrency: nucleus sampling", "1")
      .option("json-schema", "FILE",
              "with --concurrency and --model: hold every request to this JSON Schema (it ends where its value "
              "does, or at --gen-tokens)")
      .flag("table", "also print a table to stderr");
  add_runtime_options(args, "bf16");
  if (!args.parse(argv)) return 0;
  const std::string shape = args.get("shape");
  const int layers = int(args.get_int("layers"));
  const int64_t prefill = args.get_int("prefill"), steps = args.get_int("decode-steps"), context = args.get_int("context");
  const auto batches = args.get_int_list("batch");
  if (prefill < 1 || steps < 1 || context < 1) throw Error("--prefill, --decode-steps and --context must be positive");
  const std::string logits_mode = args.get("logits");
  if (logits_mode != "argmax" && logits_mode != "full")
    throw Error("--logits must be argmax or full, got '" + logits_mode + "'");
  const bool argmax_only = logits_mode == "argmax";
  for (int32_t b : batches) if (b < 1 || b > 256) throw Error("--batch sizes must be 1..256");

  const int64_t threads = args.get_int("threads");
  if (auto conc = args.get_opt("concurrency")) return concurrency_bench(args, *conc, shape, layers, threads);
  if (args.get_opt("kv-quantize-after") || args.get_opt("kv-quantize-to"))
    throw Error("--kv-quantize-after and --kv-quantize-to need --concurrency (they are engine options)");
  auto backend = make_backend(backend_options_from(args));
  const nlohmann::json cfg_json = shape_config(shape, layers);
  gemma4::Config cfg = gemma4::parse_config(cfg_json.dump(), "bench:" + shape);
  std::fprintf(stderr, "bench: building random %s weights with %d layers...\n", shape.c_str(), layers);
  std::optional<quant::AffineSpec> quantize;
  if (auto q = args.get_opt("quantize")) quantize = parse_quantize_spec(*q);
  decoder::DecoderWeights weights = gemma4::make_synthetic_weights(cfg, 1, 0.02f, quantize);
  const Streamed streamed_all = streamed_weights(weights);
  const std::size_t streamed = streamed_all.bytes;
  const int64_t params = weights.parameter_count;
  auto model = gemma4::make_model(cfg, std::move(weights), *backend, "", {.tensor_parallel = tensor_parallel_from(args)});

  nlohmann::json out;
  out["shape"] = shape;
  out["layers"] = layers;
  out["threads"] = backend->host_threads();
  out["tensor_parallel"] = tensor_parallel_from(args);
  out["kv_codec"] = args.get("kv-codec");
  out["parameters"] = params;
  out["streamed_weight_bytes_per_step"] = streamed;
  out["weights"] = quantize ? "affine q" + std::to_string(quantize->bits) + "/" + std::to_string(quantize->group_size)
                            : std::string("bf16");
  out["matmul_precision"] = matmul_precision_name(backend->matmul_precision());
  out["backend"] = backend->name();
  out["decode_logits"] = logits_mode;
  // Prefill is judged against the peak of the arithmetic its matmuls run.
  // Under int8 the quantized matmuls' peak is VPDPBUSD's (where the CPU has
  // it); the fraction is then of that peak's integer multiply-adds.
  const MatmulPrecision precision = backend->matmul_precision();
  std::string peak_name = "fma_peak";
  double bandwidth = 0, peak = 0;
  if (!args.flag_set("no-ceilings")) {
    bandwidth = backend->measure_read_bandwidth();
    const double fma = backend->measure_matmul_peak(MatmulPrecision::F32);
    out["ceilings"] = {{"read_bandwidth_gb_s", bandwidth}, {"fma_peak_gflop_s", fma}};
    peak = fma;
    if (precision == MatmulPrecision::Bf16) {
      peak = backend->measure_matmul_peak(MatmulPrecision::Bf16);
      peak_name = "bf16_dot_peak";
      out["ceilings"]["bf16_dot_peak_gflop_s"] = peak;
    } else if (precision == MatmulPrecision::Int8 && quantize) {
      if (const double int8 = backend->measure_matmul_peak(MatmulPrecision::Int8); int8 > 0) {
        peak = int8;
        peak_name = "int8_dot_peak";
        out["ceilings"]["int8_dot_peak_gop_s"] = peak;
      }
    }
  }

  uint32_t rng = 12345;
  auto next_token = [&] { rng = rng * 1664525u + 1013904223u; return int32_t(rng % 262144u); };
  const kv::CacheOptions copt = cache_options_for(args, *model);
  const bool profile = args.flag_set("profile");

  // Prefill: one row, the whole prompt in one step; best of two after a
  // first one. The first meets a fresh workspace (the backend's scratch,
  // backend/workspace.h): it grows it and touches its memory for the first
  // time, which later steps reuse. Its time is reported apart as the cold
  // start a process pays once per largest step size.
  {
    // One prefill in a fresh cache; the seconds of its forward.
    auto prefill_once = [&] {
      kv::KvCache cache(copt, *backend);
      const kv::RowId row = cache.create_row();
      ForwardBatch b;
      for (int64_t i = 0; i < prefill; ++i) b.add(row, i, next_token(), i + 1 == prefill);
      Tensor logits;
      const auto t0 = Clock::now();
      model->forward(b, cache, logits);
      return seconds_since(t0);
    };
    const double first = prefill_once();
    double best = 1e30;
    const ThreadPool::Stats pool_before = backend->host_pool_stats();
    for (int rep = 0; rep < 2; ++rep) best = std::min(best, prefill_once());
    const ThreadPool::Stats pool = backend->host_pool_stats();
    // Linear-layer flops: 2 per weight per token (the head only for the last token).
    const double head = double(cfg.vocab_size) * cfg.hidden_size;
    const double linear = streamed_all.elements - head;
    const double flops = 2.0 * linear * double(prefill) + 2.0 * head;
    out["prefill"] = {{"tokens", prefill}, {"seconds", best}, {"first_seconds", first}, {"tokens_per_s", prefill / best},
                      {"linear_gflop_s", flops / best / 1e9},
                      {"host_pool", host_pool_json(pool_before, pool)}};
    if (peak > 0) out["prefill"]["fraction_of_" + peak_name] = flops / best / 1e9 / peak;
    if (profile) out["prefill"]["profile"] = profiled(*backend, 1, prefill_once);
  }

  // Decode: B rows with `context` tokens each, then timed steps of B tokens.
  out["decode"] = nlohmann::json::array();
  for (int32_t B : batches) {
    kv::KvCache cache(copt, *backend);
    std::vector<kv::RowId> rows;
    Tensor logits;
    // The rows' contexts go in forwards of at most kWarmTokens tokens, a
    // long row's in several chunks, as the engine's chunked prefill would:
    // one forward's activations live until it ends, and 256 rows of 128
    // tokens in one would ask the workspace for tens of GB (E2B on the H200
    // ran out of memory), as did one row of 32,768 (an H100, 2026-12-05).
    constexpr int64_t kWarmTokens = 4096;
    ForwardBatch warm;
    for (int32_t r = 0; r < B; ++r) {
      rows.push_back(cache.create_row());
      for (int64_t i = 0; i < context; ++i) {
        warm.add(rows.back(), i, next_token(), i + 1 == context);
        if (int64_t(warm.tokens.size()) == kWarmTokens) {
          model->forward(warm, cache, logits);
          warm = ForwardBatch();
        }
      }
    }
    if (!warm.empty()) model->forward(warm, cache, logits);
    // The steps run in rounds, each just after its own bandwidth reading: on
    // a shared machine the bandwidth moves from second to second, so a step
    // is judged against the ceiling of its moment; the median round counts.
    // One decode step of every row; the seconds of its forward.
    RowPicks picks;
    auto decode_step = [&] {
      ForwardBatch b;
      for (kv::RowId r : rows) b.add(r, cache.length(r), next_token(), true, argmax_only);
      const auto t0 = Clock::now();
      model->forward(b, cache, logits, nullptr, &picks);
      return seconds_since(t0);
    };
    const int64_t rounds = bandwidth > 0 ? std::min<int64_t>(3, steps) : 1;
    const Backend::LaunchStats launches_before = backend->launch_stats();
    const ThreadPool::Stats pool_before = backend->host_pool_stats();
    double best = 1e30;
    std::vector<double> step_times;  // every step: the median is what a stream of steps sees
    std::vector<double> fractions;
    nlohmann::json paired = nlohmann::json::array();
    for (int64_t round = 0; round < rounds; ++round) {
      const double ceiling = bandwidth > 0 ? backend->measure_read_bandwidth(std::size_t(512) << 20, 1) : 0;
      double round_best = 1e30;
      for (int64_t s = round; s < steps; s += rounds) {
        step_times.push_back(decode_step());
        round_best = std::min(round_best, step_times.back());
      }
      best = std::min(best, round_best);
      if (ceiling > 0) {
        const double gbs = double(streamed) / round_best / 1e9;
        fractions.push_back(gbs / ceiling);
        paired.push_back({{"read_bandwidth_gb_s", ceiling}, {"weight_gb_s", gbs}});
      }
    }
    std::sort(step_times.begin(), step_times.end());
    const double median = step_times[step_times.size() / 2];
    nlohmann::json d = {{"batch", B}, {"step_seconds", best}, {"tokens_per_s", B / best},
                        {"step_seconds_median", median}, {"tokens_per_s_median", B / median},
                        {"weight_gb_s", double(streamed) / best / 1e9}};
    // How the steps' launches went out (a GPU backend: one graph per
    // repeated step; zeros where nothing is held back).
    const Backend::LaunchStats launches = backend->launch_stats();
    d["launches"] = {{"per_step", double(launches.launches - launches_before.launches) / double(steps)},
                     {"graph_replays", launches.replayed - launches_before.replayed},
                     {"graph_captures", launches.captured - launches_before.captured}};
    d["host_pool"] = host_pool_json(pool_before, backend->host_pool_stats());
    if (!fractions.empty()) {
      std::sort(fractions.begin(), fractions.end());
      d["fraction_of_bandwidth"] = fractions[fractions.size() / 2];
      d["rounds"] = paired;
    }
    if (profile) d["profile"] = profiled(*backend, 2, decode_step);
    out["decode"].push_back(d);
  }
  std::cout << out.dump(1) << "\n";
  if (args.flag_set("table")) {
    std::fprintf(stderr, "%-22s %12s %12s\n", "measurement", "tokens/s", "of ceiling");
    std::fprintf(stderr, "%-22s %12.1f %11.0f%%\n", "prefill", double(out["prefill"]["tokens_per_s"]),
                 100 * out["prefill"].value("fraction_of_" + peak_name, 0.0));
    for (const auto& d : out["decode"])
      std::fprintf(stderr, "decode batch %-9d %12.1f %11.0f%%\n", int(d["batch"]), double(d["tokens_per_s"]),
                   100 * d.value("fraction_of_bandwidth", 0.0));
  }
  return 0;
}

}  // namespace rowlm::cli
