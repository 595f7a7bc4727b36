// rowlm batch: many requests through one continuous batch, from JSON lines.
// Requests join at their arrival_step, so a schedule is reproducible; each
// result is what the request would give alone.

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "cli/commands.h"
#include "cli/model_source.h"
#include "cli/request_options.h"
#include "cli/runtime.h"
#include "core/error.h"

namespace rowlm::cli {

int run_batch(const std::vector<std::string>& argv) {
  Args args("batch", "Runs every request of a JSON-lines file through one continuous batch and writes one JSON\n"
                     "result per line, in input order. Input fields: id, prompt (text) or ids, max_tokens,\n"
                     "temperature (default 1), top_p, top_k, min_p, seed, stop, logprobs, presence_penalty,\n"
                     "frequency_penalty, repetition_penalty, logit_bias, ignore_eos, arrival_step (the engine\n"
                     "step at which the request is submitted; default 0).");
  add_model_argument(args)
      .option("input", "FILE", "requests, one JSON object per line ('-' = stdin)")
      .option("output", "FILE", "results, one JSON object per line ('-' = stdout)", "-");
  add_engine_options(args);
  if (!args.parse(argv)) return 0;

  std::vector<BatchLine> lines;
  {
    const std::string in_path = args.get("input");
    std::ifstream file;
    if (in_path != "-") {
      file.open(in_path);
      if (!file) throw Error("cannot open " + in_path);
    }
    std::istream& in = in_path == "-" ? std::cin : file;
    std::string text;
    for (int n = 1; std::getline(in, text); ++n) {
      if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = (in_path == "-" ? std::string("stdin") : in_path) + " line " + std::to_string(n);
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(text);
      } catch (const nlohmann::json::exception& e) {
        throw Error(where + ": invalid JSON: " + e.what());
      }
      lines.push_back(parse_batch_line(j, where));
      if (lines.back().id.is_null()) lines.back().id = n;
    }
  }
  const std::string out_path = args.get("output");
  std::ofstream out_file;
  if (out_path != "-") {
    out_file.open(out_path);
    if (!out_file) throw Error("cannot open " + out_path + " for writing");
  }
  std::ostream& out = out_path == "-" ? std::cout : out_file;

  EngineOptions opt = engine_options_from(args, model_source_from(args).dir, /*background=*/false);
  opt.max_waiting = std::max<int>(opt.max_waiting, int(lines.size()));
  auto engine = open_engine(opt);
  std::vector<std::shared_ptr<RequestHandle>> handles(lines.size());
  std::vector<std::string> errors(lines.size());
  const auto start = std::chrono::steady_clock::now();
  auto last_report = start;
  std::size_t submitted = 0, finished = 0;
  for (int64_t step = 0;; ++step) {
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (handles[i] || !errors[i].empty() || lines[i].arrival_step > step) continue;
      try {
        handles[i] = engine->submit(lines[i].request);
      } catch (const Error& e) {
        errors[i] = e.what();  // reported in its output line; the others go on
      }
      ++submitted;
    }
    const bool more = engine->step();
    if (!more && submitted == lines.size()) break;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_report > std::chrono::seconds(1)) {
      finished = 0;
      for (auto& h : handles) finished += h && h->done();
      const auto s = engine->stats();
      std::fprintf(stderr, "step %lld: %zu/%zu done, %lld running, %lld waiting, %.1f tokens/s\n", (long long)step,
                   finished, lines.size(), (long long)s.running, (long long)s.waiting,
                   double(s.generated_tokens) / std::chrono::duration<double>(now - start).count());
      last_report = now;
    }
  }
  int64_t generated = 0, failed = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    nlohmann::json j;
    if (!errors[i].empty()) {
      j = {{"finish_reason", "error"}, {"error", errors[i]}};
      ++failed;
    } else {
      const RequestResult r = handles[i]->result();
      j = result_json(r, lines[i].request.sampling.logprobs.value_or(0) > 0);
      generated += r.usage.completion_tokens;
      failed += r.finish == FinishReason::Error;
    }
    nlohmann::json line = {{"id", lines[i].id}};
    line.update(j);
    out << line.dump() << "\n";
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "%zu requests (%lld failed), %lld tokens generated in %.2f s (%.1f tokens/s)\n", lines.size(),
               (long long)failed, (long long)generated, secs, double(generated) / secs);
  if (const EngineStats s = engine->stats(); s.draft_proposed > 0)
    std::fprintf(stderr, "speculative decoding: %lld tokens drafted, %lld accepted (%.1f%%)\n",
                 (long long)s.draft_proposed, (long long)s.draft_accepted,
                 100.0 * double(s.draft_accepted) / double(s.draft_proposed));
  return failed ? 1 : 0;
}

}  // namespace rowlm::cli
