// Speculative decoding benchmark: one request at a time, greedy, on the
// bundled model, plain and with each drafter; prints one JSON object.
//
// For every configuration and prompt it checks that the tokens equal plain
// decoding's, and reports tokens/s (from the calling thread's CPU time: the
// engine runs in manual mode on one thread, so other processes on a shared
// machine do not count; wall-clock figures are printed beside it), the
// speedup over plain decoding, the draft acceptance rate and the tokens
// emitted per target forward.
//
// Usage: spec_bench [--model DIR] [--draft-model DIR] [--assistant DIR|random|random-ordered]
//                   [--max-tokens N] [--reps N] [--draft-tokens G,G,...] [--threads N]
//
// --assistant adds a Gemma 4 assistant drafter (model_type gemma4_assistant)
// for the model; "random" writes a random one for the bundled model's shapes,
// "random-ordered" one with ordered embeddings (64 centroids, 4 scored: 1/16
// of the vocabulary), whose drafts are never right: what is measured is the
// drafter's cost.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_clock.h"
#include "io/temp_dir.h"
#include "model/gemma4_assistant_test_util.h"
#include "rowlm/engine.h"

using namespace rowlm;

using bench::now_s;
using bench::thread_cpu_s;

namespace {



const char* const kPrompts[] = {
    "In the beginning",
    "And the king said unto",
    "A river is",
    "The Python interpreter",
    "Lists in Python",
};

struct Run {
  std::vector<std::vector<int32_t>> tokens;  // per prompt
  double cpu_s = 1e30, wall_s = 1e30;        // least disturbed rep, all prompts
  int64_t generated = 0, steps = 0, proposed = 0, accepted = 0;
};

Run measure(const std::string& model, const std::string& draft, int gamma, int max_tokens, int reps, int threads) {
  EngineOptions o;
  o.model_dir = model;
  o.threads = threads;
  o.background = false;
  o.prefix_cache = false;  // every repetition computes its prompt
  o.kv_budget_bytes = std::size_t(256) << 20;
  o.draft = draft;
  o.draft_tokens = gamma;
  auto engine = Engine::create(o);
  Run run;
  for (int rep = 0; rep < reps; ++rep) {
    const EngineStats before = engine->stats();
    double cpu = 0, wall = 0;
    std::vector<std::vector<int32_t>> tokens;
    for (const char* prompt : kPrompts) {
      Request r;
      r.prompt = prompt;
      r.sampling.temperature = 0;
      r.sampling.max_tokens = max_tokens;
      r.ignore_eos = true;
      const double c0 = thread_cpu_s(), w0 = now_s();
      auto h = engine->submit(r);
      engine->run_until_idle();
      cpu += thread_cpu_s() - c0;
      wall += now_s() - w0;
      tokens.push_back(h->result().token_ids);
    }
    const EngineStats after = engine->stats();
    run.cpu_s = std::min(run.cpu_s, cpu);
    run.wall_s = std::min(run.wall_s, wall);
    run.tokens = tokens;
    run.generated = after.generated_tokens - before.generated_tokens;
    run.steps = after.steps - before.steps;
    run.proposed = after.draft_proposed - before.draft_proposed;
    run.accepted = after.draft_accepted - before.draft_accepted;
  }
  return run;
}

std::vector<int> int_list(const std::string& s) {
  std::vector<int> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const std::size_t comma = s.find(',', start);
    out.push_back(std::atoi(s.substr(start, comma - start).c_str()));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = std::string(ROWLM_SOURCE_DIR) + "/models/rowlm-tiny";
  std::string draft_model = std::string(ROWLM_SOURCE_DIR) + "/models/rowlm-tiny-draft";
  std::string assistant;
  int max_tokens = 128, reps = 3, threads = 1;
  std::vector<int> gammas = {2, 3, 4, 6};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "spec_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model") model = value();
    else if (a == "--draft-model") draft_model = value();
    else if (a == "--assistant") assistant = value();
    else if (a == "--max-tokens") max_tokens = std::atoi(value().c_str());
    else if (a == "--reps") reps = std::atoi(value().c_str());
    else if (a == "--threads") threads = std::atoi(value().c_str());
    else if (a == "--draft-tokens") gammas = int_list(value());
    else {
      std::fprintf(stderr, "usage: spec_bench [--model DIR] [--draft-model DIR] [--assistant DIR|random|random-ordered] "
                           "[--max-tokens N] [--reps N] [--draft-tokens G,G,...] [--threads N]\n");
      return 2;
    }
  }
  if (max_tokens < 1 || reps < 1 || threads < 0) {
    std::fprintf(stderr, "spec_bench: --max-tokens and --reps must be positive, --threads not negative\n");
    return 2;
  }

  std::optional<TempDir> random_assistant;
  const std::string assistant_name = assistant;
  if (assistant == "random" || assistant == "random-ordered") {
    random_assistant.emplace("spec_bench_assistant");
    rowlm::test::AssistantShape shape;  // the bundled model's: vocab 8192, hidden 256, 1 KV head of 64 / 128
    shape.hidden = 128;
    shape.intermediate = 512;
    shape.heads = 4;
    if (assistant == "random-ordered") {
      shape.centroids = 64;
      shape.top_k = 4;
    }
    rowlm::test::write_random_assistant(random_assistant->path(), shape, 7);
    assistant = random_assistant->path();
  }

  nlohmann::json out;
  out["model"] = model;
  out["draft_model"] = draft_model;
  if (!assistant.empty()) out["assistant"] = assistant_name;
  out["threads"] = threads;
  out["prompts"] = std::size(kPrompts);
  out["max_tokens"] = max_tokens;
  out["reps"] = reps;
  const Run plain = measure(model, "", 1, max_tokens, reps, threads);
  auto entry = [&](const std::string& name, int gamma, const Run& r) {
    nlohmann::json j = {{"drafter", name},
                        {"generated_tokens", r.generated},
                        {"cpu_s", r.cpu_s},
                        {"wall_s", r.wall_s},
                        {"tokens_per_cpu_s", double(r.generated) / r.cpu_s},
                        {"tokens_per_wall_s", double(r.generated) / r.wall_s},
                        {"speedup_cpu", plain.cpu_s / r.cpu_s},
                        {"speedup_wall", plain.wall_s / r.wall_s},
                        {"tokens_per_target_step", double(r.generated) / double(std::max<int64_t>(1, r.steps))},
                        {"identical_to_plain", r.tokens == plain.tokens}};
    if (gamma) {
      j["draft_tokens"] = gamma;
      j["proposed"] = r.proposed;
      j["accepted"] = r.accepted;
      j["acceptance_rate"] = r.proposed ? double(r.accepted) / double(r.proposed) : 0.0;
    }
    return j;
  };
  out["runs"].push_back(entry("plain", 0, plain));
  for (int g : gammas) {
    std::fprintf(stderr, "spec_bench: draft tokens %d...\n", g);
    out["runs"].push_back(entry("ngram", g, measure(model, "ngram", g, max_tokens, reps, threads)));
    out["runs"].push_back(entry("model", g, measure(model, draft_model, g, max_tokens, reps, threads)));
    if (!assistant.empty())
      out["runs"].push_back(entry("assistant", g, measure(model, assistant, g, max_tokens, reps, threads)));
  }
  std::cout << out.dump(1) << "\n";
  std::fprintf(stderr, "%-9s %5s %12s %12s %9s %11s %9s\n", "drafter", "gamma", "tok/cpu-s", "tok/wall-s", "speedup",
               "acceptance", "identical");
  for (const auto& r : out["runs"])
    std::fprintf(stderr, "%-9s %5d %12.1f %12.1f %8.2fx %10.1f%% %9s\n", r["drafter"].get<std::string>().c_str(),
                 r.value("draft_tokens", 0), double(r["tokens_per_cpu_s"]), double(r["tokens_per_wall_s"]),
                 double(r["speedup_cpu"]), 100 * r.value("acceptance_rate", 0.0),
                 r["identical_to_plain"].get<bool>() ? "yes" : "NO");
  return 0;
}
